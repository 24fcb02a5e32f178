"""Does a ``.dlc`` hold exactly a given graph? Nothing pip-installable executes a DLC on x86, so the dlc hop runs
the prepared ONNX model on the HTP simulator and this module proves the artifact is the graph that ran: the DLC is
compared, as read by our reader, with the DLC onnxruntime-qnn's QnnIr serializer writes from that model.

Compared, in this order: the ZIP entries present (metadata excepted: it holds timestamps), the graph count, the
nodes in order (name, type, inputs, outputs, attributes), the tensors (location, shape, dtype, quantization
encoding, scale, bitwidth), the weights in ``model.params.bin`` (each static tensor's and each tensor-valued
attribute's bytes, by SHA-256 of its slice; the whole blob's where the slices overlap or run past it, as only a
crafted file has), and last the raw ``model`` / ``model.params`` entries, which catch the fields our reader does not
parse. QnnIr writes the same bytes for the same model run to run (``qnn.dump_dlc`` loads the model from bytes so the
graph name comes from the graph, not from the file's path), so a genuine DLC compares equal entry for entry.

The work is bounded by the reference (our own serialization) and by what our reader decodes, itself bounded by
the file's size: weights are hashed only when both blobs declare the same size, in one streaming pass each; every
node, tensor and weight is visited once; names in the lines are clipped and the lines past ``SHOWN`` counted.
"""
from __future__ import annotations

import hashlib
import math

from onnxbridge.backends.dlc.container import PARAMS, TOPOLOGY, WEIGHTS, Dlc, Lines, clip, names, weight_blob

METADATA = ("dlc.metadata",)  # entry prefixes left out of the comparison (timestamps, the writer's arguments)


def _same(a, b) -> bool:
    """Equal values of the same type (True is not 1, 1.0 is not 1); NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _short(sha: str) -> str:
    return sha[:12] + ".."


def weight_digests(dlc: Dlc) -> tuple[str, dict[str, str] | None]:
    """SHA-256 of ``model.params.bin``, and of each weight's slice (by tensor name) where the slices neither
    overlap nor run past the blob (else None); one streaming pass over the blob, once per ``Dlc``."""
    cached = getattr(dlc, "_weight_digests", None)
    if cached is None:
        cached = dlc._weight_digests = _weight_digests(dlc)
    return cached


def _weight_digests(dlc: Dlc) -> tuple[str, dict[str, str] | None]:
    ranges = sorted((off, size, name) for name, (off, size) in dlc.weights.items())
    sliced = all(off + size <= dlc.weights_bytes for off, size, _ in ranges) and all(
        a[0] + a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))
    per = {name: hashlib.sha256() for _, _, name in ranges} if sliced else None
    blob = hashlib.sha256()
    pos = i = 0
    for chunk in weight_blob(dlc):
        blob.update(chunk)
        end = pos + len(chunk)
        view = memoryview(chunk)
        while per is not None and i < len(ranges) and ranges[i][0] < end:
            off, size, name = ranges[i]
            lo, hi = max(off, pos), min(off + size, end)
            if hi > lo:
                per[name].update(view[lo - pos:hi - pos])
            if off + size > end:
                break  # the rest of this weight is in the next chunk
            i += 1
        pos = end
    return blob.hexdigest(), ({n: h.hexdigest() for n, h in per.items()} if per is not None else None)


def graph_sha256(dlc: Dlc, blob_sha: str | None = None) -> str:
    """SHA-256 over the SHA-256 of the ``model``, ``model.params`` and ``model.params.bin`` entries: equal for
    two DLCs exactly when their graphs, parameters and weights are byte for byte the same (metadata aside)."""
    blob_sha = blob_sha if blob_sha is not None else weight_digests(dlc)[0]
    parts = (dlc.digests.get(TOPOLOGY, ""), dlc.digests.get(PARAMS, ""), blob_sha)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def facts(dlc: Dlc, blob_sha: str | None = None) -> dict:
    """The structure facts of a DLC for the report: graph_sha256, nodes, static tensors, weight bytes."""
    return {"graph_sha256": graph_sha256(dlc, blob_sha), "nodes": sum(len(g.nodes) for g in dlc.graphs),
            "static_tensors": sum(t.location == "static" for g in dlc.graphs for t in g.tensors.values()),
            "weight_bytes": dlc.weights_bytes}


def _presence(what: str, have, want, out: Lines, mine: str, theirs: str, verb: str = "are in") \
        -> tuple[list, list]:
    """Names in one collection and not the other, as difference lines; returns (extra, missing)."""
    extra = [n for n in have if n not in want]
    missing = [n for n in want if n not in have]
    if extra:
        out.add(f"{what} {names(extra)} {verb} {mine}, not in {theirs}")
    if missing:
        out.add(f"{what} {names(missing)} {verb} {theirs}, not in {mine}")
    return extra, missing


def _entries(dlc: Dlc, ref: Dlc, out: Lines, mine: str, theirs: str) -> None:
    def kept(entries):
        return [n for n in entries if not n.startswith(METADATA)]

    _presence("entry(ies)", kept(dlc.entries), kept(ref.entries), out, mine, theirs)


def _nodes(g, r, out: Lines, mine: str, theirs: str) -> None:
    if len(g.nodes) != len(r.nodes):
        out.add(f"graph '{g.name}' has {len(g.nodes)} node(s) in {mine}, {len(r.nodes)} in {theirs}")
    for i, (n, m) in enumerate(zip(g.nodes, r.nodes)):
        if n.name != m.name:
            out.add(f"node #{i} is '{clip(n.name)}' ({clip(n.type)}) in {mine}, '{m.name}' ({m.type}) in {theirs}")
            continue
        if n.type != m.type:
            out.add(f"node '{n.name}' is {clip(n.type)} in {mine}, {m.type} in {theirs}")
        for what, a, b in (("reads", n.inputs, m.inputs), ("writes", n.outputs, m.outputs)):
            if a != b:
                out.add(f"node '{n.name}' {what} {names(a) or 'nothing'} in {mine}, {names(b) or 'nothing'} in "
                        f"{theirs}")
        for key in sorted(set(n.attributes) | set(m.attributes)):
            a, b = n.attributes.get(key, "(absent)"), m.attributes.get(key, "(absent)")
            if not _same(a, b):
                out.add(f"node '{n.name}' attribute '{clip(key)}' is {clip(repr(a))} in {mine}, {b!r} in {theirs}")


TENSOR_FIELDS = ("location", "shape", "dtype", "encoding", "scale", "bitwidth")


def _tensors(g, r, out: Lines, mine: str, theirs: str) -> None:
    _presence("tensor(s)", g.tensors, r.tensors, out, mine, theirs)
    for name, t in g.tensors.items():
        u = r.tensors.get(name)
        if u is None:
            continue
        for key in TENSOR_FIELDS:
            a, b = getattr(t, key), getattr(u, key)
            if not _same(a, b):
                out.add(f"tensor '{name}' {key} is {clip(str(a))} in {mine}, {b} in {theirs}")


def _weights(dlc: Dlc, ref: Dlc, out: Lines, mine: str, theirs: str) -> str | None:
    """Weight differences, by tensor where the blobs can be sliced; the DLC's blob SHA-256 when it was hashed."""
    statics = {n for g in dlc.graphs for n, t in g.tensors.items() if t.location == "static"}

    def kind(name: str) -> str:
        return "static tensor" if name in statics else "parameter tensor"

    extra, missing = _presence("weight(s)", dlc.weights, ref.weights, out, mine, theirs, verb="are stored in")
    sized = [n for n, (_, size) in dlc.weights.items() if n in ref.weights and size != ref.weights[n][1]]
    for name in sized[:3]:
        out.add(f"{kind(name)} '{name}' holds {dlc.weights[name][1]} bytes in {mine}, {ref.weights[name][1]} "
                f"in {theirs}")
    if dlc.weights_bytes != ref.weights_bytes:  # nothing to hash against: the blobs cannot be the same
        out.add(f"{WEIGHTS} holds {dlc.weights_bytes} bytes in {mine}, {ref.weights_bytes} in {theirs}")
        return None
    blob, per = weight_digests(dlc)
    ref_blob, ref_per = weight_digests(ref)
    if blob == ref_blob:
        return blob
    if per is None or ref_per is None:
        out.add(f"{WEIGHTS} bytes differ (sha256 {_short(blob)} in {mine}, {_short(ref_blob)} in {theirs}; "
                "its tensors overlap or run past it, so they cannot be compared one by one)")
        return blob
    differ = [n for n in per if n in ref_per and per[n] != ref_per[n] and n not in sized]
    for name in differ:
        out.add(f"{kind(name)} '{name}' bytes differ (sha256 {_short(per[name])} in {mine}, "
                f"{_short(ref_per[name])} in {theirs})")
    if not differ and not extra and not missing and not sized:
        out.add(f"{WEIGHTS} differs outside its tensors (sha256 {_short(blob)} in {mine}, {_short(ref_blob)} in "
                f"{theirs}): padding or unreferenced bytes")
    return blob


def compare(dlc: Dlc, ref: Dlc, *, mine: str = "the DLC", theirs: str = "the graph simulated") -> list[str]:
    """Every difference between ``dlc`` and ``ref`` (one line each, the first ``SHOWN``; a last line counts the
    rest); empty when ``dlc`` holds exactly ``ref``'s graph."""
    out = Lines()
    _entries(dlc, ref, out, mine, theirs)
    if len(dlc.graphs) != len(ref.graphs):
        out.add(f"{mine} holds {len(dlc.graphs)} graph(s), {theirs} {len(ref.graphs)}")
    for g, r in zip(dlc.graphs, ref.graphs):
        _nodes(g, r, out, mine, theirs)
        _tensors(g, r, out, mine, theirs)
    _weights(dlc, ref, out, mine, theirs)
    if not out:  # what our reader parses is the same: the raw entries hold what it does not parse
        for entry in (TOPOLOGY, PARAMS):
            if dlc.digests.get(entry) != ref.digests.get(entry):
                out.add(f"the '{entry}' entry differs (sha256 {_short(dlc.digests.get(entry, ''))} in {mine}, "
                        f"{_short(ref.digests.get(entry, ''))} in {theirs}) in fields our reader does not compare"
                        + _why_raw(dlc, ref, mine, theirs))
                break
    return out.listed()


def _why_raw(dlc: Dlc, ref: Dlc, mine: str, theirs: str) -> str:
    names = [(g.name, r.name) for g, r in zip(dlc.graphs, ref.graphs) if g.name != r.name]
    mine_v, theirs_v = dlc.converter.get("converterVersion"), ref.converter.get("converterVersion")
    why = []
    if names:
        why.append(f"graph named '{names[0][0]}' in {mine}, '{names[0][1]}' in {theirs}")
    if mine_v != theirs_v:
        why.append(f"written by converter {mine_v} vs {theirs_v}")
    return f" ({'; '.join(why)})" if why else ""
