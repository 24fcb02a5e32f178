"""Hostile files given where onnxbridge reads a user's path: an .npz zip bomb as --inputs or --calibration, a FIFO or
a link to /dev/zero as an inputs file, a source model, a factory file or `inspect`'s model. Each is refused with one
line and exit 2 before it is read (a regression would hang, or unpack gigabytes: the subprocesses time out)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from numpy.lib import format as npy

from onnxbridge.errors import BadInputError, TooLargeError
from onnxbridge.inputfile import load_npz
from tests.conftest import missing_modules
from tests.helpers.fuzzing import mlp

LIMIT_MB = 64  # ONNXBRIDGE_MAX_TENSOR_MB in these tests: the bomb declares far more


def _cli(*args, env=None):
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "onnxbridge.cli.main", *map(str, args)], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "NO_COLOR": "1", **(env or {})})
    r.seconds = time.perf_counter() - t
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r


def _refused(r, *needles: str) -> str:
    """The one error line of an exit-2 run, checked to hold every needle."""
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1, (r.returncode, r.stderr[-2000:])
    assert all(n in errors[0] for n in needles), errors[0]
    return errors[0]


def _bomb(path: Path, megabytes: int, name: str = "x") -> Path:
    """An .npz whose one float32 member holds ``megabytes`` MB of zeros, written in chunks (deflate: ~1000:1)."""
    count = megabytes * 2**20 // 4
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
            npy.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (count // 4, 4)})
            chunk = bytes(2**20)
            for _ in range(megabytes):
                f.write(chunk)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile-inputs")
    model = folder / "m.onnx"
    model.write_bytes(mlp().SerializeToString())
    fifo = folder / "fifo.npz"
    os.mkfifo(fifo)
    for name in ("fifo.onnx", "fifo.py"):
        os.mkfifo(folder / name)
    for name in ("zero.onnx", "zero.npz", "zero.dlc"):
        (folder / name).symlink_to("/dev/zero")
    return {"folder": folder, "model": model, "bomb": _bomb(folder / "bomb.npz", 300)}


# --- the zip bomb ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["convert --inputs", "convert --calibration", "validate --inputs"])
@pytest.mark.fast_cases("validate --inputs")
def test_an_npz_bomb_is_refused_before_it_unpacks(files, how):
    """300 MB declared in a 300 kB file, over the 64 MB tensor limit: refused from the zip directory, fast."""
    model, bomb, out = files["model"], files["bomb"], files["folder"] / f"out-{how.split()[1][2:]}"
    if how == "convert --calibration":
        if missing_modules("openvino"):
            pytest.skip("openvino is not installed")
        args = ["convert", model, "--to", "openvino", "--precision", "int8", "--calibration", bomb, "-o",
                out.with_suffix(".xml")]
    elif how == "convert --inputs":
        args = ["convert", model, "--inputs", bomb, "-o", out.with_suffix(".onnx")]
    else:
        args = ["validate", model, model, "--inputs", bomb]
    assert bomb.stat().st_size < 2 * 2**20
    r = _cli(*args, env={"ONNXBRIDGE_MAX_TENSOR_MB": str(LIMIT_MB)})
    _refused(r, "bomb.npz", "'x.npy'", "300.0 MB", f"over the {LIMIT_MB}.0 MB", "ONNXBRIDGE_MAX_TENSOR_MB")
    assert r.seconds < 30
    assert not list(files["folder"].glob("out-*"))


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _header(shape, descr="<f4") -> bytes:
    import io

    buffer = io.BytesIO()
    npy.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def test_an_npy_header_declaring_terabytes_is_refused_before_its_data_is_read(tmp_path):
    """The zip directory declares 64 bytes; the header a million by a million floats: the header is checked."""
    liar = _archive(tmp_path / "liar.npz", {"x.npy": _header((10**6, 10**6)) + bytes(64)})
    with pytest.raises(TooLargeError, match=r"'liar.npz': array 'x' of shape \[1000000, 1000000\] would take 3.6 TB"):
        load_npz(liar)
    folder = tmp_path / "arrays"
    folder.mkdir()
    (folder / "x.npy").write_bytes(_header((10**6, 10**6)) + bytes(64))
    with pytest.raises(TooLargeError, match="x.npy' of shape"):
        load_npz(folder)


def test_an_archive_over_the_memory_limit_is_refused(tmp_path, monkeypatch):
    """Each member under the tensor limit, all of them together over ONNXBRIDGE_MAX_MEMORY_MB."""
    data = np.zeros(2**18, np.float32)  # 1 MB each
    np.savez(tmp_path / "wide.npz", **{f"a{i}": data for i in range(6)})
    monkeypatch.setenv("ONNXBRIDGE_MAX_MEMORY_MB", "4")
    with pytest.raises(TooLargeError, match="its 6 members would unpack to 6.0 MB, over the 4.0 MB memory limit"):
        load_npz(tmp_path / "wide.npz")
    monkeypatch.setenv("ONNXBRIDGE_MAX_MEMORY_MB", "8")
    assert sorted(load_npz(tmp_path / "wide.npz")) == [f"a{i}" for i in range(6)]


def test_arrays_are_read_as_numpy_writes_them(tmp_path):
    """The guarded reader gives what np.load gives: names, dtypes, Fortran order, a folder of .npy."""
    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "ids": np.asfortranarray(np.arange(6).reshape(2, 3)),
              "flag": np.array(True)}
    np.savez_compressed(tmp_path / "a.npz", **arrays)
    folder = tmp_path / "arrays"
    folder.mkdir()
    for name, value in arrays.items():
        np.save(folder / f"{name}.npy", value)
    for loaded in (load_npz(tmp_path / "a.npz"), load_npz(folder)):
        assert sorted(loaded) == sorted(arrays)
        for name, value in arrays.items():
            assert loaded[name].dtype == value.dtype and np.array_equal(loaded[name], value)


@pytest.mark.parametrize("members, needle", [
    ({"x.npy": b"not an array"}, "'bad.npz': array 'x' is not an .npy array"),
    ({"x.npy": _header((4, 4)) + bytes(8)}, "cannot read inputs"),  # truncated data
    ({"x.npy": _header((2,), "|O") + bytes(16)}, "cannot read inputs"),  # a pickle: never loaded
], ids=["not-npy", "truncated", "object"])
def test_damaged_members_are_one_line_errors(tmp_path, members, needle):
    with pytest.raises(BadInputError, match=needle):
        load_npz(_archive(tmp_path / "bad.npz", members))


def test_an_npy_named_npz_is_said_to_be_one(files, tmp_path):
    np.save(tmp_path / "one.npy", np.zeros((2, 4), np.float32))
    (tmp_path / "one.npy").rename(tmp_path / "one.npz")
    r = _cli("convert", files["model"], "--inputs", tmp_path / "one.npz", "-o", tmp_path / "out.onnx")
    _refused(r, "one.npz' is a single .npy array, not an .npz archive", "np.savez")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(BadInputError, match="text.npz' is not a zip archive, not an .npz archive"):
        load_npz(tmp_path / "text.npz")


def test_many_calibration_arrays_are_listed_in_short(tmp_path):
    from onnxbridge.calibration import batches

    arrays = {f"a{i}": np.zeros(1, np.float32) for i in range(60_000)}
    with pytest.raises(BadInputError) as caught:
        batches(arrays, {"x": [1, 4]})
    line = caught.value.one_line()
    assert "'a0', 'a1', 'a2', 'a3', 'a4' ... and 59,995 more" in line and len(line) < 300, line


def test_many_inputs_members_are_listed_in_short(files, tmp_path):
    np.savez(tmp_path / "many.npz", **{f"a{i}": np.zeros(1, np.float32) for i in range(2_000)})
    line = _refused(_cli("convert", files["model"], "--inputs", tmp_path / "many.npz", "-o", tmp_path / "o.onnx"))
    assert "... and 1,99" in line and len(line) < 600, line[:600]


# --- FIFOs and devices ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, needles", [
    (["convert", "{model}", "--inputs", "{folder}/fifo.npz", "-o", "{folder}/o.onnx"], ["--inputs", "FIFO"]),
    (["validate", "{model}", "{model}", "--inputs", "{folder}/fifo.npz"], ["--inputs", "FIFO"]),
    (["convert", "{model}", "--inputs", "{folder}/zero.npz", "-o", "{folder}/o.onnx"],
     ["character device", "/dev/zero"]),
    (["convert", "{folder}/fifo.onnx", "-o", "{folder}/o.onnx"], ["the source model", "FIFO"]),
    (["convert", "{folder}/zero.onnx", "-o", "{folder}/o.onnx"], ["the source model", "character device"]),
    (["inputs", "{folder}/fifo.onnx", "-o", "{folder}/o.npz"], ["the source model", "FIFO"]),
    (["convert", "{folder}/fifo.py:build", "-o", "{folder}/o.onnx"], ["factory file", "FIFO"]),
    (["convert", "{model}", "--to", "openvino", "--precision", "int8", "--calibration", "{folder}/fifo.npz", "-o",
      "{folder}/o.xml"], ["--calibration", "FIFO"]),
    (["inspect", "{folder}/fifo.onnx"], ["the model", "FIFO"]),
    (["inspect", "{folder}/zero.onnx"], ["the model", "character device"]),
    (["inspect", "{folder}/zero.dlc"], ["the model", "character device"]),
], ids=["convert-inputs-fifo", "validate-inputs-fifo", "inputs-dev-zero", "source-fifo", "source-dev-zero",
        "inputs-command-source-fifo", "factory-fifo", "calibration-fifo", "inspect-fifo", "inspect-dev-zero",
        "inspect-dlc-dev-zero"])
def test_what_is_not_a_regular_file_is_refused_before_it_is_read(files, args, needles):
    r = _cli(*[a.format(model=files["model"], folder=files["folder"]) for a in args])
    line = _refused(r, *needles)
    assert "does not exist" not in line
    assert r.seconds < 30
    assert not list(files["folder"].glob("o.*"))


def _loaders():
    from onnxbridge.frontends.paddle.files import inference_files
    from onnxbridge.frontends.pytorch.archives import kind
    from onnxbridge.frontends.sklearn.files import load as load_estimator
    from onnxbridge.sources import call_factory, pick_frontend

    return {"torch": (kind, ".pt"), "sklearn": (lambda p: load_estimator(p, trust=True), ".joblib"),
            "paddle": (inference_files, ".pdmodel"), "factory": (lambda p: call_factory(f"{p}:build"), ".py"),
            "any-frontend": (lambda p: pick_frontend(str(p), None), ".json")}


@pytest.mark.parametrize("loader", ["torch", "sklearn", "paddle", "factory", "any-frontend"])
def test_the_frontends_file_loaders_refuse_a_fifo(tmp_path, loader):
    load, suffix = _loaders()[loader]
    fifo = tmp_path / f"m{suffix}"
    os.mkfifo(fifo)
    with pytest.raises(BadInputError, match="is a FIFO"):
        load(fifo)
    zero = tmp_path / f"z{suffix}"
    zero.symlink_to("/dev/zero")
    with pytest.raises(BadInputError, match="is a character device"):
        load(zero)


def test_paddle_weights_that_are_a_device_are_refused(tmp_path):
    from onnxbridge.frontends.paddle.files import inference_files

    (tmp_path / "m.json").write_text("{}")
    with pytest.raises(BadInputError, match="are missing"):
        inference_files(tmp_path / "m.json")
    (tmp_path / "m.pdiparams").symlink_to("/dev/zero")
    with pytest.raises(BadInputError, match=r"the weights file '.*m.pdiparams' is a character device"):
        inference_files(tmp_path / "m.json")


def test_a_link_to_nothing_says_so(files, tmp_path):
    (tmp_path / "gone.onnx").symlink_to(tmp_path / "nowhere.onnx")
    line = _refused(_cli("convert", tmp_path / "gone.onnx", "-o", tmp_path / "o.onnx"))
    assert "symbolic link" in line and "nowhere.onnx" in line, line
    assert onnx.load(files["model"]).graph.node  # the fixture's model is untouched
