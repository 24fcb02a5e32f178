"""Verdicts that are facts: what onnxbridge refuses to call "passed", built in code and checked here.

    python examples/true_verdicts.py [OUT_DIR]

1. fp16 with fp16 arithmetic: a model whose intermediate ``h * 60000`` leaves fp16's range fails its fp16
   conversion, naming the node (onnxruntime's CPU provider alone computes it in fp32 and would say "passed");
   the example transformer block converted to fp16 with a dynamic batch passes, and its file loads in onnxruntime
   with default session options.
2. A precision that is not applied is refused: int8 to plain ONNX is exit 2, not an fp32 file with int8 tolerances.
3. Names are checked: ``--dynamic images:0`` on a model whose input is ``x`` is exit 2.
4. A native crash is an error, not a signal: a file that makes onnxruntime segfault while it opens a session
   gives a one-line error (exit 4) and the run goes on.

Exits 0 when every one of these behaves; prints what happened.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # noqa: E402  (the factories beside this script)

import onnxbridge  # noqa: E402
from onnxbridge.errors import BadInputError, NativeCrash  # noqa: E402


class Overflow(torch.nn.Module):
    def forward(self, h):
        return torch.relu(h * 60000) / 60000


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    ok = True

    torch.manual_seed(0)
    rep = onnxbridge.convert(Overflow(), (torch.rand(2, 8) * 6 - 3,), output=out / "overflow_fp16.onnx",
                             precision="fp16").report
    half = rep["hops"][-1]  # the export checks out in fp32; the fp16 model's own hop is where it overflows
    overflow_caught = rep["status"] == "failed" and any("left fp16's range" in e for e in half["errors"])
    print(f"1. fp16 overflow: {rep['status']} on {half['from']} -> {half['to']} "
          f"({half['errors'][-1] if half['errors'] else ''})")
    ok &= overflow_caught

    model, sample = models.transformer()
    rep = onnxbridge.convert(model, sample, output=out / "transformer_fp16.onnx", precision="fp16",
                             dynamic={"x": {0: "batch"}}).report
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / "transformer_fp16.onnx"), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": np.ones((3, 10, 32), np.float32)})[0]
    print(f"   transformer fp16, dynamic batch: {rep['status']}; loads with default options, output {list(y.shape)}")
    ok &= rep["status"] == "passed"

    try:
        onnxbridge.convert(*models.cnn(), output=out / "cnn_int8.onnx", precision="int8")
        print("2. int8 to ONNX: NOT refused")
        ok = False
    except BadInputError as exc:
        print(f"2. int8 to ONNX refused: {exc.one_line()[:100]}...")

    try:
        onnxbridge.convert(*models.cnn(), output=out / "cnn.onnx", dynamic=["images:0"])
        print("3. --dynamic images:0: NOT refused")
        ok = False
    except BadInputError as exc:
        print(f"3. unknown name refused: {exc.one_line()[:100]}...")

    crash = out / "crashes_onnxruntime.onnx"
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]), helper.make_node("MatMul", ["t", "w"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 10, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [10, 2, 8])],
        [numpy_helper.from_array(np.ones((32, 8), np.float16), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), crash)
    try:
        rep = onnxbridge.validate(crash, crash)
        print(f"4. this onnxruntime opens the file without crashing: {rep['status']}")
    except NativeCrash as exc:
        print(f"4. native crash as an error (exit {exc.exit_code}): {exc.one_line()[:120]}")
    rep = onnxbridge.convert(*models.cnn(), output=out / "after_crash.onnx").report
    print(f"   the next conversion: {rep['status']}")
    ok &= rep["status"] == "passed"
    print("all verdicts true: passed" if ok else "a verdict was not true: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
