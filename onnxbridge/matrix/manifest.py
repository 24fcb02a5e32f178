"""A matrix manifest (TOML): ``[matrix]`` defaults and one ``[[model]]`` table per model.

    [matrix]
    targets = ["onnx", "coreml"]          # backend names
    precisions = ["fp32", "fp16"]
    opsets = [17]                         # optional: the exporter's default opset when absent
    exclude = [{ model = "clf", target = "coreml" }]
    atol = 1e-4                           # any convert option: a default for every model

    [[model]]
    name = "cnn"                          # a folder name under OUTDIR
    source = "examples/models.py:cnn"     # relative paths resolve against the manifest's folder
    dynamic = ["x:0:batch"]               # any convert option by its Python API name
    data = ["weights.bin"]                # files the factory reads (hashed into the cache key)
    env = ["MODEL_VARIANT"]               # environment variables it reads (their values in the key)

A model may also give its own ``targets``/``precisions``/``opsets``; ``data`` and ``env`` in ``[matrix]`` add to
every model's. Every refusal is a BadInputError naming the key and its line in the file.
"""
from __future__ import annotations

import inspect
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onnxbridge.errors import BadInputError, first_line
from onnxbridge.matrix.outputs import OUTPUT_NAMES
from onnxbridge.pathchecks import regular

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib

PRECISIONS = ("fp32", "fp16", "int8")
AXES = ("targets", "precisions", "opsets")  # what a cell varies over
EXCLUDE_KEYS = ("model", "target", "precision", "opset")
# convert's parameters a cell sets itself (or that make no sense per cell)
RESERVED = ("source", "sample_inputs", "to", "output", "precision", "opset", "report", "renderers", "progress")
ALIASES = {"from": "from_"}  # TOML spelling -> the Python API's name
DECLARED = ("data", "env")  # what a model declares it reads besides its source: files, environment variables
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_FACTORY_FILE = re.compile(r"^(?P<file>[^:]+\.py):(?P<fn>[A-Za-z_]\w*)$")
_FACTORY_MODULE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")


@dataclass
class Model:
    """One ``[[model]]`` table: its name, its source (resolved), its convert options (the matrix defaults merged
    under its own), its axes (the matrix's unless it gives its own) and the data files (resolved) and environment
    variables it declares (the matrix's and its own)."""

    name: str
    source: str
    options: dict
    targets: list[str]
    precisions: list[str]
    opsets: list[int | None]
    line: int = 0
    data: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)


@dataclass
class Manifest:
    """A loaded manifest: its path, its models and the exclusions (dicts of model/target/precision/opset)."""

    path: Path
    models: list[Model]
    exclude: list[dict] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.path.parent


def option_names() -> dict[str, str]:
    """Every convert option a manifest may name -> "convert" or the kind of plugin that declares it."""
    from onnxbridge.plugins import BACKENDS, FRONTENDS
    from onnxbridge.spine import convert

    names = {p.name: "convert" for p in inspect.signature(convert).parameters.values()
             if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in RESERVED}
    for kind, registry in (("frontend", FRONTENDS), ("backend", BACKENDS)):
        for name in registry.options():
            names.setdefault(name, kind)
    return names


def backend_option_names() -> set[str]:
    """The options backends declare (a cell keeps only those its own target declares)."""
    from onnxbridge.plugins import BACKENDS

    return set(BACKENDS.options())


def path_options(kinds: tuple[str, ...] = ("path",)) -> set[str]:
    """Options whose value is a file to read (kind "path": resolved against the manifest's folder, hashed into cache
    keys), or to write (kind "file": resolved too)."""
    from onnxbridge.plugins import BACKENDS, FRONTENDS

    found = {"inputs"} if "path" in kinds else set()
    for registry in (FRONTENDS, BACKENDS):
        for name, by_plugin in registry.options().items():
            if any(o.kind in kinds for o in by_plugin.values()):
                found.add(name)
    return found


def _header(line: str) -> str | None:
    """The table a header line opens (``[matrix]``, ``[[model]]``, ``[ a . b ]`` -> ``a.b``), else None. Plain string
    operations: linear in the line, whatever it holds."""
    text = line.lstrip()
    if not text.startswith("["):
        return None
    close = text.find("]")
    name = text[2 if text.startswith("[[") else 1:close].strip() if close > 0 else ""
    return name.replace(" ", "") or None


def _keys(line: str) -> list[str]:
    """The keys a line assigns (``key =``, ``"key" =``, ``{ a = 1, b = 2 }``): for each ``=``, the bare word or
    quoted text before it, where that starts the line or follows a space, ``{`` or ``,``. Linear in the line: each
    ``=`` looks back only as far as the one before it."""
    found = []
    start = 0
    for equals in (i for i, char in enumerate(line) if char == "="):
        end = equals
        while end > start and line[end - 1] in " \t":
            end -= 1
        if end > start and line[end - 1] in "\"'":
            begin = line.rfind(line[end - 1], start, end - 1)
            key = line[begin + 1:end - 1] if begin >= 0 else None
        else:
            begin = end
            while begin > start and line[begin - 1] not in " \t{,=[\"'":
                begin -= 1
            key = line[begin:end] if begin < end else None
        if key is not None and (begin == 0 or line[begin - 1] in " \t{,"):
            found.append(key)
        start = equals + 1
    return found


class _Lines:
    """Finds where a key sits in the manifest's text (tomllib reports none): by table, then by key."""

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.tables: list[tuple[str, int, int]] = []  # (header name, first line, last line), 1-based
        for number, line in enumerate(self.lines, 1):
            name = _header(line)
            if name is not None:
                if self.tables:
                    previous, start, _ = self.tables[-1]
                    self.tables[-1] = (previous, start, number - 1)
                self.tables.append((name, number, len(self.lines)))
        self.top_end = self.tables[0][1] - 1 if self.tables else len(self.lines)

    def span(self, table: str | None, index: int = 0) -> tuple[int, int]:
        """Lines of table ``table`` (its ``index``-th occurrence for an array of tables) and its sub-tables;
        ``None``: the keys before any header."""
        if table is None:
            return 1, self.top_end
        starts = [(s, e) for name, s, e in self.tables if name == table] or \
            [(s, e) for name, s, e in self.tables if name.startswith(table + ".")]
        if index >= len(starts):
            return 1, len(self.lines)
        start, end = starts[index]
        for name, s, e in self.tables:
            if s > end and name.startswith(table + "."):
                end = e
            elif s > end:
                break
        return start, end

    def of(self, key: str, table: str | None = None, index: int = 0, after: int = 0) -> int:
        """The line of ``key`` (bare or quoted, also inside an inline table) in that table, at or after
        ``after``; the table's header line when the key is not found."""
        start, end = self.span(table, index)
        for number in range(max(start, after), end + 1):
            if key in _keys(self.lines[number - 1]):
                return number
        return start


def load_manifest(path: str | Path) -> Manifest:
    """Read and check a manifest; refuse (BadInputError) an unknown key, backend, precision or a bad value, naming
    the key and its line."""
    path = regular(path, "manifest")  # a FIFO or device would never end
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInputError(f"cannot read manifest '{path}': {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{path}: not valid TOML: {first_line(exc)}") from None
    return _Reader(path, text, data).manifest()


class _Reader:
    """One manifest's checks, each refusal located by ``_Lines``."""

    def __init__(self, path: Path, text: str, data: dict):
        self.path, self.data, self.where = path, data, _Lines(text)
        self.options = option_names()
        self.paths = path_options(("path", "file"))
        self.reads = path_options()

    def refuse(self, message: str, key: str, table: str | None = None, index: int = 0, after: int = 0,
               hint: str | None = None) -> BadInputError:
        line = self.where.of(key, table, index, after)
        return BadInputError(f"{self.path}:{line}: {message}", hint=hint)

    def manifest(self) -> Manifest:
        for key in self.data:
            if key not in ("matrix", "model"):
                raise self.refuse(f"unknown key '{key}' (a manifest has [matrix] and [[model]] tables)", key,
                                  None if key in self._top_keys() else key)
        matrix = self.data.get("matrix", {})
        if not isinstance(matrix, dict):
            raise self.refuse("'matrix' must be a table ([matrix])", "matrix")
        models = self.data.get("model", [])
        if not isinstance(models, list) or not models or not all(isinstance(m, dict) for m in models):
            raise self.refuse("the manifest needs at least one [[model]] table (with name and source)", "model")
        axes = {axis: self.axis(axis, matrix[axis], "matrix") for axis in AXES if axis in matrix}
        axes.setdefault("opsets", [None])
        defaults = self.convert_options(matrix, "matrix", 0, skip=(*AXES, *DECLARED, "exclude"))
        declared = {key: self.declared(key, matrix.get(key, []), "matrix") for key in DECLARED}
        exclude = self.exclude(matrix.get("exclude", []))
        seen: dict[str, int] = {}
        built = []
        for index, table in enumerate(models):
            model = self.model(table, index, axes, defaults, declared)
            if model.name in seen:
                raise self.refuse(f"model name '{model.name}' is used twice (models {seen[model.name] + 1} and "
                                  f"{index + 1})", "name", "model", index)
            seen[model.name] = index
            built.append(model)
        names = list(seen)
        for number, rule in enumerate(exclude):
            if "model" in rule and rule["model"] not in names:
                raise self.refuse(f"exclude names model '{rule['model']}', not in the manifest (models: "
                                  f"{', '.join(names)})", "exclude", "matrix")
        return Manifest(self.path, built, exclude)

    def _top_keys(self) -> set[str]:
        """Keys written before any table header (``key = value`` at the top of the file)."""
        start, end = self.where.span(None)
        return {m[1] for line in self.where.lines[start - 1:end]
                if (m := re.match(r"^\s*\"?([\w.-]+)\"?\s*=", line))}

    def axis(self, axis: str, value: Any, table: str, index: int = 0) -> list:
        """A checked ``targets``/``precisions``/``opsets`` list."""
        from onnxbridge.plugins import BACKENDS

        if not isinstance(value, list) or not value:
            raise self.refuse(f"'{axis}' must be a non-empty list", axis, table, index)
        for item in value:
            if axis == "targets":
                if not isinstance(item, str):
                    raise self.refuse(f"targets holds {item!r}, not a backend name", axis, table, index)
                try:
                    BACKENDS.plugin(item)
                except BadInputError as exc:
                    raise self.refuse(f"targets: {exc}", axis, table, index) from None
            elif axis == "precisions" and item not in PRECISIONS:
                raise self.refuse(f"unknown precision {item!r} in precisions (known: {', '.join(PRECISIONS)})",
                                  axis, table, index)
            elif axis == "opsets":
                self.opset(item, table, index)
        if len(set(value)) != len(value):
            raise self.refuse(f"'{axis}' names an entry twice: {value}", axis, table, index)
        return list(value)

    def opset(self, item: Any, table: str, index: int) -> None:
        """An opset onnxbridge delivers (``spine``'s check, so a cell never starts only to be refused)."""
        from onnxbridge.spine.preflight import check_opset_known

        if not isinstance(item, int) or isinstance(item, bool):
            raise self.refuse(f"opsets holds {item!r}, not an opset number", "opsets", table, index)
        try:
            check_opset_known(item)
        except BadInputError as exc:
            raise self.refuse(f"opsets: {str(exc).replace('--opset ', 'opset ')}", "opsets", table, index,
                              hint=exc.hint) from None

    def declared(self, key: str, value: Any, table: str, index: int = 0) -> list[str]:
        """A checked ``data`` list (files or folders, resolved; each a regular file or a folder) or ``env`` list
        (environment variable names)."""
        what = "file paths" if key == "data" else "environment variable names"
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.refuse(f"'{key}' must be a list of {what}", key, table, index)
        if key == "env":
            for name in value:
                if not _ENV_NAME.match(name):
                    raise self.refuse(f"env: {name[:80]!r} is not an environment variable name (letters, digits, "
                                      "'_')", key, table, index)
            return list(dict.fromkeys(value))
        found = (self.regular(self.resolve(text), "data file", key, table, index, folder=True) for text in value)
        return list(dict.fromkeys(str(path) for path in found))

    def exclude(self, value: Any) -> list[dict]:
        if not isinstance(value, list) or not all(isinstance(rule, dict) for rule in value):
            raise self.refuse("'exclude' must be a list of tables like { model = \"m\", target = \"coreml\" }",
                              "exclude", "matrix")
        rules = []
        anchor = self.where.of("exclude", "matrix")
        for rule in value:
            for key in rule:
                if key not in EXCLUDE_KEYS:
                    raise self.refuse(f"unknown key '{key}' in exclude (allowed: {', '.join(EXCLUDE_KEYS)})", key,
                                      "matrix", after=anchor)
            if not rule:
                raise self.refuse("an exclude table is empty (it would exclude every cell)", "exclude", "matrix")
            for key, axis in (("target", "targets"), ("precision", "precisions"), ("opset", "opsets")):
                if key in rule:
                    try:
                        self.axis(axis, [rule[key]], "matrix")
                    except BadInputError as exc:
                        message = str(exc).partition(": ")[2]
                        raise self.refuse(f"exclude: {message}", key, "matrix", after=anchor) from None
            if "model" in rule and not isinstance(rule["model"], str):
                raise self.refuse(f"exclude: model {rule['model']!r} is not a model name", "model", "matrix",
                                  after=anchor)
            rules.append(dict(rule))
        return rules

    def convert_options(self, table: dict, name: str, index: int, skip: tuple[str, ...]) -> dict:
        """The convert options of one table (checked: known name, right type), relative paths resolved."""
        from onnxbridge import arguments

        found = {}
        for key, value in table.items():
            if key in skip:
                continue
            option = ALIASES.get(key, key)
            if option not in self.options:
                reserved = " (a cell sets it itself)" if option in RESERVED else ""
                raise self.refuse(f"unknown key '{key}' in [{'[model]' if name == 'model' else name}]{reserved}",
                                  key, name, index, hint="allowed: name, source, targets, precisions, opsets and the "
                                  "convert options (onnxbridge convert --help lists the plugins' options)")
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise self.refuse(f"'{key}' must be a string, number, boolean, list or table (not a date or time "
                                  "or nan)", key, name, index) from None
            try:
                arguments.check({option: value})
            except BadInputError as exc:
                raise self.refuse(str(exc), key, name, index) from None
            if option in self.paths and isinstance(value, str):
                value = str(self.resolve(value))
                if option in self.reads and os.path.lexists(value):  # hashed into cache keys: never a FIFO
                    self.regular(value, f"'{key}'", key, name, index)
            found[option] = value
        return found

    def regular(self, path: str | Path, what: str, key: str, table: str, index: int, folder: bool = False) -> Path:
        """``pathchecks.regular``'s refusal (a device, FIFO, socket or a link to one) at the key's line."""
        try:
            return regular(path, what, folder=folder)
        except BadInputError as exc:
            raise self.refuse(str(exc), key, table, index) from None

    def model(self, table: dict, index: int, axes: dict, defaults: dict, declared: dict) -> Model:
        line = self.where.span("model", index)[0]
        for key in ("name", "source"):
            if not isinstance(table.get(key), str) or not table[key]:
                raise self.refuse(f"model {index + 1} needs '{key}' (a string)", key, "model", index)
        name = table["name"]
        if not _SAFE_NAME.match(name) or name in (".", ".."):
            raise self.refuse(f"model name {name!r} is not a safe folder name (letters, digits, '.', '_', '-')",
                              "name", "model", index)
        if name.casefold() in OUTPUT_NAMES:
            raise self.refuse(f"model name {name!r} is the name of a summary file the matrix writes in OUTDIR "
                              f"({', '.join(OUTPUT_NAMES)})", "name", "model", index)
        source = self.source(table["source"], index)
        own = {axis: self.axis(axis, table[axis], "model", index) for axis in AXES if axis in table}
        options = {**defaults, **self.convert_options(table, "model", index, skip=("name", "source", *AXES,
                                                                                    *DECLARED))}
        data, env = (list(dict.fromkeys(declared[key] + self.declared(key, table.get(key, []), "model", index)))
                     for key in DECLARED)
        merged = {**axes, **own}
        for axis in ("targets", "precisions"):
            if axis not in merged:
                raise self.refuse(f"no '{axis}' for model '{name}': give them in [matrix] (or in the model)",
                                  axis, "matrix" if "matrix" in self.data else "model", 0 if "matrix" in self.data
                                  else index)
        return Model(name, source, options, merged["targets"], merged["precisions"], merged["opsets"], line,
                     data=data, env=env)

    def source(self, text: str, index: int) -> str:
        """The source with its file resolved against the manifest's folder; a missing file is refused."""
        m = _FACTORY_FILE.match(text)
        if m:
            file = self.resolve(m["file"])
            if not os.path.lexists(file):
                raise self.refuse(f"source: factory file '{file}' does not exist", "source", "model", index)
            return f"{self.regular(file, 'factory file', 'source', 'model', index)}:{m['fn']}"
        if _FACTORY_MODULE.match(text) and not os.path.lexists(self.resolve(text)):
            return text  # pkg.module:factory, imported by the cell
        file = self.resolve(text)
        if not os.path.lexists(file):
            raise self.refuse(f"source '{text}' does not exist (resolved to '{file}'; not a module:factory either)",
                              "source", "model", index)
        return str(self.regular(file, "source", "source", "model", index, folder=True))

    def resolve(self, text: str) -> Path:
        try:
            path = Path(text).expanduser()
            return path if path.is_absolute() else (self.path.parent / path).resolve()
        except (OSError, RuntimeError) as exc:  # a symbolic link loop, an unknown ~user
            raise BadInputError(f"{self.path}: cannot resolve '{text}': {first_line(exc)}") from None
