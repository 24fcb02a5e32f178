"""Resolve what the user named as a source: a path, a live object, or a ``module:factory``."""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator

from onnxbridge.errors import BadInputError, TimedOut, first_line
from onnxbridge.pathchecks import regular

_FACTORY = re.compile(r"^(?P<mod>[^:]+\.py|[A-Za-z_][\w.]*):(?P<fn>[A-Za-z_]\w*)$")


def is_factory(source: Any) -> bool:
    return isinstance(source, str) and not Path(source).exists() and bool(_FACTORY.match(source))


def call_factory(spec: str) -> tuple[Any, Any]:
    """Import ``file.py:fn`` or ``pkg.mod:fn`` and call it; returns (model, sample_inputs or None)."""
    m = _FACTORY.match(spec)
    assert m
    mod_name, fn_name = m["mod"], m["fn"]
    try:
        if mod_name.endswith(".py"):
            path = regular(mod_name, "factory file")
            name = f"onnxbridge_user_{abs(hash(path.resolve()))}"
            spec_ = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec_)
            sys.modules[name] = module
            spec_.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except BadInputError:
        raise
    except SystemExit as exc:  # the module's own code: never the end of this run, nor a silent exit 0
        raise BadInputError(f"importing '{mod_name}' for the factory '{spec}' called {exit_call(exc)}") from None
    except Exception as exc:
        raise BadInputError(f"cannot import '{mod_name}': {type(exc).__name__}: {first_line(exc)}") from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise BadInputError(f"'{mod_name}' has no callable '{fn_name}'")
    try:
        result = fn()
    except TimedOut:  # the run's time budget, not the factory's error
        raise
    except SystemExit as exc:
        raise BadInputError(f"the factory '{spec}' called {exit_call(exc)}") from None
    except Exception as exc:
        raise BadInputError(f"factory '{spec}' raised {type(exc).__name__}: {first_line(exc)}") from None
    if isinstance(result, tuple) and len(result) == 2:
        return result[0], result[1]
    return result, None


def exit_call(exc: SystemExit) -> str:
    """The call that raised ``exc``, as the user's code wrote it: ``sys.exit(0)``, ``sys.exit()``."""
    return f"sys.exit({'' if exc.code is None else repr(exc.code)})"


def pick_frontend(source: Any, from_: str | None) -> str:
    """The frontend name for ``source``: ``from_`` if given, else the first that accepts it."""
    from onnxbridge.plugins import FRONTENDS

    if isinstance(source, (str, Path)) and os.path.lexists(source):
        regular(source, "the source model", folder=True)  # before a frontend's ``accepts`` reads it
    if from_:
        FRONTENDS.plugin(from_)
        return from_
    if isinstance(source, (str, Path)) and not Path(source).exists():
        raise BadInputError(f"'{source}' does not exist (and is not a module:function factory)")
    for name in FRONTENDS.names():
        try:
            module = FRONTENDS.module(name)  # its toolchain is not needed to say whether it accepts the source
        except Exception:  # noqa: BLE001 - a broken plugin is skipped here, refused where named (--from)
            continue
        accepts = getattr(module, "accepts", None)
        if accepts is not None and accepts(source):
            return name
    what = f"'{source}'" if isinstance(source, (str, Path)) else f"a {type(source).__name__}"
    raise BadInputError(f"no frontend recognises {what}; known: {', '.join(FRONTENDS.names())} "
                        "(pass --from to choose one)")


@contextlib.contextmanager
def importable_beside(path: str | Path) -> Iterator[None]:
    """The folder holding ``path`` on ``sys.path`` while the block runs (first, so a pickle's classes defined in a
    ``.py`` beside it are found before anything of the same name), ``sys.path`` as it was afterwards. Modules
    imported meanwhile stay imported, so the loaded objects keep working."""
    folder = str(Path(path).resolve().parent)
    saved = list(sys.path)
    sys.path.insert(0, folder)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path[:] = saved


def missing_module_hint(exc: BaseException, path: str | Path) -> str | None:
    """For a pickle that names a module Python cannot find: where to put it."""
    if isinstance(exc, ModuleNotFoundError) or "No module named" in str(exc):
        return (f"the pickle's classes must be importable: put their .py file beside '{Path(path).name}' or on "
                "PYTHONPATH")
    return None
