"""The matrix against faults and hostile inputs (issue 30): a cache key that covers the helper modules, data files
and environment variables a factory reads; FIFOs and devices refused before anything reads them; a manifest read in
linear time; summary names, opsets, deep JSON, symlinked cell folders and bad Python arguments refused in one line;
a Ray cell folder streamed, and a member nested too deep refused without losing the run."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from onnxbridge.errors import BadInputError
from onnxbridge.matrix import matrix
from onnxbridge.matrix.cache import MAX_TREE_ENTRIES, cell_keys, reusable, save_record
from onnxbridge.matrix.cell import run_cell
from onnxbridge.matrix.cells import Cell, expand
from onnxbridge.matrix.manifest import load_manifest
from tests.helpers.extras import require

ROOT = Path(__file__).resolve().parents[3]

# An ONNX factory (fast: no framework to import): y = x * SCALE * (the number in weights.txt), SCALE from a helper
# module beside it; the environment variable <FOLDER>_VARIANT=broken breaks it.
FACTORY = '''\
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from helpers.scale import SCALE  # noqa: E402


def model():
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    if os.environ.get(Path(__file__).parent.name.upper() + "_VARIANT") == "broken":
        raise RuntimeError("variant broken")
    factor = SCALE * float((Path(__file__).parent / "weights.txt").read_text())
    k = numpy_helper.from_array(np.array([factor], dtype=np.float32), "k")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [k])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
'''

MODEL = '''
[[model]]
name = "{name}"
source = "{name}/factory.py:model"
{extra}
'''


def factory_folder(root: Path, name: str) -> None:
    """``root/name/``: the factory, its helper package and its data file."""
    folder = root / name
    (folder / "helpers").mkdir(parents=True)
    (folder / "factory.py").write_text(FACTORY)
    (folder / "helpers" / "__init__.py").write_text("")
    (folder / "helpers" / "scale.py").write_text("SCALE = 2.0\n")
    (folder / "weights.txt").write_text("1.5\n")


def manifest(root: Path, models: dict[str, str], head: str = "") -> Path:
    """A manifest of ``models`` (name -> extra lines), one factory folder each, onnx fp32 opset 17."""
    text = '[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\nopsets = [17]\n' + head
    for name, extra in models.items():
        factory_folder(root, name)
        text += MODEL.format(name=name, extra=extra)
    path = root / "matrix.toml"
    path.write_text(text)
    return path


def keys(path: Path) -> dict[str, str]:
    cells = expand(load_manifest(path))
    return {c.model: k for c, k in zip(cells, cell_keys(cells))}


def run_cli(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnxbridge.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def assert_refused(res: subprocess.CompletedProcess, *needles: str) -> None:
    err = res.stderr.strip()
    assert res.returncode == 2 and "Traceback" not in res.stderr + res.stdout, (res.returncode, res.stderr)
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    for needle in needles:
        assert needle in err, (needle, err)


# ---- item 7: what the cache key covers -------------------------------------------------------------------------------

def test_key_covers_helper_modules_declared_data_and_env(tmp_path, monkeypatch):
    monkeypatch.delenv("M_VARIANT", raising=False)
    path = manifest(tmp_path, {"m": 'data = ["m/weights.txt"]\nenv = ["M_VARIANT"]'})
    first = keys(path)["m"]
    assert first and keys(path)["m"] == first  # unchanged inputs: the same key
    (tmp_path / "m" / "helpers" / "__pycache__").mkdir()
    (tmp_path / "m" / "helpers" / "__pycache__" / "scale.py").write_text("x = 1\n")  # not a source folder
    (tmp_path / "m" / ".hidden").mkdir()
    (tmp_path / "m" / ".hidden" / "h.py").write_text("x = 1\n")
    os.mkfifo(tmp_path / "m" / "pipe.py")  # a FIFO named .py is skipped, never read
    assert keys(path)["m"] == first
    changes = [lambda: (tmp_path / "m" / "helpers" / "scale.py").write_text("SCALE = 3.0\n"),
               lambda: (tmp_path / "m" / "weights.txt").write_text("2.5\n"),
               lambda: monkeypatch.setenv("M_VARIANT", ""),  # set (even empty) is not unset
               lambda: monkeypatch.setenv("M_VARIANT", "broken")]
    seen = {first}
    for change in changes:
        change()
        now = keys(path)["m"]
        assert now not in seen
        seen.add(now)


@pytest.mark.slow
def test_a_factory_folder_too_large_to_hash_is_never_reused(tmp_path):
    path = manifest(tmp_path, {"m": ""})
    many = tmp_path / "m" / "many"
    many.mkdir()
    for i in range(MAX_TREE_ENTRIES + 1):
        (many / f"f{i}").touch()
    (cell,) = expand(load_manifest(path))
    assert cell_keys([cell]) == [""]
    assert reusable(tmp_path / "out", [cell]) == {}


@pytest.mark.slow
def test_edits_to_a_helper_data_file_or_env_var_run_the_cell_again(tmp_path, monkeypatch):
    """Four cells that pass; the second run reuses them all; then a helper module, a declared data file and a
    declared environment variable change (each breaks its cell): those three run again and error, the fourth stays
    cached."""
    monkeypatch.delenv("ENV_VARIANT", raising=False)
    path = manifest(tmp_path, {"helper": "", "data": 'data = ["data/weights.txt"]', "env": 'env = ["ENV_VARIANT"]',
                               "same": ""})
    out = tmp_path / "out"
    statuses = lambda result: {c["model"]: (c["status"], c["cached"]) for c in result["cells"]}  # noqa: E731
    assert statuses(matrix(path, out, workers=2)) == {m: ("passed", False) for m in ("helper", "data", "env", "same")}
    assert statuses(matrix(path, out, workers=2)) == {m: ("passed", True) for m in ("helper", "data", "env", "same")}
    (tmp_path / "helper" / "helpers" / "scale.py").write_text("raise ImportError('helper broken')\n")
    (tmp_path / "data" / "weights.txt").write_text("not a number\n")
    monkeypatch.setenv("ENV_VARIANT", "broken")
    after = matrix(path, out, workers=2)
    assert statuses(after) == {"helper": ("error", False), "data": ("error", False), "env": ("error", False),
                               "same": ("passed", True)}
    reasons = {c["model"]: c["reason"] for c in after["cells"]}
    assert "helper broken" in reasons["helper"] and "not a number" in reasons["data"]
    assert "variant broken" in reasons["env"]


def test_data_and_env_are_checked_with_their_line(tmp_path):
    bad = {'data = "weights.txt"': ("'data' must be a list", 6), 'env = ["A=B"]': ("not an environment variable", 6),
           'data = ["nothere.bin"]': ("does not exist", 6)}
    for extra, (needle, line) in bad.items():
        path = tmp_path / "matrix.toml"
        path.write_text('[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\n\n[[model]]\n' + extra
                        + '\nname = "m"\nsource = "f.py:model"\n')
        (tmp_path / "f.py").write_text("def model(): pass\n")
        with pytest.raises(BadInputError) as info:
            load_manifest(path)
        assert needle in str(info.value) and f"matrix.toml:{line}:" in str(info.value), str(info.value)
    path.write_text('[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\ndata = ["shared.bin"]\nenv = ["A"]\n\n'
                    '[[model]]\nname = "m"\nsource = "f.py:model"\ndata = ["own.bin", "shared.bin"]\nenv = ["B"]\n')
    (tmp_path / "shared.bin").write_bytes(b"s")
    (tmp_path / "own.bin").write_bytes(b"o")
    (cell,) = expand(load_manifest(path))  # the matrix's declarations and the model's own, once each
    assert cell.data == [str(tmp_path / "shared.bin"), str(tmp_path / "own.bin")] and cell.env == ["A", "B"]
    assert Cell.from_dict(json.loads(json.dumps(cell.as_dict()))) == cell  # what a cell's process reads back


# ---- item 11: FIFOs and devices --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "devzero"])
@pytest.mark.parametrize("role", ["source", "factory", "data", "inputs", "manifest", "baseline"])
def test_a_fifo_or_device_is_refused_before_it_is_read(tmp_path, kind, role):
    special = tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        special.symlink_to("/dev/zero")
    (tmp_path / "f.py").write_text("def model(): pass\n")
    paths = {"source": "special", "factory": "special.py:model", "data": "f.py:model", "inputs": "f.py:model"}
    if role == "factory":
        (tmp_path / "special.py").symlink_to(special)
    extra = {"data": 'data = ["special"]', "inputs": 'inputs = "special"'}.get(role, "")
    path = tmp_path / "matrix.toml"
    path.write_text('[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\n\n[[model]]\nname = "m"\n'
                    f'source = "{paths.get(role, "f.py:model")}"\n{extra}\n')
    args = [special if role == "manifest" else path, "-o", tmp_path / "out"]
    if role == "baseline":
        args += ["--baseline", special]
    res = run_cli("matrix", *args, timeout=60)  # before the fix: a hang (then TimeoutExpired)
    assert_refused(res, "FIFO" if kind == "fifo" else "character device")


# ---- item 12: the manifest in linear time ----------------------------------------------------------------------------

def test_the_manifest_is_read_in_linear_time(tmp_path):
    """A line of '[' and 5,000 spaces inside a multi-line string (and long keys): cubic before, a blink now."""
    (tmp_path / "f.py").write_text("def model(): pass\n")
    path = tmp_path / "matrix.toml"
    spaces = " " * 5000
    path.write_text('[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\n\n[[model]]\nname = "m"\n'
                    f'source = "f.py:model"\nnote = """\n[{spaces}\n[[{spaces}x\n{"a = " * 3000}\n"""\n'
                    f'"{"k " * 2000}" = 1\n')
    res = run_cli("matrix", path, "-o", tmp_path / "out", timeout=30)
    assert_refused(res, "matrix.toml:8:", "unknown key 'note'")


def test_keys_are_found_in_their_forms(tmp_path):
    from onnxbridge.matrix.manifest import _header, _keys

    assert _keys('a = 1, "b c" = 2') == ["a", "b c"] and _keys("x = { y = 1, 'z'=2 }") == ["x", "y", "z"]
    assert _keys('name = "a = b"') == ["name"] and _keys("a.b = 1") == ["a.b"] and _keys("==") == []
    assert _header("  [[ model ]]") == "model" and _header("[ a . b ]") == "a.b" and _header("[]") is None
    assert _header("x = [1]") is None


# ---- low: names, opsets, deep JSON, symlinks, Python arguments -------------------------------------------------------

@pytest.mark.parametrize("name", ["matrix.json", "matrix.html", "Matrix.XML", "matrix.md"])
def test_a_model_named_like_a_summary_is_refused(tmp_path, name):
    (tmp_path / "f.py").write_text("def model(): pass\n")
    path = tmp_path / "matrix.toml"
    path.write_text(f'[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\n\n[[model]]\nname = "{name}"\n'
                    'source = "f.py:model"\n')
    with pytest.raises(BadInputError, match="summary file") as info:
        load_manifest(path)
    assert "matrix.toml:6:" in str(info.value)


def test_a_folder_where_a_summary_goes_is_refused_before_any_cell_runs(tmp_path):
    path = manifest(tmp_path, {"m": ""})
    (tmp_path / "out" / "matrix.html").mkdir(parents=True)
    with pytest.raises(BadInputError, match="matrix.html"):
        matrix(path, tmp_path / "out")
    assert not (tmp_path / "out" / "m").exists()


@pytest.mark.parametrize("opsets", ["[1]", "[6, 17]", "[99]"])
def test_opsets_onnxbridge_does_not_deliver_are_refused(tmp_path, opsets):
    from onnxbridge.adapters import MIN_OPSET

    (tmp_path / "f.py").write_text("def model(): pass\n")
    path = tmp_path / "matrix.toml"
    path.write_text(f'[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\nopsets = {opsets}\n\n[[model]]\n'
                    'name = "m"\nsource = "f.py:model"\n')
    with pytest.raises(BadInputError) as info:
        load_manifest(path)
    message = info.value.one_line()
    assert "matrix.toml:4: opsets: opset" in message
    assert (f"below {MIN_OPSET}" in message) if opsets != "[99]" else ("newer than the installed onnx" in message)
    path.write_text(path.read_text().replace(f"opsets = {opsets}", f"opsets = [{MIN_OPSET}]"))
    assert load_manifest(path).models[0].opsets == [MIN_OPSET]


def test_deeply_nested_json_is_a_one_line_refusal_or_ignored(tmp_path):
    path = manifest(tmp_path, {"m": ""})
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    res = run_cli("matrix", path, "-o", tmp_path / "out", "--baseline", deep)
    assert_refused(res, "--baseline", "nests too deeply")
    out = tmp_path / "out2"
    out.mkdir()
    (out / "matrix.json").write_text('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (cell,) = expand(load_manifest(path))
    assert reusable(out, [Cell(**{**cell.as_dict(), "key": "k"})]) == {}  # an unreadable old matrix.json: no reuse


@pytest.mark.parametrize("inside", [False, True])
def test_a_symlinked_model_folder_gets_no_record_and_no_reuse(tmp_path, inside):
    """OUTDIR/m a link (out of OUTDIR, or to another folder in it): no record written through it, none read."""
    out = tmp_path / "out"
    elsewhere = out / "other" if inside else tmp_path / "elsewhere"
    (elsewhere / "onnx-fp32-opset17").mkdir(parents=True)
    out.mkdir(exist_ok=True)
    (out / "m").symlink_to(elsewhere)
    record = {"name": "m/onnx-fp32-opset17", "status": "passed", "key": "k", "report": "m/onnx-fp32-opset17/r.json"}
    save_record(out, record)
    assert list((elsewhere / "onnx-fp32-opset17").iterdir()) == []  # nothing written through the link
    (elsewhere / "onnx-fp32-opset17" / "matrix-record.json").write_text(json.dumps(record))
    (elsewhere / "onnx-fp32-opset17" / "r.json").write_text("{}")
    cell = Cell("m", "onnx", "fp32", 17, "f.py:model", key="k")
    assert reusable(out, [cell]) == {}  # a record planted behind the link is not a pass
    record = run_cell(cell, out)  # and the cell itself is refused
    assert record["status"] == "error" and "is a symbolic link" in record["reason"], record


@pytest.mark.parametrize("args, kwargs, needle", [
    ((None, None), {}, "manifest=None"),
    (("m.toml", None), {}, "outdir=None"),
    (("m.toml", "out"), {"only": [None]}, "only="),
    (("m.toml", "out"), {"timeout": float("nan")}, "timeout=nan"),
    (("m.toml", "out"), {"timeout": float("inf")}, "timeout=inf"),
    (("m.toml", "out"), {"baseline": 3}, "baseline=3"),
    (("m.toml", "out"), {"ray_address": 1, "executor": "ray"}, "ray_address=1"),
])
def test_bad_python_arguments_are_one_line_refusals(tmp_path, args, kwargs, needle):
    args = [tmp_path / a if isinstance(a, str) else a for a in args]
    with pytest.raises(BadInputError) as info:
        matrix(*args, **kwargs)
    assert needle in info.value.one_line() and "\n" not in info.value.one_line()


def test_the_cli_refuses_a_nan_timeout(tmp_path):
    path = manifest(tmp_path, {"m": ""})
    assert_refused(run_cli("matrix", path, "-o", tmp_path / "out", "--timeout", "nan"), "timeout=nan")


# ---- low: the Ray cell folder, streamed and checked ------------------------------------------------------------------

def _deep_tar(depth: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("/".join(["d"] * depth) + "/f")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


def test_unpack_refuses_a_member_nested_too_deep_and_streams(tmp_path, monkeypatch):
    from onnxbridge.matrix import ray_executor
    from onnxbridge.matrix.ray_executor import MAX_DEPTH, pack, unpack

    monkeypatch.setattr(ray_executor, "CHUNK", 64 * 1024)
    folder = tmp_path / "cell"
    folder.mkdir()
    (folder / "kept").write_text("old")
    with pytest.raises(ValueError, match="folders deep"):
        unpack([_deep_tar(2000)], folder)
    assert (folder / "kept").read_text() == "old"
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "w.bin").write_bytes(os.urandom(300_000))
    (src / "report.json").write_text("{}")
    chunks = list(pack(src))
    assert len(chunks) > 1 and all(len(c) <= ray_executor.CHUNK for c in chunks)
    unpack(iter(chunks), folder)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == ["a", "a/w.bin", "report.json"]
    assert (folder / "a" / "w.bin").read_bytes() == (src / "a" / "w.bin").read_bytes()
    unpack([_deep_tar(MAX_DEPTH - 1)], folder)  # deep, but within the limit
    assert (folder.joinpath(*["d"] * (MAX_DEPTH - 1)) / "f").read_bytes() == b"x"


def test_a_bad_folder_from_a_ray_node_is_that_cells_error(tmp_path):
    """_collect turns a refused (too deep) folder into the cell's error instead of raising out of the run."""
    require("ray")
    from onnxbridge.matrix.ray_executor import RayExecutor

    class FakeRay:
        def get(self, ref):
            return ref

    cell = Cell("m", "onnx", "fp32", 17, "f.py:model", key="k")
    record = {"name": cell.name, "status": "passed"}
    result = RayExecutor.__new__(RayExecutor)._collect(FakeRay(), iter([record, _deep_tar(2000)]), cell, tmp_path, 1.0)
    assert result["status"] == "error" and "folders deep" in result["reason"], result
