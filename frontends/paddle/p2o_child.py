"""paddle2onnx in a process of its own, run by whichever Python has it: this environment's, or one of its own
(paddle2onnx pins ``onnx<=1.17``, so ``onnxbridge[all]`` leaves it out; ``onnxbridge setup paddle2onnx`` makes that
environment). It imports nothing from onnxbridge, so any Python with paddle and paddle2onnx can run it.

``python p2o_child.py REQUEST.json``: the request holds program, params, save_file, opset, scratch and result_file.
The ONNX bytes are taken from paddle2onnx directly (with a save path it pip-installs onnx_graphsurgeon at run time)
and written to save_file; result_file gets ``{"ok": true, "bytes": n, "version": v}`` or ``{"ok": false, "error":
message}`` (paddle2onnx only logs the errors of its Python part, then fails on the model it never made: the logged
message is the one returned). paddle2onnx aborts the process on an operator it lacks or an opset above what it
emits: the caller sees the signal and the last lines printed.
"""
import json
import os
import sys
import tempfile
import warnings


def convert(request: dict) -> dict:
    os.environ.setdefault("GLOG_minloglevel", "2")
    os.environ.setdefault("FLAGS_call_stack_level", "0")
    tempfile.tempdir = request["scratch"]
    warnings.filterwarnings("ignore")
    import paddle2onnx
    from paddle2onnx.utils import logging as p2o_logging

    version = getattr(paddle2onnx, "__version__", "")
    logged = []
    p2o_logging.error = lambda message="", *_, **__: logged.append(" ".join(str(message).split()))
    try:
        data = paddle2onnx.export(request["program"], request["params"], None, opset_version=request["opset"],
                                  auto_upgrade_opset=True, enable_onnx_checker=True, enable_optimize=True,
                                  verbose=False)
    except Exception as exc:  # the logged error is the real one
        first = next((m for m in logged if m and m != "None"), "")
        return {"ok": False, "error": first or f"{type(exc).__name__}: {exc}", "version": version}
    if not data:
        first = next((m for m in logged if m and m != "None"), "")
        return {"ok": False, "error": "returned an empty model" + (f": {first}" if first else ""), "version": version}
    with open(request["save_file"], "wb") as f:
        f.write(data)
    return {"ok": True, "bytes": len(data), "version": version}


def main(path: str) -> None:
    with open(path) as f:
        request = json.load(f)
    result = convert(request)
    with open(request["result_file"], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
