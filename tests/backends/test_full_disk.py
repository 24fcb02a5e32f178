"""A backend's native writer on a full disk: one line and exit 2 ("cannot write '<path>': <the system's reason>"),
never exit 4 with "basic_ios::clear" nor shutil's multi-KB list of failed copies. A full disk is simulated by a file
size limit (RLIMIT_FSIZE, SIGXFSZ ignored): writes past it fail with EFBIG, which is treated as ENOSPC and EDQUOT
are (``onnxbridge.plugins.FULL``)."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import missing_modules

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 1_000_000  # bytes a file may hold; the artifacts below hold a 4 MB constant, their ONNX model 144 bytes
TOO_LARGE = os.strerror(27)  # EFBIG: "File too large"


def _folded_constant(path: Path, n: int = 1_000_000) -> Path:
    """y = x + ConstantOfShape([n], 0.5): a tiny ONNX file whose backends fold the constant into n floats."""
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["w"],
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
                              [numpy_helper.from_array(np.array([n], np.int64), "shape")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _limited(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _run(args: list, cwd: Path, limit: int | None = LIMIT) -> subprocess.CompletedProcess:
    (cwd / "tmp").mkdir(exist_ok=True)  # the run's scratch: checked for leftovers
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT), "TMPDIR": str(cwd / "tmp")}
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env, preexec_fn=_limited(limit) if limit else None)


@pytest.mark.parametrize("output, needs", [("o.xml", "openvino"),
                                           pytest.param("o.mlpackage", "coremltools", marks=pytest.mark.slow)])
@pytest.mark.slow
def test_a_full_disk_under_a_backend_writer_is_one_line(tmp_path, output, needs):
    if missing_modules(needs):
        pytest.skip(f"needs {needs}")
    model = _folded_constant(tmp_path / "m.onnx")
    r = _run(["-m", "onnxbridge.cli.main", "convert", model, "-o", output, "--report", "r.json"], tmp_path)
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, err[-2000:])
    assert len(err.splitlines()) == 1 and err.startswith("error: cannot write ") and len(err) < 300, err
    assert err.split(": ")[-1].split(" (")[0] == TOO_LARGE, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "tmp"]  # no artifact, no report
    assert not [p.name for p in (tmp_path / "tmp").iterdir() if "onnxbridge" in p.name]  # no scratch left


@pytest.mark.slow  # coremltools' import and conversion: 10-20 s
def test_coreml_saving_to_a_full_disk_names_the_package(tmp_path):
    """coremltools copies its package to the output with shutil.copytree, whose error on a full disk is a list of
    every failed copy: the disk fills only for the save here (the limit is set once coremltools has converted)."""
    if missing_modules("coremltools"):
        pytest.skip("needs coremltools")
    model = _folded_constant(tmp_path / "m.onnx")
    script = textwrap.dedent(f"""
        import resource, signal
        from pathlib import Path
        from onnxbridge.backends.coreml import build, package
        from onnxbridge.errors import BadInputError

        save = package._save
        def full_then_save(*args, **kwargs):
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))
            return save(*args, **kwargs)
        package._save = full_then_save
        try:
            build(Path("m.onnx"), Path("out") / "o.mlpackage")
        except BadInputError as exc:
            print(exc.one_line())
    """)
    r = _run(["-c", script], tmp_path, limit=None)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == f"cannot write 'out/o.mlpackage': {TOO_LARGE}", r.stdout[-2000:]
    assert not (tmp_path / "out" / "o.mlpackage").exists()


def test_a_failure_that_is_not_the_disk_is_raised_as_it_was(tmp_path):
    """``native_writes`` probes the folder: where it can still grow, the writer's own error stands."""
    from onnxbridge.errors import BadInputError
    from onnxbridge.plugins import cannot_grow, native_writes

    (tmp_path / "half.bin").write_bytes(b"x" * 100)
    with pytest.raises(RuntimeError, match="basic_ios::clear"):
        with native_writes(tmp_path, f"'{tmp_path}'"):
            raise RuntimeError("basic_ios::clear: iostream error")
    assert (tmp_path / "half.bin").read_bytes() == b"x" * 100  # cut back after the probe
    assert cannot_grow(tmp_path / "gone") is None
    with pytest.raises(BadInputError, match="already one line"):
        with native_writes(tmp_path, "x"):
            raise BadInputError("already one line")
