"""Transformer-family models to the edge backends: ViT with a flexible image size and Whisper with a flexible
sequence to Core ML, Llama to a DLC; what `check --targets` says before converting (blockers with hints, and the
rewrites each build applies); and an approximation taken only when asked (--allow-approx gelu-tanh).

    python examples/transformers_to_edge.py [OUT_DIR]

Needs ``pip install 'onnxbridge[torch,coreml,qnn]' torch==2.13.0``. Every hop is validated; flexible packages at
several sizes.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from transformers import flexible_axes  # noqa: E402  (examples/transformers.py, beside this script)

import onnxbridge  # noqa: E402

HERE = Path(__file__).resolve().parent / "transformers.py"


def _show(name: str, report: dict) -> bool:
    for hop in report["hops"]:
        worst = max((o.get("max_abs") or 0.0 for o in hop["outputs"]), default=0.0)
        print(f"{name:26s} {hop['from']:>6s} -> {hop['to']:<18s} {hop['status']:7s} max abs diff {worst:.1e} "
              f"on {hop.get('samples', '?')} sample(s)")
    for note in report["notes"]:
        if "legalized" in note or "allow-approx" in note:
            print(f"{'':26s} note: {note[:110]}")
    return report["status"] == "passed"


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ok = True
    for name, to, suffix in (("vit", "coreml", "mlpackage"), ("whisper_encoder", "coreml", "mlpackage"),
                             ("llama_decoder", "dlc", "dlc")):
        flexible = flexible_axes(name) if to == "coreml" else []
        report = onnxbridge.convert(f"{HERE}:{name}", to=to, output=out / f"{name}.{suffix}", opset=17,
                                    dynamic=flexible, report=out / f"{name}_{to}.json").report
        ok &= _show(f"{name} ({to}{', flexible' if flexible else ''})", report)

    onnx_path = out / "wav2vec2.onnx"  # exact GELU (Erf): the QNN rules rewrite it; --allow-approx may too
    onnxbridge.convert(f"{HERE}:wav2vec2_features", output=onnx_path, opset=17)
    check = onnxbridge.check_targets(onnx_path, ["coreml", "dlc"])
    for target, row in check["targets"].items():
        print(f"check {target}: {len(row['blockers'])} blocker(s), rewrites: {', '.join(row['rewrites'][:3]) or '-'}"
              f"{' ...' if len(row['rewrites']) > 3 else ''}")
        for blocker, hint in zip(row["blockers"], row["hints"]):
            print(f"  {blocker[:100]}\n    hint: {hint}")
    report = onnxbridge.convert(onnx_path, to="coreml", output=out / "wav2vec2_tanh.mlpackage",
                                allow_approx=["gelu-tanh"], atol=1e-3).report
    ok &= _show("wav2vec2 (coreml, gelu-tanh)", report)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
