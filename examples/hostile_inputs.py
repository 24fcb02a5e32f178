"""Hostile inputs: what onnxbridge refuses before anything in them runs, each with its one-line error.

    python examples/hostile_inputs.py [OUT_DIR]

1. A TorchScript model whose forward maps a file (``torch.from_file``) is refused without --trust: the marker file
   it would create never appears.
2. A 200-byte ONNX file whose ConstantOfShape would allocate 4.7 GB is refused before any session opens.
3. A graph with a cycle (onnx's shape inference crashes the process on it) is refused first.
4. A --report that would overwrite the source model is refused before anything is written.
5. A clean model still converts and passes.

Exits 0 when every one of these behaves; prints what happened.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper


class ReadsAFile(torch.nn.Module):
    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def forward(self, x):
        return x + torch.from_file(self.path, shared=True, size=4)


def _constant_of_shape(size: list[int]) -> onnx.ModelProto:
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["ones"], name="cos",
                              value=numpy_helper.from_array(np.array([1.0], np.float32))),
             helper.make_node("Mul", ["x", "ones"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size[-1]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, size)],
                              [numpy_helper.from_array(np.array(size, np.int64), "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnxbridge.cli.main", *map(str, args)], capture_output=True,
                          text=True)


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir) / "hostile"
    out.mkdir(parents=True, exist_ok=True)
    ok = True

    def expect(what: str, result: subprocess.CompletedProcess, code: int, also: bool = True) -> None:
        nonlocal ok
        good = result.returncode == code and also and "Traceback" not in result.stderr
        ok &= good
        print(f"{'ok' if good else 'WRONG'}: {what}: exit {result.returncode}; {result.stderr.strip() or 'passed'}")

    marker = out / "marker.bin"
    marker.unlink(missing_ok=True)
    torch.jit.script(ReadsAFile(str(marker))).save(str(out / "reads_a_file.pt"))
    expect("TorchScript that maps a file", _cli("convert", out / "reads_a_file.pt", "-o", out / "x.onnx",
                                                "--input-shape", "x:4"), 2, not marker.exists())

    bomb = out / "bomb.onnx"
    bomb.write_bytes(_constant_of_shape([25000, 50000]).SerializeToString())
    expect(f"a {bomb.stat().st_size}-byte file that would allocate 4.7 GB",
           _cli("convert", bomb, "-o", out / "bomb-out.onnx"), 2)

    cycle = _constant_of_shape([2, 3])
    cycle.graph.node[0].input[0] = "y"
    (out / "cycle.onnx").write_bytes(cycle.SerializeToString())
    expect("a graph with a cycle", _cli("check", out / "cycle.onnx", "--targets", "coreml", "--opset", "13"), 2)

    clean = out / "clean.onnx"
    clean.write_bytes(_constant_of_shape([2, 3]).SerializeToString())
    before = clean.read_bytes()
    expect("--report naming the source", _cli("convert", clean, "-o", out / "c.onnx", "--report", clean), 2,
           clean.read_bytes() == before)
    expect("the clean model", _cli("--quiet", "convert", clean, "-o", out / "c.onnx", "--report",
                                   out / "c.json"), 0)
    print("all hostile inputs refused; the clean model passed" if ok else "some inputs were not handled")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
