"""Reuse: a cell whose inputs are unchanged and that passed before is not run again.

A cell's key hashes what decides its result: the bytes of its source files (a factory's ``.py``, a model file, every
file under a model folder, and the files its options read, e.g. calibration data), the cell itself (options,
target, precision, opset) and the versions of onnxbridge and of the frameworks involved.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from onnxbridge.matrix.cells import Cell

_FACTORY_FILE_SUFFIX = ".py:"


def cell_key(cell: Cell, digests: dict | None = None) -> str:
    """The sha256 (hex) of the cell's source files, its settings and the framework versions it runs with.
    ``digests``: file digests already computed in this run (a manifest names one factory file in many cells)."""
    digests = {} if digests is None else digests
    digest = hashlib.sha256()
    settings = {"source": cell.source, "target": cell.target, "precision": cell.precision, "opset": cell.opset,
                "options": cell.options}
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for path in _input_files(cell):
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
    """Every file the cell reads: its source (all files of a folder, sorted) and files its options name."""
    from onnxbridge.matrix.manifest import path_options

    roots = [_source_path(cell)]
    roots += [Path(v) for k, v in sorted(cell.options.items()) if k in path_options() and isinstance(v, str)]
    files: list[Path] = []
    for root in roots:
        if root is None or not root.exists():
            continue
        files += sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    return files


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
    for name in _frontends(cell):
        plugin = FRONTENDS.plugin(name)
        dists.update((*plugin.requires, *plugin.any_of))
    try:
        plugin = BACKENDS.plugin(cell.target)
        dists.update((*plugin.requires, *plugin.any_of))
    except Exception:  # noqa: BLE001 - an unknown backend was refused when the manifest was read
        pass
    return {"onnxbridge": __version__, **{d: dist_version(d) for d in sorted(dists)}}


def _records(outdir: Path) -> list[dict]:
    """The cell records of ``OUTDIR/matrix.json``; none when it is missing or unreadable."""
    try:
        data = json.loads((outdir / "matrix.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    cells = data.get("cells") if isinstance(data, dict) else None
    return [r for r in cells if isinstance(r, dict)] if isinstance(cells, list) else []


RECORD_NAME = "matrix-record.json"  # a finished cell's record, beside its report: what the cache reads when the
# last matrix.json did not hold the cell (a run with --only)


def save_record(outdir: str | Path, record: dict) -> None:
    """Keep a finished cell's record in its folder (``OUTDIR/<name>/matrix-record.json``), if the folder exists."""
    from onnxbridge.fileio import write_json

    folder = Path(outdir) / record["name"]
    if folder.is_dir():
        write_json(folder / RECORD_NAME, record)


def _folder_record(outdir: Path, name: str) -> dict | None:
    try:
        record = json.loads((outdir / name / RECORD_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("name") == name else None


def _still_there(outdir: Path, relative: object) -> bool:
    return isinstance(relative, str) and (outdir / relative).exists()


def reusable(outdir: str | Path, cells: Sequence[Cell] | Iterable[Cell]) -> dict[str, dict]:
    """Records of OUTDIR/matrix.json (or a cell folder's own record, newer) that ``cells`` can reuse: same name and
    key, passed, report (and artifact, when it had one) still on disk. Returned by cell name, marked
    ``"cached": true``."""
    outdir = Path(outdir)
    wanted = {cell.name: cell.key for cell in cells if cell.key and cell.skip is None}
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
