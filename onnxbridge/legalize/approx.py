"""Approximations a user may allow (``--allow-approx NAME``): rewrites that change the numbers within a stated bound.
They run only when asked, before a backend's exact rules, and the report names every node they touched; the hop
that follows still compares the artifact with the exact model, so an approximation that exceeds the tolerance fails
it.

``gelu-tanh``: exact GELU, ``0.5 x (1 + erf(x / sqrt 2))`` (ONNX ``Gelu`` or its Erf pattern), becomes the tanh
form ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``, in plain ONNX ops every backend takes (no ``Erf``,
which some accelerators lack, and cheaper on NPUs). The two differ by at most ``GELU_TANH_MAX_ABS``.
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
from onnx import helper

from onnxbridge.errors import BadInputError
from onnxbridge.legalize import Graph, Match, Rule, apply
from onnxbridge.legalize.gelu import GELU_TYPES, gelu_pattern

if TYPE_CHECKING:
    import onnx

GELU_TANH_MAX_ABS = 4.8e-4  # max over x of |gelu_tanh(x) - gelu(x)|, measured in fp64 (reached near |x| = 2.7)
NUMPY = {1: np.float32, 10: np.float16}  # ONNX FLOAT, FLOAT16


def _exact_gelu(graph: Graph, node) -> Match | None:
    """An ONNX ``Gelu`` with ``approximate="none"``, or the Erf pattern of exact GELU."""
    if node.op_type == "Gelu" and node.domain in ("", "ai.onnx"):
        mode = next((a.s.decode() for a in node.attribute if a.name == "approximate"), "none")
        return Match([node], {"x": node.input[0]}, [node.output[0]]) if mode == "none" else None
    return gelu_pattern(graph, node)


def _float_input(graph: Graph, match: Match) -> bool:
    return graph.elem_type(match.inputs["x"]) in GELU_TYPES


def _gelu_tanh(graph: Graph, match: Match) -> list:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in Mul, Add and Tanh."""
    x, out = match.inputs["x"], match.outputs[0]
    dtype = NUMPY[graph.elem_type(x)]

    def const(name: str, value: float) -> str:
        return graph.constant(name, np.array(value, dtype))

    t = [graph.fresh(f"{out}_gelu_tanh") for _ in range(8)]
    return [helper.make_node("Mul", [x, x], [t[0]]), helper.make_node("Mul", [t[0], x], [t[1]]),
            helper.make_node("Mul", [t[1], const("k", 0.044715)], [t[2]]), helper.make_node("Add", [x, t[2]], [t[3]]),
            helper.make_node("Mul", [t[3], const("c", math.sqrt(2 / math.pi))], [t[4]]),
            helper.make_node("Tanh", [t[4]], [t[5]]), helper.make_node("Add", [t[5], const("one", 1.0)], [t[6]]),
            helper.make_node("Mul", [x, const("half", 0.5)], [t[7]]), helper.make_node("Mul", [t[7], t[6]], [out])]


GELU_TANH = Rule("GELU_TANH", _exact_gelu, _float_input, _gelu_tanh)
APPROXIMATIONS: dict[str, tuple[Rule, str]] = {
    "gelu-tanh": (GELU_TANH, f"exact GELU as its tanh form (differs by at most {GELU_TANH_MAX_ABS:g})"),
}


def check_names(names) -> list[str]:
    """``names`` (``--allow-approx``) as a list, each one known, else BadInputError listing the known ones."""
    names = list(names or ())
    unknown = [n for n in names if n not in APPROXIMATIONS]
    if unknown:
        raise BadInputError(f"--allow-approx {unknown[0]} is not an approximation onnxbridge has; known: "
                            f"{', '.join(APPROXIMATIONS)}")
    return names


def approximate(model: "onnx.ModelProto", names) -> tuple["onnx.ModelProto", list[str]]:
    """``model`` with the allowed approximations applied, and one note per approximation that touched a node
    (an approximation that found nothing to touch says so too)."""
    notes = []
    for name in check_names(names):
        rule, what = APPROXIMATIONS[name]
        model, fired = apply(model, [rule])
        nodes = [f.split("(node ", 1)[1].rstrip(")") for f in fired]
        notes.append(f"--allow-approx {name}: {what}; applied to {len(nodes)} node(s)"
                     + (f": {', '.join(nodes[:10])}{' ...' if len(nodes) > 10 else ''}" if nodes else
                        " (the model has no exact GELU)"))
    return model, notes


@contextlib.contextmanager
def approximated_file(onnx_path: Path, names) -> Iterator[tuple[Path, list[str]]]:
    """``(path, notes)``: ``onnx_path`` itself when no approximation is allowed, else the approximated model in a
    scratch folder that lives as long as the context (weights kept where they are: external data is copied)."""
    from onnxbridge.onnxio import load_onnx, save_onnx
    from onnxbridge.scratch import workdir

    if not names:
        yield Path(onnx_path), []
        return
    model, notes = approximate(load_onnx(onnx_path), names)
    with workdir("onnxbridge-approx-") as folder:
        path = folder / Path(onnx_path).name
        save_onnx(model, path, base_dir=Path(onnx_path).parent)
        yield path, notes
