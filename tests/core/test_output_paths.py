"""Outputs never destroy inputs or each other, unwritable places are the user's input (exit 2), one writer per output,
and what killed runs leave behind is cleaned by the next run (never a live run's)."""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxbridge
from onnxbridge.errors import BadInputError
from tests.conftest import ROOT, assert_one_line_error
from tests.helpers.models import small_onnx

EXE = str(Path(sys.executable).with_name("onnxbridge"))


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A folder with t.onnx (inline), e.onnx (+ e.onnx.data), a.onnx whose data is b.onnx.data, in.npz, a folder
    of .npy and a factory file; the test runs in it."""
    monkeypatch.chdir(tmp_path)
    small_onnx(tmp_path / "t.onnx")
    small_onnx(tmp_path / "e.onnx", external="e.onnx.data")
    small_onnx(tmp_path / "a.onnx", external="b.onnx.data")
    np.savez(tmp_path / "in.npz", x=np.ones(300, np.float32))
    (tmp_path / "npy").mkdir()
    np.save(tmp_path / "npy" / "x.npy", np.ones(300, np.float32))
    (tmp_path / "f.py").write_text("def build():\n    raise SystemExit('the factory must not run')\n")
    return tmp_path


@pytest.mark.parametrize("args, needle", [
    (["convert", "t.onnx", "-o", "o.onnx", "--report", "t.onnx"], "--report 't.onnx' would overwrite the source"),
    (["convert", "t.onnx", "-o", "o.onnx", "--markdown", "o.onnx"], "-o and --markdown both name 'o.onnx'"),
    (["convert", "t.onnx", "-o", "o.onnx", "--junit", "r.xml", "--html", "r.xml"], "--junit and --html both name"),
    (["convert", "t.onnx", "-o", "o.onnx", "--report", "o.onnx.data"], "-o's o.onnx.data and --report both"),
    (["convert", "e.onnx", "-o", "e.onnx.data"], "the external data of the source model 'e.onnx'"),
    (["convert", "e.onnx", "-o", "x.onnx", "--report", "e.onnx.data"], "the external data of the source model"),
    (["convert", "a.onnx", "-o", "b.onnx"], "-o's b.onnx.data 'b.onnx.data' would overwrite 'b.onnx.data'"),
    (["convert", "t.onnx", "-o", "./npy/../t.onnx"], "would overwrite the source model"),
    (["convert", "t.onnx", "-o", "o.onnx", "--inputs", "in.npz", "--report", "in.npz"], "would overwrite --inputs"),
    (["convert", "t.onnx", "-o", "o.onnx", "--inputs", "npy", "--html", "npy/r.html"], "lies inside --inputs 'npy'"),
    (["convert", "f.py:build", "-o", "f.py"], "would overwrite the source's factory file 'f.py'"),
    (["adapt", "t.onnx", "--opset", "18", "-o", "o.onnx", "--html", "t.onnx"], "--html 't.onnx' would overwrite"),
    (["adapt", "e.onnx", "--opset", "18", "-o", "e.onnx.data"], "the external data of the source model"),
    (["adapt", "t.onnx", "--opset", "18", "--check", "--report", "t.onnx"], "would overwrite the model 't.onnx'"),
    (["validate", "t.onnx", "e.onnx", "--junit", "t.onnx"], "--junit 't.onnx' would overwrite the source model"),
    (["validate", "t.onnx", "e.onnx", "--report", "e.onnx.data"], "the external data of the converted model"),
    (["check", "t.onnx", "--targets", "onnx", "--report", "t.onnx"], "would overwrite the model 't.onnx'"),
])
def test_no_output_overwrites_an_input_or_another_output(cli, files, args, needle):
    before = snapshot(files)
    assert_one_line_error(cli(*args), 2, needle, "choose another path" if "both" not in needle else "own path")
    assert snapshot(files) == before  # refused before anything was written


def test_python_api_refuses_the_same_clashes(files):
    before = snapshot(files)
    with pytest.raises(BadInputError, match="would overwrite the source model"):
        onnxbridge.convert("t.onnx", output="o.onnx", report="t.onnx")
    with pytest.raises(BadInputError, match="--markdown and --html both name"):
        onnxbridge.convert("t.onnx", output="o.onnx", renderers={"markdown": "r", "html": "r"})
    with pytest.raises(BadInputError, match="external data of the converted model"):
        onnxbridge.validate("t.onnx", "e.onnx", report="e.onnx.data")
    assert snapshot(files) == before
    rep = onnxbridge.validate(files / "t.onnx", files / "t.onnx", report="r.json", renderers={"markdown": "r.md"})
    assert rep["status"] == "passed" and Path("r.md").read_text().startswith("###")


@pytest.mark.parametrize("args, needle", [
    (["-o", "{d}/adir.onnx"], "cannot write '{d}/adir.onnx': Is a directory"),
    (["-o", "/proc/onnxbridge-test/x.onnx"], "cannot write '/proc/onnxbridge-test/x.onnx': "),
    (["-o", "{d}/t.onnx.d/x.onnx"], "cannot write '{d}/t.onnx.d/x.onnx': "),
    (["-o", "{d}/o.onnx", "--report", "/proc/onnxbridge-test.json"], "cannot write '/proc/onnxbridge-test.json': "),
    (["-o", "{d}/o.onnx", "--markdown", "{d}/t.onnx.d/r.md"], "cannot write '{d}/t.onnx.d/r.md': "),
])
def test_unwritable_outputs_are_exit_2_with_the_reason(cli, files, args, needle):
    (files / "adir.onnx").mkdir()
    (files / "t.onnx.d").write_text("a file, not a folder")
    result = cli("convert", files / "t.onnx", *(a.format(d=files) for a in args))
    assert_one_line_error(result, 2, needle.format(d=files))
    assert not [p for p in files.rglob("*") if "onnxbridge" in p.name]  # no staging or lock left behind


def _limit_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.slow
def test_a_full_disk_is_exit_2(files):
    """Stand-in for a full disk: a file-size limit (RLIMIT_FSIZE) makes writes fail with EFBIG as ENOSPC would
    (the real ENOSPC is tested below where a tmpfs can be mounted)."""
    small_onnx(files / "s.onnx", tensors=6, size=250)  # 6 KB written; each weight < 1 KiB, so no scratch copy
    out = subprocess.run([EXE, "convert", "s.onnx", "-o", "big.onnx"], capture_output=True, text=True,
                         preexec_fn=_limit_file_size(3000), cwd=files)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == "error: cannot write 'big.onnx': File too large"
    big = subprocess.run([EXE, "convert", "t.onnx", "-o", "o.onnx", "--external-data"], capture_output=True,
                         text=True, preexec_fn=_limit_file_size(600), cwd=files, env={**os.environ, "TMPDIR": str(files)})
    assert big.returncode == 2 and "cannot write scratch files in" in big.stderr and "File too large" in big.stderr
    assert not [p for p in files.iterdir() if p.name.startswith(("big", "o.onnx")) or "onnxbridge" in p.name]


def _can_mount_tmpfs(folder: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=8k tmpfs '{folder}'"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow
def test_a_real_full_disk_and_read_only_mount_are_exit_2(files):
    """ENOSPC and EROFS for real, on a tiny and a read-only tmpfs mounted in a user namespace (skipped where
    that is not allowed)."""
    (files / "full").mkdir()
    (files / "ro").mkdir()
    if not _can_mount_tmpfs(files / "full"):
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    small_onnx(files / "s.onnx", tensors=6, size=250)
    script = (f"mount -t tmpfs -o size=8k tmpfs full && mount -t tmpfs -o ro tmpfs ro && "
              f"{EXE} -q convert s.onnx -o full/x.onnx 2>full.err; echo $? >>codes; "
              f"{EXE} -q convert s.onnx -o x.onnx --markdown ro/r.md 2>ro.err; echo $? >>codes")
    subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=files, check=True)
    assert (files / "codes").read_text().split() == ["2", "2"]
    assert (files / "full.err").read_text().strip() == "error: cannot write 'full/x.onnx': No space left on device"
    assert (files / "ro.err").read_text().strip() == "error: cannot write 'ro/r.md': Read-only file system"


HOLD = """
import sys
from pathlib import Path
from onnxbridge.locks import output_lock
with output_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def _hold(path: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_of_one_output_is_refused_and_no_lock_is_left(cli, files):
    out, source = files / "o.onnx", files / "t.onnx"
    holder = _hold(out)  # another onnxbridge process writing o.onnx
    try:
        assert_one_line_error(cli("convert", source, "-o", out), 2,
                              f"'{out}' is being written by another onnxbridge run (pid {holder.pid})")
        assert not out.exists()
    finally:
        holder.communicate("")
    assert holder.returncode == 0 and not list(files.glob(".*lock"))
    assert cli("-q", "convert", source, "-o", out).exit_code == 0
    assert out.exists() and not list(files.glob(".*lock"))
    killed = _hold(out)  # a writer killed while holding it: its lock file stays, but no longer blocks
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert list(files.glob(".*lock"))
    assert cli("-q", "convert", source, "-o", out, "--report", files / "r.json").exit_code == 0
    assert not list(files.glob(".*lock"))


KILL_IN_SAVE = """
import os, signal, sys
import onnx
from onnxbridge.atomic import atomic_write_bytes
from onnxbridge.onnxio import save_onnx
if sys.argv[1] == "save":  # killed while the model is staged beside the output
    save_onnx(onnx.load("t.onnx"), "out/x.onnx", check=lambda path: os.kill(os.getpid(), signal.SIGKILL))
os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed just before the report is renamed
atomic_write_bytes("out/r.json", b"{}")
"""


@pytest.mark.slow
def test_what_killed_runs_leave_is_cleaned_by_the_next_run(cli, files, monkeypatch):
    tmp = files / "tmp"
    tmp.mkdir()
    (files / "out").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    env = {**os.environ, "TMPDIR": str(tmp)}
    run = subprocess.Popen([EXE, "-q", "convert", "t.onnx", "-o", "out/y.onnx", "--samples", "1000",
                            "--latency-runs", "10000"], cwd=files, env=env)
    deadline = time.monotonic() + 60
    while not list((files / "out").glob(".y.onnx.onnxbridge-*/y.onnx")) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(run.pid, signal.SIGKILL)  # mid-validation: its scratch folder, staged output and lock stay
    run.wait()
    assert not (files / "out" / "y.onnx").exists()  # never placed: it was not validated
    for step in ("save", "write"):
        killed = subprocess.run([sys.executable, "-c", KILL_IN_SAVE, step], cwd=files, env=env)
        assert killed.returncode == -signal.SIGKILL
    left = [p for p in [*tmp.iterdir(), *(files / "out").iterdir()] if "onnxbridge" in p.name]
    assert {p.name.split("-")[0] for p in left} >= {"onnxbridge", ".x.onnx.onnxbridge", ".r.json.onnxbridge",
                                                    ".y.onnx.onnxbridge"}
    assert any(p.is_dir() and p.parent == tmp for p in left)
    live = tmp / f"onnxbridge-{os.getpid()}-abcdefgh"  # a live run's (this one's), however old
    fresh = tmp / f"onnxbridge-{run.pid}-freshnew"  # a dead run's, but too recent to judge
    live.mkdir()
    fresh.mkdir()
    an_hour_ago = time.time() - 3600
    for path in (*left, live):
        os.utime(path, (an_hour_ago, an_hour_ago))
    out = files / "out"
    assert cli("-q", "convert", files / "t.onnx", "-o", out / "x.onnx", "--report", out / "r.json").exit_code == 0
    assert not [p for p in left if p.exists()]
    assert live.exists() and fresh.exists()
    assert sorted(p.name for p in out.iterdir()) == ["r.json", "x.onnx"]


def _with_location(src: Path, dest: Path, location: str, **extra: str) -> Path:
    """``src`` (one external tensor) saved as ``dest`` with its tensor's location (and other keys) replaced."""
    model = onnx.load(src, load_external_data=False)
    tensor = model.graph.initializer[0]
    entries = {e.key: e.value for e in tensor.external_data} | {"location": location, **extra}
    del tensor.external_data[:]
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    dest.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, dest)
    return dest


@pytest.mark.parametrize("location, extra, needle", [
    ("e.onnx.data\0x", {}, "holds a NUL byte"),
    ("{outside}", {}, "is absolute"),
    ("../outside.data", {}, "leads out of the model's folder"),
    ("link.data", {}, "leads out of the model's folder (by a symlink)"),
    (".", {}, "names the model's folder, not a file"),
    ("", {}, "is empty"),
    ("e.onnx.data", {"offset": "-4"}, "not byte counts"),
])
def test_external_data_outside_the_model_folder_is_refused(cli, files, location, extra, needle):
    from onnxbridge.onnxio import load_onnx, save_onnx

    outside = files / "outside.data"
    shutil.copy(files / "e.onnx.data", outside)
    (files / "sub").mkdir()
    shutil.copy(files / "e.onnx.data", files / "sub" / "e.onnx.data")
    (files / "sub" / "link.data").symlink_to(outside)
    bad = _with_location(files / "e.onnx", files / "sub" / "m.onnx", location.format(outside=outside), **extra)
    message = f"'{bad}': tensor 'w0': external data location"
    for load_data in (False, True):
        with pytest.raises(BadInputError, match="^" + message.replace("(", r"\(").replace(")", r"\)")) as info:
            load_onnx(bad, load_external_data=load_data)
        assert needle in str(info.value)
    assert_one_line_error(cli("convert", bad, "-o", files / "o.onnx"), 2, message, needle)
    assert_one_line_error(cli("inspect", bad), 2, needle)
    proto = onnx.load(bad, load_external_data=False)  # a proto handed to the writer, weights in sub/
    for external in (False, True):
        with pytest.raises(BadInputError, match="tensor 'w0': external data location"):
            save_onnx(proto, files / "o.onnx", base_dir=files / "sub", external_data=external)
    assert not (files / "o.onnx").exists() and not [p for p in files.rglob("*") if "onnxbridge" in p.name]


def test_external_data_in_a_subfolder_still_loads(files):
    from onnxbridge.onnxio import load_onnx

    (files / "sub" / "weights").mkdir(parents=True)
    shutil.copy(files / "e.onnx.data", files / "sub" / "weights" / "w.bin")
    model = load_onnx(_with_location(files / "e.onnx", files / "sub" / "m.onnx", "weights/w.bin"),
                      load_external_data=True)
    assert onnx.numpy_helper.to_array(model.graph.initializer[0]).shape == (300,)


def test_validating_a_model_whose_external_data_is_missing_is_exit_2(cli, files):
    (files / "e.onnx.data").unlink()
    assert_one_line_error(cli("validate", files / "t.onnx", files / "e.onnx"), 2,
                          "refers to external data that is missing: e.onnx.data")
