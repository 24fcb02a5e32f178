"""Convert the example transformer with --optimize: the graph is simplified (onnxscript's optimizer), validated
against the graph before it as a hop of its own, and the report records what was removed.

Run: .venv/bin/python examples/optimize.py [OUTDIR]   (exit 1 if a hop fails)
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import onnxbridge

HERE = Path(__file__).resolve().parent


def main(outdir: Path) -> int:
    outdir.mkdir(parents=True, exist_ok=True)
    result = onnxbridge.convert(f"{HERE / 'models.py'}:transformer", output=outdir / "transformer.onnx", opset=17,
                                dynamic=["x:0:batch"], optimize=True, report=outdir / "transformer.json")
    record = result.report["artifact"]["optimization"]
    for hop in result.report["hops"]:
        print(f"{hop['from']} -> {hop['to']}: {hop['status']}")
    removed = ", ".join(f"{op} {n}" for op, n in sorted(record["removed"].items(), key=lambda kv: -kv[1]))
    print(f"{record['before']} nodes -> {record['after']} ({record['library']}); removed: {removed}")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())))
