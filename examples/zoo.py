"""The zoo on a tiny slice: three architectures from three libraries (torchvision, transformers, scikit-learn) through
ONNX and OpenVINO with ``benchmarks/zoo.py``, each model in a process of its own, then the coverage table it writes.

    python examples/zoo.py [OUT_DIR]

Needs ``pip install 'onnxbridge[zoo,openvino]'``. The whole zoo (156 architectures, every backend) is
``benchmarks/zoo.py --out zoo.json --table docs/coverage.md``; its last table is docs/coverage.md.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLICE = "^(squeezenet1_1|bert|sk_pca)$"


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results, table = out / "zoo.json", out / "coverage.md"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "zoo.py"), "--models", SLICE, "--targets",
                    "onnx,openvino", "--out", str(results), "--table", str(table)], check=True)
    text = table.read_text(encoding="utf-8")
    print(text[text.index("## Totals"):text.index("## Most common causes")])
    cells = json.loads(results.read_text())["cells"]
    for c in cells:
        print(f"{c['model']:16s} {c['target']:10s} {c['status']:8s} {c['seconds']:5.1f} s")
    return 0 if all(c["status"] == "passed" for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
