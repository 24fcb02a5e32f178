"""Reuse: a cell whose inputs are unchanged and that passed before is not run again.

A cell's key hashes what decides its result: the bytes of its source files (a model file, every file under a model
folder, and the files its options read, e.g. calibration data; for a factory, every ``.py`` file in its folder's
tree, the helper modules it may import), the files and environment variables its model declares (``data``, ``env``),
the cell itself (options, target, precision, opset) and the versions of onnxbridge and of the frameworks involved.
A cell whose factory folder holds more than ``MAX_TREE_ENTRIES`` entries gets no key: it is run every time.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from onnxbridge.errors import BadInputError
from onnxbridge.matrix.cell import folder_for
from onnxbridge.matrix.cells import Cell
from onnxbridge.pathchecks import regular

_FACTORY_FILE_SUFFIX = ".py:"
MAX_TREE_ENTRIES = 10_000  # files and folders looked at under a factory's folder; beyond: the cell is not reused
_NOT_SOURCES = ("__pycache__", "site-packages", "dist-packages", "node_modules")  # folders no helper is imported from
_INSTALLED = ("site-packages", "dist-packages")


def cell_key(cell: Cell, digests: dict | None = None) -> str:
    """The sha256 (hex) of the cell's source files, the helper modules beside its factory, its declared data files
    and environment variables, its settings and the framework versions it runs with; "" (never reused) when its
    factory's folder is too large to tell what it imports. ``digests``: what this run already read (a manifest names
    one factory file in many cells)."""
    digests = {} if digests is None else digests
    helpers = _helper_files(cell, digests)
    if helpers is None:
        return ""
    digest = hashlib.sha256()
    settings = {"source": cell.source, "target": cell.target, "precision": cell.precision, "opset": cell.opset,
                "options": cell.options, "data": cell.data, "env": {name: os.environ.get(name) for name in cell.env}}
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for path in dict.fromkeys([*_input_files(cell), *helpers]):
        if path not in digests:
            digests[path] = _file_digest(path)
        digest.update(b"\0file\0" + str(path).encode() + b"\0" + digests[path].encode())
    digest.update(json.dumps(versions(cell), sort_keys=True).encode())
    return digest.hexdigest()


def cell_keys(cells: Sequence[Cell]) -> list[str]:
    """``cell_key`` of each cell, each file read once."""
    digests: dict = {}
    return [cell_key(cell, digests) for cell in cells]


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _source_path(cell: Cell) -> Path | None:
    """The file or folder the source names (a factory's module file), or None when it cannot be found."""
    source = cell.source
    if _FACTORY_FILE_SUFFIX in source:
        return Path(source.rpartition(":")[0])
    if Path(source).exists():
        return Path(source)
    module = source.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin and Path(spec.origin).is_file() else None


def _input_files(cell: Cell) -> list[Path]:
    """Every file the cell reads: its source, the files its options name and its declared data (all files of a
    folder, sorted). Each is checked before it is read: a device or FIFO (or a link to one) is refused
    (BadInputError), never hashed."""
    from onnxbridge.matrix.manifest import path_options

    roots = [_source_path(cell)]
    roots += [Path(v) for k, v in sorted(cell.options.items()) if k in path_options() and isinstance(v, str)]
    roots += [Path(p) for p in cell.data]
    files: list[Path] = []
    for root in roots:
        if root is None or not os.path.lexists(root):
            continue
        if regular(root, f"cell {cell.name}'s input", folder=True).is_dir():
            files += sorted(p for p in root.rglob("*") if p.is_file())  # is_file: no FIFO or device inside
        else:
            files.append(root)
    return files


def _helper_root(cell: Cell) -> Path | None:
    """The folder a factory's own modules are imported from: a ``FILE.py:fn``'s folder, a ``package.module:fn``'s
    top package's folder (the module's folder for a top-level module). None for a model file or folder, and for an
    installed package (its version is in ``versions``)."""
    source = cell.source
    if _FACTORY_FILE_SUFFIX in source:
        return Path(source.rpartition(":")[0]).parent
    if ":" not in source or os.path.lexists(source):
        return None
    try:
        spec = importlib.util.find_spec(source.partition(":")[0].partition(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
    elif spec.origin and Path(spec.origin).is_file():
        root = Path(spec.origin).parent
    else:
        return None
    return None if any(part in _INSTALLED for part in root.parts) else root


def _helper_files(cell: Cell, digests: dict) -> list[Path] | None:
    """The ``.py`` files under the factory's folder (``_helper_root``), sorted: what it may import. Hidden folders,
    ``__pycache__``, virtual environments and installed packages are not looked into; anything but a regular file is
    skipped. None when the tree holds more than ``MAX_TREE_ENTRIES`` entries."""
    root = _helper_root(cell)
    if root is None:
        return []
    if ("tree", root) not in digests:
        digests[("tree", root)] = _python_files(root)
    return digests[("tree", root)]


def _python_files(root: Path) -> list[Path] | None:
    found: list[Path] = []
    seen = 0
    for folder, folders, files in os.walk(root):  # links to folders are listed, not followed
        seen += len(folders) + len(files)
        if seen > MAX_TREE_ENTRIES:
            return None
        folders[:] = sorted(f for f in folders if not _skipped_folder(Path(folder, f)))
        for name in sorted(files):
            if name.endswith(".py"):
                try:
                    found.append(regular(Path(folder, name), "helper module"))
                except BadInputError:
                    continue  # a FIFO or device named .py: never read, and no module either
    return sorted(found)


def _skipped_folder(path: Path) -> bool:
    return path.name.startswith(".") or path.name in _NOT_SOURCES or (path / "pyvenv.cfg").exists()


def _imported_top_modules(path: Path) -> set[str]:
    """Top-level modules a Python file imports (a factory's frameworks), parsed without running it."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.partition(".")[0])
    return found


@lru_cache(maxsize=1)
def _distributions_of_modules() -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in importlib.metadata.packages_distributions().items()}


def _frontends(cell: Cell) -> list[str]:
    """The frontends the cell may use: ``from_`` when given; for a factory, those whose frameworks its file
    imports; for a file, the first that accepts it; every frontend when that cannot be told."""
    from onnxbridge.plugins import FRONTENDS

    names = FRONTENDS.names()
    if cell.options.get("from_") in names:
        return [cell.options["from_"]]
    path = _source_path(cell)
    if path is not None and path.suffix == ".py" and ":" in cell.source:
        modules = _imported_top_modules(path)
        dists = {d.lower() for m in modules for d in _distributions_of_modules().get(m, ())}
        picked = [n for n in names if {d.lower() for d in FRONTENDS.plugin(n).requires} & dists]
        return picked or names
    if path is not None:
        from onnxbridge.sources import pick_frontend

        try:
            return [pick_frontend(str(path), None)]
        except Exception:  # noqa: BLE001 - an unreadable source is the cell's error, not the key's
            return names
    return names


def versions(cell: Cell) -> dict[str, str | None]:
    """onnxbridge's version and those of the distributions the cell's frontend(s) and backend need."""
    from onnxbridge import __version__
    from onnxbridge.plugins import BACKENDS, FRONTENDS
    from onnxbridge.registry import dist_version

    dists = {"onnx", "onnxruntime"}
    if _FACTORY_FILE_SUFFIX not in cell.source and ":" in cell.source:  # package.module:fn, maybe installed
        dists.update(_distributions_of_modules().get(cell.source.partition(".")[0].partition(":")[0], ()))
    for name in _frontends(cell):
        plugin = FRONTENDS.plugin(name)
        dists.update((*plugin.requires, *plugin.any_of))
    try:
        plugin = BACKENDS.plugin(cell.target)
        dists.update((*plugin.requires, *plugin.any_of))
    except Exception:  # noqa: BLE001 - an unknown backend was refused when the manifest was read
        pass
    return {"onnxbridge": __version__, **{d: dist_version(d) for d in sorted(dists)}}


def read_json(path: str | Path, what: str) -> Any:
    """The JSON value in ``path``. BadInputError naming ``what`` when it is not a regular file (checked before
    reading: a FIFO or device would never end), cannot be read, is not JSON or nests too deep for the parser."""
    path = regular(path, what)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInputError(f"{what} '{path}': cannot read it: {exc.strerror or exc}") from None
    except RecursionError:
        raise BadInputError(f"{what} '{path}' nests too deeply to be read") from None
    except ValueError as exc:
        raise BadInputError(f"{what} '{path}' is not JSON: {exc}") from None


def _records(outdir: Path) -> list[dict]:
    """The cell records of ``OUTDIR/matrix.json``; none when it is missing or unreadable."""
    try:
        data = read_json(outdir / "matrix.json", "the previous matrix.json")
    except BadInputError:
        return []
    cells = data.get("cells") if isinstance(data, dict) else None
    return [r for r in cells if isinstance(r, dict)] if isinstance(cells, list) else []


RECORD_NAME = "matrix-record.json"  # a finished cell's record, beside its report: what the cache reads when the
# last matrix.json did not hold the cell (a run with --only)


def save_record(outdir: str | Path, record: dict) -> None:
    """Keep a finished cell's record in its folder (``OUTDIR/<name>/matrix-record.json``), if the folder exists."""
    from onnxbridge.atomic import write_json

    try:
        folder = folder_for(record["name"], outdir)  # never through a link a cell was refused for
    except ValueError:
        return
    if folder.is_dir():
        write_json(folder / RECORD_NAME, record)


def _folder_record(outdir: Path, name: str) -> dict | None:
    try:
        record = read_json(folder_for(name, outdir) / RECORD_NAME, "a cell's record")
    except (BadInputError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("name") == name else None


def _own_folder(outdir: Path, cell: Cell) -> bool:
    """Whether the cell's folder is one a run may use (not reached through a link): else it runs, and is refused."""
    try:
        folder_for(cell.name, outdir)
    except ValueError:
        return False
    return True


def _still_there(outdir: Path, relative: object) -> bool:
    return isinstance(relative, str) and (outdir / relative).exists()


def reusable(outdir: str | Path, cells: Sequence[Cell] | Iterable[Cell]) -> dict[str, dict]:
    """Records of OUTDIR/matrix.json (or a cell folder's own record, newer) that ``cells`` can reuse: same name and
    key, passed, report (and artifact, when it had one) still on disk. Returned by cell name, marked
    ``"cached": true``."""
    outdir = Path(outdir)
    wanted = {cell.name: cell.key for cell in cells if cell.key and cell.skip is None and _own_folder(outdir, cell)}
    candidates = {r.get("name"): r for r in _records(outdir)}
    for name in wanted:  # a cell's own record is its latest (a later run with --only did not list it)
        record = _folder_record(outdir, name)
        if record is not None:
            candidates[name] = record
    found = {}
    for name, record in candidates.items():
        if name not in wanted or record.get("key") != wanted[name] or record.get("status") != "passed":
            continue
        if not _still_there(outdir, record.get("report")):
            continue
        if record.get("artifact") is not None and not _still_there(outdir, record["artifact"]):
            continue
        found[name] = {**record, "cached": True}
    return found
