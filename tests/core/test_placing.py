"""``place`` and ``placing``: a staged file or folder moved over an output, replacing an old one whole, and a failure
leaving the old output intact with no staging left behind."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from onnxbridge import atomic
from onnxbridge.atomic import place, placing, staging_folder
from onnxbridge.errors import BadInputError


def _folder(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _contents(path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in path.iterdir()}


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if "onnxbridge" in p.name]


def test_place_file_new_and_replacing(tmp_path):
    out = tmp_path / "model.dlc"
    for text in ("first", "second"):
        staged = staging_folder(out) / out.name
        staged.write_text(text)
        place(staged, out)
        assert out.read_text() == text and not staged.exists()


def test_place_folder_new_and_replacing(tmp_path):
    out = tmp_path / "m.mlpackage"
    place(_folder(tmp_path / "a", {"x": "1", "old_only": "o"}), out)
    assert _contents(out) == {"x": "1", "old_only": "o"}
    place(_folder(tmp_path / "b", {"x": "2"}), out)
    assert _contents(out) == {"x": "2"}  # replaced whole, not merged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.mlpackage"]  # the old one moved aside is gone


def test_placing_builds_beside_and_cleans_up(tmp_path):
    out = tmp_path / "sub" / "m.mlpackage"
    with placing(out) as staged:
        assert staged.parent.parent == out.parent and staged.name == out.name and not out.exists()
        _folder(staged, {"x": "1"})
    with placing(out) as staged:
        _folder(staged, {"x": "2"})
    assert _contents(out) == {"x": "2"} and _leftovers(out.parent) == []


def test_error_in_block_leaves_old_output(tmp_path):
    out = _folder(tmp_path / "m.mlpackage", {"x": "old"})
    with pytest.raises(RuntimeError), placing(out) as staged:
        _folder(staged, {"x": "new"})
        raise RuntimeError("save failed")
    assert _contents(out) == {"x": "old"} and _leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_failed_move_leaves_old_output(tmp_path, monkeypatch, kind):
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("old")
    else:
        _folder(out, {"x": "old"})
    real = os.replace

    def failing(src, dst):
        if Path(dst) == out and "onnxbridge" in Path(src).parent.name:  # the staged entry, not the move back
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", failing)
    with pytest.raises(BadInputError, match="cannot write '.*out': No space left on device"), placing(out) as staged:
        staged.write_text("new") if kind == "file" else _folder(staged, {"x": "new"})
    assert (out.read_text() if kind == "file" else _contents(out)) == ("old" if kind == "file" else {"x": "old"})
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("existing", ["file", "folder"])
def test_no_kind_change(tmp_path, existing):
    out = tmp_path / "out"
    out.write_text("old") if existing == "file" else _folder(out, {"x": "old"})
    with pytest.raises(BadInputError, match="cannot write"), placing(out) as staged:
        _folder(staged, {"x": "new"}) if existing == "file" else staged.write_text("new")
    assert out.is_file() == (existing == "file") and _leftovers(tmp_path) == []
