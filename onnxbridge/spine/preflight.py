"""What is refused before any work: options no plugin of the run declares, a precision, target, opset or
output suffix the backend does not take, dynamic axes its artifacts cannot keep."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from onnxbridge.errors import BadInputError
from onnxbridge.specs import DynamicAxis, InputSpec


def take_backend_options(to: str, options: dict) -> dict:
    """The options backends declare, taken out of ``options`` (None/empty dropped); refused where ``to`` does not
    declare them, or a choice it does not offer."""
    from onnxbridge.plugins import BACKENDS

    given = {k: options.pop(k) for k in BACKENDS.options() if k in options}
    given = {k: v for k, v in given.items() if v is not None and v != () and v != []}
    refuse_foreign(BACKENDS, to, given, f"--to {to}", "--to")
    return given


def refuse_foreign(registry, name: str, given: dict, what: str, selector: str, command: str = "convert") -> None:
    """Refuse (exit 2) an option of ``given`` that plugin ``name`` does not declare, naming the plugins that do, one
    it declares for other commands than ``command`` (``Option.commands``), and a choice it does not offer."""
    declared = registry.options()
    mine = {o.name: o for o in registry.plugin(name).options}
    for key, value in given.items():
        flag = "--" + key.replace("_", "-")
        if key not in mine:
            takers = ", ".join(f"{selector} {p}" for p in declared.get(key, {}))
            raise BadInputError(f"{flag} does not apply to {what}" + (f" (it applies to {takers})" if takers else ""))
        option = mine[key]
        if option.commands and command not in option.commands:
            raise BadInputError(f"{flag} does not apply to {command} (it applies to {', '.join(option.commands)})")
        if option.kind == "choice" and value not in option.choices:
            raise BadInputError(f"{flag} {value} does not apply to {what}; its choices: {', '.join(option.choices)}")


def check_precision(to: str, backend, precision: str) -> None:
    """Refuse a precision the target does not apply (each backend declares ``PRECISIONS``, and may say what to do
    instead in ``PRECISION_HINTS``)."""
    declared = tuple(backend.PRECISIONS)
    if precision not in declared:
        hint = getattr(backend, "PRECISION_HINTS", {}).get(precision)
        raise BadInputError(f"--precision {precision} is not applied by --to {to} (it applies "
                            f"{', '.join(declared) or 'none'})", hint=hint)


def check_opset_known(opset: int | None) -> None:
    """An opset beyond what the installed onnx defines is refused for every source (its checker and IR table are
    what vouch for the file)."""
    if opset is None:
        return
    import onnx

    from onnxbridge.adapters import MIN_OPSET, max_known_opset

    known = max_known_opset()
    if opset > known:
        raise BadInputError(f"--opset {opset} is newer than the installed onnx {onnx.__version__} defines (opsets up "
                            f"to {known}); the ONNX checker and IR version table cannot vouch for it",
                            hint=f"use --opset {known} or lower, or install a newer onnx")
    if opset < MIN_OPSET:
        raise BadInputError(f"--opset {opset} is below {MIN_OPSET}, the oldest opset onnxbridge delivers")


def refuse_suffix(to: str, backend, output: Path, chosen: bool) -> None:
    """An output the backend's files cannot be called: with ``--to`` given, its suffixes; without, no installed
    backend claims the name (the ONNX file would be written under a name that says otherwise, e.g. ``.tflite``)."""
    if chosen:
        raise BadInputError(f"-o {output.name}: --to {to} writes files ending with {' or '.join(backend.SUFFIXES)}")
    raise BadInputError(f"-o {output.name}: no installed backend writes files named like that; the backends and "
                        f"their suffixes: {installed_suffixes()}",
                        hint="end -o with the suffix of the format you want")


def installed_suffixes() -> str:
    """The installed backends and the suffixes of their files, in words: ``onnx (.onnx), coreml (.mlpackage), ...``."""
    from onnxbridge.plugins import BACKENDS

    return ", ".join(f"{n} ({', '.join(BACKENDS.module(n).SUFFIXES)})" for n in BACKENDS.names()
                     if not BACKENDS.plugin(n).broken)


def dynamic_not_kept(to: str, backend, spec: InputSpec) -> tuple[list[DynamicAxis], str] | None:
    """The ``--dynamic`` axes that ``to`` cannot keep, and the hint: a backend whose models have static shapes
    (its module declares ``KEEPS_DYNAMIC = False``: a DLC) would fix them at the sample's size; ``--input-shape``
    fixing that input's size is the way (the rule ``check --targets`` applies: dynamic dims without
    ``--input-shape`` block). None when nothing is lost."""
    if getattr(backend, "KEEPS_DYNAMIC", True):
        return None
    fixed = spec.fixed()
    lost = [d for d in spec.dynamic if d.name not in fixed]
    if not lost:
        return None
    names = list(dict.fromkeys(d.name for d in lost))
    return lost, (f"fix the size with --input-shape {names[0]}:D1,D2,... instead; `onnxbridge check --targets {to}` "
                  "applies the same rule")


def _axes_text(axes: Sequence[DynamicAxis]) -> str:
    return ", ".join(f"{d.name}:{d.axis}" + (f":{d.label}" if d.label else "") for d in axes)


def check_dynamic_kept(to: str, backend, spec: InputSpec) -> list[str]:
    """Refuse ``--dynamic`` to a backend that cannot keep it (``dynamic_not_kept``), before any work; the notes
    for dynamic axes it does not keep on inputs ``--input-shape`` fixes (built at that size)."""
    lost = dynamic_not_kept(to, backend, spec)
    if lost is not None:
        axes, hint = lost
        raise BadInputError(f"--dynamic {_axes_text(axes)}: --to {to} cannot keep a dynamic axis (its models have "
                            "static shapes): it would be fixed at the sample's size", hint=hint)
    if spec.dynamic and not getattr(backend, "KEEPS_DYNAMIC", True):
        fixed = spec.fixed()
        return [f"--dynamic {_axes_text(spec.dynamic)}: not kept by --to {to} (static shapes); built at "
                + ", ".join(f"{n} {list(fixed[n])}" for n in dict.fromkeys(d.name for d in spec.dynamic))
                + " (--input-shape)"]
    return []


def check_target(to: str, backend, target: str | None) -> None:
    """``--target`` must name one of the deployment targets the backend declares (``TARGETS``)."""
    from onnxbridge.plugins import BACKENDS

    if target is None:
        return
    targets = tuple(getattr(backend, "TARGETS", ()))
    if not targets:
        takers = [n for n in BACKENDS.names() if not BACKENDS.plugin(n).broken and getattr(BACKENDS.module(n), "TARGETS", ())]
        raise BadInputError(f"--target does not apply to --to {to}"
                            + (f" (it applies to {', '.join(f'--to {n}' for n in takers)})" if takers else ""))
    if target not in targets:
        raise BadInputError(f"unknown {to} target '{target}'; known: {', '.join(targets)}")
