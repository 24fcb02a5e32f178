"""The Keras side of the source -> ONNX hop for localization: layer outputs (a Keras sub-model on the same
inputs), matched to the ONNX tensors tf2onnx made for each layer.

tf2onnx names a node after the TF op it converts, under the layer's name scope
(``functional_1/dense_3/MatMul``); TF makes scope names unique with ``_N`` suffixes, so a scope ``dense_1`` may
be layer ``dense_1`` or layer ``dense``'s second scope. Scopes are paired with layers one to one: first those
only one layer can own, then the rest in order. A layer's ONNX tensor is the one its last node hands out of its
scope with the layer's output shape, or that shape channels-first where tf2onnx moved a convolution's layout
(the probe transposes the Keras output to match). Only top-level layers of a model built on
``keras.Input`` used once each can be shown; a SavedModel, TFLite file or tf.function records no layers.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxbridge.localize.probe import Sides
from onnxbridge.localize.scopes import ScopedGraph

if TYPE_CHECKING:
    import onnx
    from onnxbridge.frontends.tensorflow.model import TFModel

_SUFFIX = re.compile(r"^(.*)_\d+$")
# tf2onnx computes convolutions channels-first: a layer's NHWC output may exist only as NCHW
_TO_CHANNELS_FIRST = {3: (0, 2, 1), 4: (0, 3, 1, 2), 5: (0, 4, 1, 2, 3)}


def keras_model_of(source: "TFModel") -> Any:
    """The Keras model behind a TF source, or None (SavedModel, TFLite, tf.function)."""
    import keras

    model = getattr(source.fn, "keras", None)
    return model if isinstance(model, keras.Model) else None


def pair_scopes(scopes: Sequence[str], layers: Sequence[str]) -> dict[str, str]:
    """Scope name -> layer name, one to one: a scope is its layer's name, or that name with a ``_N`` suffix."""
    known = set(layers)
    options: dict[str, list[str]] = {}
    for s in scopes:
        stripped = _SUFFIX.match(s)
        cands = [c for c in (s, stripped.group(1) if stripped else None) if c in known]
        if cands:
            options[s] = cands
    paired: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        taken = set(paired.values())
        for s, cands in options.items():
            free = [c for c in cands if c not in taken]
            if s not in paired and len(free) == 1:
                owners = [o for o, cs in options.items() if o not in paired and free[0] in cs]
                if len(owners) == 1 or len(cands) == 1:
                    paired[s] = free[0]
                    taken.add(free[0])
                    changed = True
    order = {name: i for i, name in enumerate(layers)}
    taken = set(paired.values())
    for s in scopes:  # what is left: in graph order, the layer earliest in the model's order
        free = sorted((c for c in options.get(s, []) if c not in taken), key=order.__getitem__)
        if s not in paired and free:
            paired[s] = free[0]
            taken.add(free[0])
    return paired


def layer_tensor(graph: ScopedGraph, nodes: Sequence[int], shape: Sequence[int | None]
                 ) -> tuple[str, tuple[int, ...] | None] | None:
    """(tensor, perm) for a layer of output ``shape``: the last float tensor leaving ``nodes`` that has the shape
    as is (perm None) or channels-first (``perm`` takes the Keras output there); None where none does, or where
    the last one fits both ways (which one tf2onnx made cannot be told)."""
    perm = _TO_CHANNELS_FIRST.get(len(shape))
    moved = tuple(shape[i] for i in perm) if perm else None
    for t in reversed(graph.leaving(nodes)):
        if not graph.is_float(t):
            continue
        direct, flipped = graph.fits(t, shape), moved is not None and graph.fits(t, moved)
        if direct and flipped:
            return None
        if direct or flipped:
            return t, (perm if flipped else None)
    return None


class KerasProbe:
    """Runs a Keras sub-model that returns the asked layers' outputs; ``targets`` maps an ONNX tensor name to
    (layer name, the transpose that gives the ONNX tensor's layout or None)."""

    def __init__(self, source: "TFModel", model: Any, targets: Mapping[str, tuple[str, tuple[int, ...] | None]]):
        self.source, self.model, self.targets = source, model, dict(targets)
        self.what = f"Keras layer outputs of {source.description}"
        self.runs = 0
        self._subs: dict[tuple[str, ...], Any] = {}

    def _sub(self, layers: tuple[str, ...]) -> Any:
        import keras

        if layers not in self._subs:
            self._subs = {layers: keras.Model(self.model.input,  # the inputs in the structure the model takes
                                              [self.model.get_layer(n).output for n in layers])}
        return self._subs[layers]

    def tensors(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from onnxbridge.frontends.tensorflow.signatures import to_nhwc
        from onnxbridge.frontends.tensorflow.tfimport import import_tf

        tf = import_tf()
        layers = tuple(dict.fromkeys(self.targets[n][0] for n in names))
        tensors = [tf.constant(to_nhwc(np.asarray(feeds[s.name])) if s.name in self.source.nchw
                               else np.asarray(feeds[s.name])) for s in self.source.tf_specs]
        args = tf.nest.pack_sequence_as(self.model.input, tensors)  # tf_specs follow its flattened order
        outs = self._sub(layers)(args, training=False)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        self.runs += 1
        by_layer = {n: np.asarray(o) for n, o in zip(layers, outs)}
        out = {}
        for n in names:
            layer, perm = self.targets[n]
            out[n] = by_layer[layer] if perm is None else np.ascontiguousarray(by_layer[layer].transpose(perm))
        return out


def keras_sides(source: "TFModel", onnx_model: "onnx.ModelProto") -> Sides | None:
    """The Keras side of the source -> ONNX hop, or None where the source is no Keras model built on inputs."""
    model = keras_model_of(source)
    try:
        if model is None or not model.inputs:
            return None
        model.input  # noqa: B018 - a subclassed model has none (it raises)
    except (AttributeError, ValueError):
        return None
    layers = []
    for layer in model.layers:
        try:
            out = layer.output
        except (AttributeError, ValueError):  # used more than once, or never connected
            continue
        if not isinstance(out, (list, tuple, dict)) and "float" in str(out.dtype):
            layers.append((layer.name, tuple(out.shape)))
    graph = ScopedGraph(onnx_model)
    names = [layer for layer, _ in layers]
    known = set(names)
    by_scope: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(graph.nodes):
        parts = node.name.split("/")[:-1]
        # the first part is the model's own scope; the layer is the first part after it that may name one
        for part in parts[1:]:
            if part in known or (_SUFFIX.match(part) and _SUFFIX.match(part).group(1) in known):
                by_scope[part].append(i)
                break
    paired = pair_scopes(list(by_scope), names)
    shapes = dict(layers)
    chosen: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    for scope, layer in paired.items():
        found = layer_tensor(graph, by_scope[scope], shapes[layer])
        if found is not None and found[0] not in graph.inputs:
            chosen[found[0]] = (layer, found[1])
    if not chosen:
        return None
    return Sides(KerasProbe(source, model, chosen), graph.checkpoints({t: n for t, (n, _) in chosen.items()}),
                 f"Keras layer outputs ({len(chosen)} layers) matched to ONNX tensors through tf2onnx node names")
