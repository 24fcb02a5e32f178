"""``--split-tail``: the cut (the head, then the tail on what it hands over, computes exactly what the whole model
does), the nodes a backend's blockers name, the pipeline runner, and conversions that cut where the backend's own
check says (DLC, Core ML), or do not cut where the backend takes the whole model (OpenVINO)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxbridge
from onnxbridge.errors import UnsupportedError
from onnxbridge.plugins import for_file
from onnxbridge.split import Pipeline, cut, inferred_types, refused_nodes, tail_path
from tests.helpers.extras import requires


def detector(*extra_nodes, extra_inits=(), extra_inputs=(), outputs=("feat", "picked", "uniq")) -> onnx.ModelProto:
    """A small detector: integer conv features (exact in fp16), a threshold, NonZero, Gather, Unique."""
    w = np.random.default_rng(0).integers(-1, 2, (4, 3, 3, 3)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("ReduceSum", ["r", "ax1"], ["s"], name="sum", keepdims=0),
             h.make_node("Reshape", ["s", "flat"], ["feat"], name="flat"),
             h.make_node("Greater", ["feat", "thr"], ["mask"], name="gt"),
             h.make_node("NonZero", ["mask"], ["nz"], name="nonzero"),
             h.make_node("Squeeze", ["nz", "ax0"], ["idx"], name="squeeze"),
             h.make_node("Gather", ["feat", "idx"], ["picked"], name="gather"),
             h.make_node("Unique", ["picked"], ["uniq"], name="unique", sorted=1), *extra_nodes]
    inits = [nh.from_array(w, "W"), nh.from_array(np.array([1], np.int64), "ax1"),
             nh.from_array(np.array([-1], np.int64), "flat"), nh.from_array(np.array(2.5, np.float32), "thr"),
             nh.from_array(np.array([0], np.int64), "ax0"), *extra_inits]
    shapes = {"feat": [64], "pick": [], "sizes": [4], "kept": ["k", 4]}
    g = h.make_graph(nodes, "detector", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8]), *extra_inputs],
                     [h.make_tensor_value_info(o, T.INT64 if o == "sizes" else T.FLOAT, shapes.get(o, [f"{o}_n"]))
                      for o in outputs], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def sample(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(-2, 3, (1, 3, 8, 8)).astype(np.float32)


def run(model: onnx.ModelProto, feeds: dict) -> dict:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return dict(zip([o.name for o in session.get_outputs()],
                    session.run(None, {k: v for k, v in feeds.items() if k in names})))


def split_and_run(model: onnx.ModelProto, refused: dict, feeds: dict, tmp_path):
    """The model cut before ``refused``; the whole model's outputs, and the head's then the tail's."""
    path = tmp_path / "whole.onnx"
    onnx.save(model, path)
    made = cut(model, refused, inferred_types(path))
    for side in (made.head, made.tail):
        onnx.checker.check_model(side, full_check=True)
    head = run(made.head, feeds)
    tail = run(made.tail, {**feeds, **head})
    return made, run(model, feeds), {**head, **tail}


def test_the_head_then_the_tail_compute_the_whole_model(tmp_path):
    made, whole, split = split_and_run(detector(), {"nonzero": "no op"}, {"x": sample()}, tmp_path)
    assert made.first == {"node": "nonzero", "op": "NonZero", "reason": "no op"}
    assert [n.op_type for n in made.tail.graph.node] == ["NonZero", "Squeeze", "Gather", "Unique"]
    assert sorted(made.tensors) == ["feat", "mask"] and made.inputs == []
    assert [o.name for o in made.head.graph.output] == ["feat", "mask"]
    assert {i.name for i in made.head.graph.initializer} == {"W", "ax1", "flat", "thr"}
    for name, value in whole.items():
        np.testing.assert_array_equal(split[name], value)


def test_the_tail_reads_inputs_and_recomputes_constants_itself(tmp_path):
    """A model input the tail reads is the tail's input, not the head's output; a value made from constants only
    (a Constant scaled by an initializer) is computed again in the tail, not handed over."""
    extra = [h.make_node("Constant", [], ["three"], name="const", value=nh.from_array(np.array(3.0, np.float32))),
             h.make_node("Mul", ["three", "two"], ["scale"], name="scale"),
             h.make_node("Mul", ["picked", "scale"], ["scaled"], name="mul"),
             h.make_node("Add", ["scaled", "bias"], ["shifted"], name="add")]
    model = detector(*extra, extra_inits=[nh.from_array(np.array(2.0, np.float32), "two")],
                     extra_inputs=[h.make_tensor_value_info("bias", T.FLOAT, [1])], outputs=("feat", "shifted"))
    feeds = {"x": sample(), "bias": np.array([0.5], np.float32)}
    made, whole, split = split_and_run(model, {"nonzero": "no op"}, feeds, tmp_path)
    assert made.inputs == ["bias"] and sorted(made.tensors) == ["feat", "mask"] and made.copied == 2
    assert {n.name for n in made.head.graph.node}.isdisjoint({"const", "scale"})
    assert [i.name for i in made.head.graph.input] == ["x"]
    np.testing.assert_array_equal(split["shifted"], whole["shifted"])


@pytest.mark.parametrize("batch", [1, "N"])
def test_shape_arithmetic_is_computed_again_in_the_tail(tmp_path, batch):
    """A shape the tail needs is not handed over (a DLC's QNN graph folds such values away): a Shape of a tensor
    whose dims shape inference proves becomes a Constant in the tail; with a dynamic batch, the tail reads the shape
    of the tensor it is handed."""
    extra = [h.make_node("Shape", ["s"], ["grid"], name="grid_shape"),
             h.make_node("Shape", ["picked"], ["count"], name="count"),
             h.make_node("Concat", ["grid", "count"], ["sizes"], name="sizes", axis=0)]
    model = detector(*extra, outputs=("uniq", "sizes"))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = str(batch) if batch == "N" else ""
    if batch == 1:
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    made, whole, split = split_and_run(model, {"nonzero": "no op"}, {"x": sample()}, tmp_path)
    np.testing.assert_array_equal(split["sizes"], whole["sizes"])
    assert "grid" not in made.tensors
    ops = {n.name: n.op_type for n in made.tail.graph.node}
    assert ops["grid_shape"] == ("Constant" if batch == 1 else "Shape")
    assert ("s" in made.tensors) == (batch == "N")


def test_a_refused_nms_and_what_reads_its_selection_go_to_the_tail(tmp_path):
    """Boxes and scores from the conv features, NonMaxSuppression, the kept boxes gathered: the tail starts at NMS."""
    i64 = lambda name, *v: nh.from_array(np.array(v, np.int64), name)  # noqa: E731
    extra = [h.make_node("Reshape", ["feat", "box_shape"], ["raw"], name="raw"),
             h.make_node("Abs", ["raw"], ["pos"], name="abs"),
             h.make_node("Add", ["pos", "one"], ["boxes"], name="boxes"),
             h.make_node("ReduceMax", ["raw"], ["best"], name="best", axes=[2], keepdims=0),
             h.make_node("Unsqueeze", ["best", "ax0"], ["scores"], name="scores"),
             h.make_node("NonMaxSuppression", ["boxes", "scores", "keep", "iou"], ["selected"], name="nms",
                         center_point_box=1),
             h.make_node("Gather", ["selected", "col"], ["which"], name="which", axis=1),
             h.make_node("Squeeze", ["boxes", "ax0"], ["all_boxes"], name="all_boxes"),
             h.make_node("Gather", ["all_boxes", "which"], ["kept"], name="kept", axis=0)]
    inits = [i64("box_shape", 1, 16, 4), nh.from_array(np.array(1.0, np.float32), "one"), i64("keep", 5),
             nh.from_array(np.array([0.3], np.float32), "iou"), nh.from_array(np.array(2, np.int64), "col")]
    model = detector(*extra, extra_inits=inits, outputs=("kept", "uniq"))
    made, whole, split = split_and_run(model, {"nms": "no NMS"}, {"x": sample()}, tmp_path)
    assert made.first["node"] == "nms" and {"boxes", "scores"} <= set(made.tensors)
    assert 0 < len(whole["kept"]) <= 5
    for name in ("kept", "uniq"):
        np.testing.assert_array_equal(split[name], whole[name])


def test_a_refused_if_takes_what_its_branches_read_from_the_head(tmp_path):
    """An If whose branches read a tensor of the enclosing graph: that tensor is handed to the tail."""
    def branch(op: str, name: str) -> onnx.GraphProto:
        return h.make_graph([h.make_node(op, ["feat"], [f"{name}_out"], keepdims=0)], name, [],
                            [h.make_tensor_value_info(f"{name}_out", T.FLOAT, [])])

    extra = [h.make_node("ReduceSum", ["feat"], ["total"], name="total", keepdims=0),
             h.make_node("Greater", ["total", "thr"], ["big"], name="big"),
             h.make_node("If", ["big"], ["pick"], name="if", then_branch=branch("ReduceMax", "then"),
                         else_branch=branch("ReduceMin", "else"))]
    model = detector(*extra, outputs=("pick", "uniq"))
    made, whole, split = split_and_run(model, {"if": "If is not lowered"}, {"x": sample()}, tmp_path)
    assert made.first["node"] == "if" and [n.op_type for n in made.tail.graph.node] == ["If"]
    assert "feat" in made.tensors and "big" in made.tensors
    np.testing.assert_array_equal(split["pick"], whole["pick"])


def test_a_cut_before_everything_is_refused(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(detector(), path)
    with pytest.raises(UnsupportedError, match=r"takes nothing from the model's inputs before node 'conv' \(Conv\)"):
        cut(detector(), {"conv": "no conv"}, inferred_types(path))


def test_the_nodes_a_backends_blockers_name():
    model = detector()
    blockers = [  # how Core ML, the DLC and OpenVINO name nodes
        "node 'unique' (Unique): no Core ML lowering",
        "node 'nonzero' (NonZero) has no QNN op: the QNN execution provider cannot take it; node 'gather' (Gather) "
        "has no QNN op: the QNN execution provider cannot take it (replace those ops, or cut the graph before them)",
        "op Foo cannot be converted: nodes 'squeeze', 'gt' (+3 more)",
        "output 'uniq' has rank 6; Core ML allows rank <= 5",  # a tensor: the node that writes it
        "input 'x' has dynamic dims ['N', 3, 8, 8]: a DLC needs static shapes",  # no node: no cut removes it
    ]
    found, unnamed = refused_nodes(blockers, model)
    assert list(found) == ["unique", "nonzero", "gather", "squeeze", "gt"]
    assert found["gather"].startswith("node 'gather' (Gather) has no QNN op") and "nonzero" not in found["gather"]
    assert unnamed == [blockers[-1]]


def test_the_pipeline_feeds_the_tail_in_its_dtypes():
    """The head's outputs by name, cast to the dtypes the tail declares (a note says so); the model's outputs from
    whichever side computes them, in the model's order."""
    seen = {}

    def head(feeds):
        return [feeds["x"] * 2, (feeds["x"] > 0).astype(np.int32)]  # a bool handed back as int32 (Core ML)

    def tail(feeds):
        seen.update(feeds)
        return [feeds["feat"][feeds["mask"]]]

    pipeline = Pipeline(head, tail, ["feat", "mask"], {"mask": "bool", "feat": "float32"}, ["picked"],
                        ["picked", "feat"], "coreml+onnxruntime")
    x = np.array([-1.0, 2.0, 3.0], np.float32)
    picked, feat = pipeline({"x": x})
    np.testing.assert_array_equal(picked, [4.0, 6.0])
    np.testing.assert_array_equal(feat, x * 2)
    assert seen["mask"].dtype == np.bool_
    pipeline({"x": x})
    assert pipeline.casts == ["the head hands 'mask' over as int32: fed to the tail as bool"]
    assert pipeline.hop_name == "coreml+onnxruntime" and pipeline.output_names == ["picked", "feat"]


def test_the_artifact_runs_once_per_sample_for_both_hops():
    """The backend's hop and the pipeline's share the artifact's outputs on a sample (a slow simulator runs once);
    another sample, or a latency figure (``fresh``), runs it again."""
    from onnxbridge.split import Reused

    calls = []

    def head(feeds):
        calls.append(feeds)
        return [feeds["x"] + len(calls)]

    head.what_ran = "the head"
    reused = Reused(head)
    a, b = {"x": np.zeros(2)}, {"x": np.zeros(2)}
    first = reused(a)
    assert reused(a) is first and len(calls) == 1 and reused.last_seconds is None
    assert reused(b)[0][0] == 2 and reused.fresh(a)[0][0] == 3 and len(calls) == 3
    assert reused.what_ran == "the head"


def test_split_tail_is_a_bool_and_needs_a_backend(tmp_path):
    from onnxbridge.errors import BadInputError

    onnx.save(detector(), tmp_path / "det.onnx")
    with pytest.raises(BadInputError, match=r"argument split_tail='yes' \(str\) must be True or False"):
        onnxbridge.convert(str(tmp_path / "det.onnx"), output=tmp_path / "m.dlc", split_tail="yes")
    with pytest.raises(BadInputError, match="--to onnx writes the whole model for onnxruntime"):
        onnxbridge.convert(str(tmp_path / "det.onnx"), output=tmp_path / "m.onnx", split_tail=True)


def test_the_tail_is_named_after_the_artifact(tmp_path):
    assert tail_path(tmp_path / "det.dlc") == tmp_path / "det.dlc.tail.onnx"
    assert tail_path(tmp_path / "det.mlpackage") == tmp_path / "det.mlpackage.tail.onnx"


# --- conversions --------------------------------------------------------------------------------------------------


def convert(tmp_path, suffix: str, **kw):
    """``detector()`` converted with --split-tail to ``m.SUFFIX``, on integer inputs (exact in fp16); also the
    first node the backend's own check refuses (None: it refuses none)."""
    source = tmp_path / "det.onnx"
    onnx.save(detector(), source)
    np.savez(tmp_path / "x.npz", x=sample())
    out = tmp_path / f"m{suffix}"
    result = onnxbridge.convert(str(source), output=str(out), inputs=str(tmp_path / "x.npz"), split_tail=True,
                                report=str(tmp_path / "r.json"), **kw)
    to = for_file(out)
    blockers = onnxbridge.check_targets(str(source), [to])["targets"][to]["blockers"]
    found, _ = refused_nodes(blockers, detector())
    order = [n.name for n in detector().graph.node]
    return result.report, out, min(found, key=order.index) if found else None


def assert_split(rep: dict, out, first: str | None, backend: str, hop: str) -> None:
    """The report's cut is where the backend's check says, the tail is written beside the artifact, and the
    pipeline (the artifact's runner, then onnxruntime on the tail) passed against the source."""
    assert rep["status"] == "passed", rep["hops"]
    if first is None:  # the backend takes the whole model
        assert rep["split"]["tail"] is None and not tail_path(out).exists()
        return
    split = rep["split"]
    assert split["at"]["node"] == first and split["backend"] == backend
    assert split["tail"] == str(tail_path(out)) and tail_path(out).is_file()
    assert [(x["kind"], x["from"], x["to"]) for x in rep["hops"]] == [
        ("source", "onnx", "onnx"), ("backend", "onnx:head", hop), ("pipeline", "onnx", f"{hop}+onnxruntime")]
    pipeline = rep["hops"][2]
    assert [o["name"] for o in pipeline["outputs"]] == ["feat", "picked", "uniq"]
    assert pipeline["outputs"][2]["shape"] == list(run(detector(), {"x": sample()})["uniq"].shape)
    assert "(head), then onnxruntime" in pipeline["runtimes"][f"{hop}+onnxruntime"]
    tail = onnx.load(tail_path(out))
    assert first in {n.name for n in tail.graph.node}


@requires("onnxruntime_qnn")
def test_split_for_the_dlc(tmp_path):
    rep, out, first = convert(tmp_path, ".dlc")
    assert first == "nonzero"
    assert_split(rep, out, first, "dlc", "qnn-htp-simulator")
    assert rep["hops"][2]["tolerance"]["rule"] == "fp16-emulation"  # judged by what the HTP computes
    assert json.loads((tmp_path / "r.json").read_text())["split"]["tail_ops"]["NonZero"] == 1


@pytest.mark.slow
@requires("coremltools")
def test_split_for_core_ml(tmp_path):
    rep, out, first = convert(tmp_path, ".mlpackage")
    assert first is not None  # Unique has no Core ML op
    assert_split(rep, out, first, "coreml", "coreml")


@pytest.mark.slow
@requires("openvino")
def test_no_tail_where_the_backend_takes_it_all(tmp_path):
    """OpenVINO takes NonZero and Unique: the whole model goes to it, and a tail an earlier run left is removed
    (a path never holds a model the report does not describe)."""
    tail_path(tmp_path / "m.xml").write_bytes(b"stale")
    rep, out, first = convert(tmp_path, ".xml")
    assert first is None
    assert_split(rep, out, first, "openvino", "openvino")
    assert rep["split"]["runs"] == "openvino takes the whole model: nothing to split, no tail written"
    assert [x["kind"] for x in rep["hops"]] == ["source", "backend"]


@pytest.mark.slow
@requires("onnxruntime_qnn")
def test_a_wrong_tail_fails_the_pipeline(tmp_path, native_in_process, monkeypatch):
    """The pipeline hop is a verdict on the tail too: a tail that computes something else (Unique unsorted) fails
    it, while the backend's hop on the head passes."""
    import onnxbridge.split as split

    real = split.cut

    def unsorted(*args, **kw):
        made = real(*args, **kw)
        for node in made.tail.graph.node:
            for attr in node.attribute:
                if node.op_type == "Unique" and attr.name == "sorted":
                    attr.i = 0
        return made

    monkeypatch.setattr(split, "cut", unsorted)
    rep, out, first = convert(tmp_path, ".dlc")
    assert [x["status"] for x in rep["hops"]] == ["passed", "passed", "failed"]
    assert rep["status"] == "failed" and rep["introduced_by"] == "onnx -> qnn-htp-simulator+onnxruntime"
    assert [o["name"] for o in rep["hops"][2]["outputs"] if not o["passed"]] == ["uniq"]


@requires("onnxruntime_qnn")
def test_a_blocker_no_cut_removes_is_refused(tmp_path, native_in_process, monkeypatch):
    """A blocker that names no node (here an input's dims) cannot be cut away: one line, exit 2, before any build."""
    import onnxbridge.backends.dlc as dlc

    monkeypatch.setattr(dlc, "check", lambda path, context=None: [
        "input 'x' has dynamic dims ['N', 3, 8, 8]: a DLC needs static shapes"])
    with pytest.raises(UnsupportedError, match=r"--split-tail: dlc refuses what no cut before a node removes: "
                                               r"input 'x' has dynamic dims") as caught:
        convert(tmp_path, ".dlc")
    assert caught.value.exit_code == 2 and not (tmp_path / "m.dlc").exists()
