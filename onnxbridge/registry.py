"""Name -> module-path registries with lazy imports and import-error placeholders."""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from onnxbridge.errors import BadInputError, UnavailableError
from onnxbridge.options import Option


@dataclass(frozen=True)
class Setup:
    """Something ``onnxbridge setup NAME`` makes for a plugin: an environment of its own for a converter that cannot
    share onnxbridge's, say. ``run`` is ``"module:function"``, imported only when the command runs and called as
    ``function(directory, say=..., note=...)``: ``directory`` is ``--dir`` (None: its default place), ``say(line)``
    reports progress (silent under ``--quiet``), ``note(line)`` writes a line to stderr. ``help``: one sentence for
    ``setup --help``; ``dir_help``: where ``--dir`` defaults to."""

    name: str
    run: str
    help: str
    dir_help: str = ""


@dataclass(frozen=True)
class Plugin:
    """A registered plugin: its module and the distributions it needs (``requires``), and the facts about it the
    core reads from here instead of naming it (conflicts, node_kind, gpus, hints, setups)."""

    name: str
    module: str
    requires: tuple[str, ...] = ()
    extra: str | None = None
    description: str = ""
    any_of: tuple[str, ...] = ()  # needs at least one of these (e.g. tensorrt or tensorrt-rtx)
    toolchain: str | None = None  # "module:function": a cheap check for a non-pip toolchain that can stand in for
    # ``requires`` (the QAIRT SDK on PATH for dlc); its truthy result means nothing is missing
    priority: int = 100  # order in listings and in picking a frontend for a source (lower first; built-ins < 100)
    options: tuple[Option, ...] = ()  # what it takes beyond the common arguments (onnxbridge.options)
    broken: str | None = None  # why its entry point could not be loaded (the plugin is listed, never used)
    install: str | None = None  # how to get what is missing, where ``pip install 'onnxbridge[extra]'`` is not it
    conflicts: tuple[str, ...] = ()  # modules after which its framework (the module named as the plugin) cannot be
    # imported in one process: the import would crash it (``isolation.require_importable`` refuses it)
    node_kind: str | None = None  # what a node on its side of a hop is called where a localization names one
    # (``report.source_kind``): "torch module", "MIL op"; None: the core's words ("source node", "adapted node")
    gpus: int = 0  # GPUs one of its builds or runs needs (the matrix's Ray executor reserves them)
    hints: tuple[tuple[str, str], ...] = ()  # (regex over a blocker its ``check`` reports, advice; ``\1`` refers
    # to the regex's groups): tried before the core's general families (``onnxbridge.hints``)
    setups: tuple[Setup, ...] = ()  # what ``onnxbridge setup NAME`` makes for it (``Setup``)

    def install_hint(self) -> str | None:
        return self.install or (f"pip install 'onnxbridge[{self.extra}]'" if self.extra else None)

    def unavailable(self, module: str, exc: BaseException) -> UnavailableError:
        """The error (exit 3, with the install hint) for the toolchain ``module`` this plugin needs, whose import
        raised ``exc``: not installed, or installed but broken."""
        from onnxbridge.errors import first_line

        what = module if module == self.name else f"{module} (for {self.name})"
        return UnavailableError(f"{what} cannot be imported here ({type(exc).__name__}: {first_line(exc)})",
                                hint=self.install_hint())

    def import_toolchain(self, module: str) -> ModuleType:
        """``module`` (what the plugin runs, e.g. openvino) imported, or ``unavailable``'s error. Backends import
        their toolchain through this (or raise ``unavailable`` themselves) before using it, so a missing one is exit
        3 with the hint in every command, never an ImportError."""
        try:
            return importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install's own error at import
            raise self.unavailable(module, exc) from None


def dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _entry_point_plugins(group: str) -> list[Plugin]:
    """The ``Plugin`` each entry point of ``group`` names; one that cannot be loaded becomes a ``broken`` Plugin."""
    plugins = []
    for entry in importlib.metadata.entry_points(group=group):
        try:
            plugin = entry.load()
            if not isinstance(plugin, Plugin) or plugin.name != entry.name:
                raise TypeError(f"{entry.value} is not a Plugin named '{entry.name}'")
        except Exception as exc:  # a third party's broken plugin must not break the CLI
            plugin = Plugin(entry.name, entry.value.partition(":")[0], broken=f"{type(exc).__name__}: {exc}")
        plugins.append(plugin)
    return plugins


class Registry:
    """Plugins by name. Nothing is imported until a plugin is asked for."""

    def __init__(self, kind: str, plugins: "list[Plugin] | Callable[[], list[Plugin]]", contract: type | None = None):
        self.kind = kind
        self.contract = contract  # a runtime-checkable Protocol every loaded module must satisfy
        self._found = plugins  # the plugins, or what finds them (entry points: read on first use)
        self._by_name: dict[str, Plugin] | None = None
        self._loaded: dict[str, ModuleType] = {}

    @property
    def _plugins(self) -> dict[str, Plugin]:
        """The plugins by name, in priority order. Entry points are read on first use, not at import, so a plugin's
        declaration module may import the module that holds the registry."""
        if self._by_name is None:
            plugins = self._found() if callable(self._found) else self._found
            self._by_name = {p.name: p for p in sorted(plugins, key=lambda p: (p.priority, p.name))}
        return self._by_name

    @classmethod
    def from_entry_points(cls, kind: str, group: str, contract: type | None = None) -> "Registry":
        """The plugins installed distributions declare under entry-point ``group``, each entry point naming a
        ``Plugin`` (``pkg.module:PLUGIN``, in a module that imports no framework). One that fails to load is kept as
        ``broken``: listed with the reason, refused when used."""
        return cls(kind, lambda: _entry_point_plugins(group), contract)

    def names(self) -> list[str]:
        return list(self._plugins)

    def options(self) -> dict[str, dict[str, Option]]:
        """Every declared option by name: plugin name -> its declaration."""
        found: dict[str, dict[str, Option]] = {}
        for plugin in self._plugins.values():
            for option in plugin.options:
                found.setdefault(option.name, {})[plugin.name] = option
        return found

    def setups(self) -> dict[str, Setup]:
        """What ``onnxbridge setup NAME`` can make, by name: every usable plugin's ``setups``."""
        return {s.name: s for p in self._plugins.values() if not p.broken for s in p.setups}

    def plugin(self, name: str) -> Plugin:
        try:
            return self._plugins[name]
        except KeyError:
            known = ", ".join(self._plugins)
            raise BadInputError(f"unknown {self.kind} '{name}'; known: {known}") from None

    def missing(self, name: str) -> list[str]:
        """Distributions the plugin needs that are not installed (metadata only, no import)."""
        plugin = self.plugin(name)
        missing = [d for d in plugin.requires if dist_version(d) is None]
        if plugin.any_of and all(dist_version(d) is None for d in plugin.any_of):
            missing.append(" or ".join(plugin.any_of))
        if missing and plugin.toolchain:
            module, _, function = plugin.toolchain.partition(":")
            if getattr(importlib.import_module(module), function)():
                return []
        return missing

    def require(self, name: str) -> Plugin:
        """The plugin, when its toolchain is installed (distribution metadata, or its ``toolchain`` check; nothing
        is imported); else UnavailableError (exit 3) with the install hint. Every command that uses a plugin's
        toolchain asks here first; a toolchain installed but broken is refused where it is imported
        (``Plugin.import_toolchain``)."""
        plugin = self.plugin(name)
        if plugin.broken:
            raise UnavailableError(f"{self.kind} '{name}' failed to load: {plugin.broken}")
        missing = self.missing(name)
        if missing:
            raise UnavailableError(f"{self.kind} '{name}' needs {', '.join(missing)}, not installed",
                                   hint=plugin.install_hint())
        return plugin

    def module(self, name: str) -> ModuleType:
        """The plugin's module, imported whether or not its toolchain is installed: for what needs none (a
        backend's ``SUFFIXES``, ``TARGETS`` and ``HOP_NAME``, a frontend's ``accepts``, ``inspect`` of a DLC).
        Plugin modules import no framework at module level; what runs the toolchain goes through ``load``.
        UnavailableError for a broken plugin or a module that cannot be imported."""
        plugin = self.plugin(name)
        if plugin.broken:
            raise UnavailableError(f"{self.kind} '{name}' failed to load: {plugin.broken}")
        try:
            return importlib.import_module(plugin.module)
        except Exception as exc:  # a broken optional dependency must not break the CLI
            raise UnavailableError(f"{self.kind} '{name}' failed to import: {type(exc).__name__}: {exc}") from exc

    def load(self, name: str) -> ModuleType:
        """The plugin's module once ``require`` passed and it implements the contract; UnavailableError (with the
        install hint where one helps) if it can't work."""
        if name in self._loaded:
            return self._loaded[name]
        plugin = self.require(name)
        module = self.module(name)
        lacking = self.lacking(module)
        if lacking:
            raise UnavailableError(f"{self.kind} '{name}' ({plugin.module}) does not implement the {self.kind} "
                                   f"contract: it lacks {', '.join(lacking)}")
        self._loaded[name] = module
        return module

    def lacking(self, module: ModuleType) -> list[str]:
        """The members of the registry's contract that ``module`` does not define."""
        if self.contract is None:
            return []
        members = [*getattr(self.contract, "__annotations__", {}),
                   *(n for n, v in vars(self.contract).items() if callable(v) and not n.startswith("_"))]
        return [m for m in dict.fromkeys(members) if not hasattr(module, m)]

    def status(self, name: str) -> dict:
        """Availability of one plugin, without importing heavy frameworks."""
        plugin = self.plugin(name)
        missing = [] if plugin.broken else self.missing(name)
        versions = {d: dist_version(d) for d in (*plugin.requires, *plugin.any_of)}
        ok = not plugin.broken and not missing and importlib.util.find_spec(plugin.module) is not None
        reason = None
        if plugin.broken:
            reason = f"failed to load: {plugin.broken}"
        elif missing:
            hint = plugin.install_hint()
            reason = f"missing {', '.join(missing)}" + (f" ({hint})" if hint else "")
        elif not ok:
            reason = f"module {plugin.module} not found"
        return {"name": name, "kind": self.kind, "available": ok, "reason": reason,
                "versions": versions, "description": plugin.description}
