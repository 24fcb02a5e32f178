"""Killed runs and endless models: what a CI under faults sees.

    python examples/killed_runs.py [OUT_DIR]

1. A 283-byte ONNX Loop of 10^15 iterations is refused before anything runs it.
2. A Loop that would run for minutes ends at `--timeout 3`: exit 2, one line naming the step, no output.
3. A conversion killed with SIGKILL mid-run leaves the previous output and its report as they were, and nothing of
   the killed run (its worker included) is alive 5 s later.

Exits 0 when every one of these behaves (the clean conversion passed); prints what happened.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

CLI = [sys.executable, "-m", "onnxbridge.cli.main"]


def loop(trip: int) -> onnx.ModelProto:
    """y = x + trip: a Loop adding 1 per iteration, its condition constant true."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("Add", ["v_in", "one"], ["v_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("v_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [1])],
        [h.make_tensor("one", T.FLOAT, [1], [1.0])])
    graph = h.make_graph([h.make_node("Loop", ["M", "cond", "x"], ["y"], body=body, name="spin")], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [1])], [h.make_tensor_value_info("y", T.FLOAT, [1])],
                         [h.make_tensor("M", T.INT64, [], [trip]), h.make_tensor("cond", T.BOOL, [], [True])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def dense(width: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(width).standard_normal((64, width)).astype(np.float32), "W")
    graph = h.make_graph([h.make_node("MatMul", ["x", "W"], ["y"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [2, 64])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2, width])], [w])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def workers_of(pid: int) -> list[int]:
    """Live worker processes started by process ``pid`` (they carry its pid in their environment)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if any(v.startswith(f"ONNXBRIDGE_WORKER_PARENT={pid},".encode()) for v in env) and state != "Z":
            found.append(int(entry.name))
    return found


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir) / "killed"
    out.mkdir(parents=True, exist_ok=True)
    ok = True

    def expect(what: str, good: bool, said: str) -> None:
        nonlocal ok
        ok &= good
        print(f"{'ok' if good else 'WRONG'}: {what}: {said}")

    bomb = out / "bomb.onnx"
    onnx.save(loop(10**15), bomb)
    done = subprocess.run([*CLI, "convert", bomb, "-o", out / "bomb-out.onnx"], capture_output=True, text=True)
    expect(f"a {bomb.stat().st_size}-byte Loop of 10^15 iterations", done.returncode == 2, done.stderr.strip())

    long = out / "long.onnx"
    onnx.save(loop(3 * 10**8), long)
    t = time.monotonic()
    done = subprocess.run([*CLI, "convert", long, "-o", out / "long-out.onnx", "--timeout", "3"], capture_output=True,
                          text=True)
    expect(f"a Loop running for minutes, --timeout 3 (ended after {time.monotonic() - t:.1f} s)",
           done.returncode == 2 and not (out / "long-out.onnx").exists(), done.stderr.strip())

    onnx.save(dense(5), out / "a.onnx")
    onnx.save(dense(7), out / "b.onnx")
    model, report = out / "m.xml", out / "m.json"
    done = subprocess.run([*CLI, "-q", "convert", out / "b.onnx", "-o", model, "--report", report])
    before = model.read_bytes(), report.read_bytes()
    killed = subprocess.Popen([*CLI, "-q", "convert", out / "a.onnx", "-o", model, "--report", report,
                               "--samples", "1000", "--latency-runs", "1000"])
    end = time.monotonic() + 60
    while not list(out.glob(f".{model.name}.onnxbridge-*/{model.name}")) and time.monotonic() < end:
        time.sleep(0.02)  # until its model is built, beside the output: it is validating now
    workers = workers_of(killed.pid)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    end = time.monotonic() + 5
    while workers_of(killed.pid) and time.monotonic() < end:
        time.sleep(0.1)
    status = json.loads(report.read_text())["status"]
    kept = (model.read_bytes(), report.read_bytes()) == before
    expect("a conversion killed mid-run", done.returncode == 0 and kept and bool(workers)
           and not workers_of(killed.pid),
           f"the previous {model.name} and its report ({status}) {'stand' if kept else 'were replaced'}; "
           f"its worker {'is gone' if not workers_of(killed.pid) else 'lives on'}")
    print("every fault handled; the clean conversion passed" if ok else "some faults were not handled")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
