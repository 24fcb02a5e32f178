"""Backend hops localized: each backend's probe (the candidate side, keyed by the ONNX model's tensor names)
against onnxruntime on the ONNX model it was built from, on models with one planted fault."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.errors import HopSkipped
from onnxbridge.localize.probe import Checkpoint
from onnxbridge.specs import Sample
from onnxbridge.validation import Tolerance

from tests.helpers.extras import require

WIDTH = 64
BAD = 5  # the block with the planted fault


def chain(blocks: int = 12, overflow: int | None = None, weights: dict | None = None) -> onnx.ModelProto:
    """Blocks ``MatMul(x, W * s) -> Mul(1 / s) -> Add(b) -> Tanh``. Block ``overflow`` has s = 3e4: its MatMul leaves
    fp16's range (its weights stay inside it); elsewhere s = 1. ``weights``: block -> factor on its W."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for i in range(blocks):
        s = 3e4 if i == overflow else 1.0
        w = rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH) * 2 * s * (weights or {}).get(i, 1.0)
        inits += [numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(np.array(1 / s, np.float32), f"s{i}"),
                  numpy_helper.from_array(np.full(WIDTH, 0.1, np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"], name=f"block{i}/matmul"),
                  helper.make_node("Mul", [f"mm{i}", f"s{i}"], [f"sc{i}"], name=f"block{i}/scale"),
                  helper.make_node("Add", [f"sc{i}", f"b{i}"], [f"add{i}"], name=f"block{i}/add"),
                  helper.make_node("Tanh", [f"add{i}"], [f"h{i}"], name=f"block{i}/tanh")]
        x = f"h{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, WIDTH])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, WIDTH])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def samples(n: int = 2) -> list[Sample]:
    rng = np.random.default_rng(1)
    return [Sample({"x": rng.standard_normal((2, WIDTH)).astype(np.float32)}) for _ in range(n)]


def saved(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def localized(sides, onnx_path: Path, precision: str, atol: float | None = None) -> dict:
    from onnxbridge.localize.bisect import localize
    from onnxbridge.localize.onnx_probe import OnnxProbe

    return localize(OnnxProbe(onnx_path), sides.probe, sides.checkpoints, samples(),
                    Tolerance.for_precision(precision, atol=atol), method=sides.method)


def test_the_planted_overflow_only_leaves_fp16_range_in_its_block():
    """The fixture's premise: fp32 values beyond 65504 in block BAD's MatMul and nowhere else."""
    import onnxruntime as ort

    model = chain(overflow=BAD)
    names = [n.output[0] for n in model.graph.node]
    model.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names[:-1])
    values = ort.InferenceSession(model.SerializeToString()).run(None, samples(1)[0].feeds)
    big = {n for n, v in zip([model.graph.output[0].name, *names[:-1]], values) if np.abs(v).max() > 65504}
    assert big == {f"mm{BAD}"}


def test_visible_keeps_shown_tensors_and_bridges_fused_inputs():
    from onnxbridge.backends.probing import visible

    cps = [Checkpoint("mm", "n/mm", "MatMul", ("x",)), Checkpoint("add", "n/add", "Add", ("mm",)),
           Checkpoint("h", "n/tanh", "Tanh", ("add",)), Checkpoint("out", "n/mul", "Mul", ("h", "mm"))]
    kept = visible(cps, {"add": "linear (mil var add)", "out": None})
    assert [(c.tensor, c.inputs, c.source) for c in kept] == [
        ("add", ("x",), "linear (mil var add)"), ("out", ("add", "x"), None)]


def test_coreml_fp16_overflow_names_the_onnx_node_of_its_block(tmp_path):
    """ONNX -> Core ML fp16: the block whose MatMul leaves fp16's range is named, with its MIL op as source."""
    require("coremltools")
    from onnxbridge.backends.coreml import build, probe
    from onnxbridge.localize.onnx_probe import onnx_checkpoints

    onnx_path = saved(chain(overflow=BAD), tmp_path / "chain.onnx")
    package = tmp_path / "chain.mlpackage"
    build(onnx_path, package, precision="fp16")
    sides = probe(package, onnx_path, onnx_checkpoints(onnx_path))
    assert "mil var" in sides.checkpoints[0].source and "checkpoints shown" in sides.method
    block = localized(sides, onnx_path, "fp16")
    found = block["first_divergent"]
    assert found is not None, block["trace"]
    assert (found["node"], found["inputs_ok"]) == (f"block{BAD}/matmul", True)
    assert found["source"] == f"matmul (mil var mm{BAD}_cast_fp16)"
    assert block["runs"] <= 6 and sides.probe.runs == block["runs"] * 2  # one candidate run per sample and step


def test_coreml_probe_evaluates_only_a_prefix_and_keeps_only_asked_vars(tmp_path):
    require("coremltools")
    from onnxbridge.backends.coreml import build
    from onnxbridge.backends.coreml.probe import MilTensors
    from onnxbridge.backends.coreml.runners import Runner

    onnx_path = saved(chain(blocks=4), tmp_path / "chain.onnx")
    build(onnx_path, tmp_path / "c.mlpackage", precision="fp32")
    tensors = MilTensors(str(tmp_path / "c.mlpackage"))
    assert set(tensors.shows(["add0", "h1", "mm0", "h3"])) == {"add0", "h1", "h3"}  # mm0: fused into linear
    feeds = samples(1)[0].feeds
    out = tensors.tensors(["h1"], feeds)
    assert list(out) == ["h1"] and out["h1"].shape == (2, WIDTH)
    last = tensors.tensors(["h3"], feeds)["h3"]
    np.testing.assert_array_equal(last, Runner(tmp_path / "c.mlpackage")(feeds)[0])
    with pytest.raises(KeyError, match="mm0"):
        tensors.tensors(["mm0"], feeds)


@pytest.mark.slow
def test_openvino_ir_with_one_changed_weight_names_that_matmul(tmp_path):
    """An IR built from the model with block 7's weight x1.05, localized against the unchanged ONNX model."""
    require("openvino")
    from onnxbridge.backends.openvino import probe
    from onnxbridge.backends.openvino.convert import build
    from onnxbridge.localize.onnx_probe import onnx_checkpoints

    onnx_path = saved(chain(), tmp_path / "chain.onnx")
    build(saved(chain(weights={7: 1.05}), tmp_path / "changed.onnx"), tmp_path / "changed.xml")
    sides = probe(tmp_path / "changed.xml", onnx_path, onnx_checkpoints(onnx_path))
    assert len(sides.checkpoints) == 48  # OpenVINO keeps every ONNX tensor name here
    found = localized(sides, onnx_path, "fp32")["first_divergent"]
    assert (found["node"], found["inputs_ok"]) == ("block7/matmul", True)
    assert found["source"] == "MatMul (OpenVINO node block7/matmul)"


def test_dlc_fp16_overflow_on_the_htp_simulator_names_its_block(tmp_path):
    """ONNX -> DLC: prefix models of the prepared ONNX on the x86 HTP simulator. Its fp16 compute drifts along the
    chain beyond the fixed fp16 tolerance (0.08 at block 4 here); judged as the hop is (against the fp16 emulation,
    which drifts alike) or past the drift to where the error jumps, the planted overflow (inf on the simulator) is
    the first divergence, not the drift."""
    require("onnxruntime_qnn")
    from onnxbridge.backends.dlc import build, probe
    from onnxbridge.localize.onnx_probe import onnx_checkpoints

    onnx_path = saved(chain(overflow=BAD), tmp_path / "chain.onnx")
    try:
        build(onnx_path, tmp_path / "chain.dlc", precision="fp16")
        sides = probe(tmp_path / "chain.dlc", onnx_path, onnx_checkpoints(onnx_path))
    except HopSkipped as exc:
        pytest.skip(f"the HTP simulator path does not run here: {exc.one_line()}")
    assert f"mm{BAD}" in {c.tensor for c in sides.checkpoints} and "mm0" not in {c.tensor for c in sides.checkpoints}
    from onnxbridge.backends.dlc.qnn import EMULATION_FACTOR
    from onnxbridge.localize.bisect import localize
    from onnxbridge.localize.onnx_probe import OnnxProbe, emulation_probe

    htp = Tolerance(0.01, 0.01, "fp16", rule="fp16-emulation", factor=EMULATION_FACTOR)
    reference = OnnxProbe(onnx_path)
    judged = localize(reference, sides.probe, sides.checkpoints, samples(), htp, method=sides.method,
                      emulation=emulation_probe(reference, htp))
    for found in (judged["first_divergent"], localized(sides, onnx_path, "fp16")["first_divergent"]):
        assert (found["node"], found["inputs_ok"]) == (f"block{BAD}/matmul", True)
        assert found["source"] == f"MatMul (prepared node block{BAD}/matmul)"
        assert found["error"]["nonfinite_output"] > 0


def padded(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its output reshaped to [1, 2, 8, 8], padded at the end of the last axis with ones
    (``F.pad(v, (0, 1), value=1)``, as EfficientViT's attention does) and read by a MatMul: the output is ``y``."""
    out = model.graph.output[0].name
    rng = np.random.default_rng(2)
    model.graph.initializer.extend([
        numpy_helper.from_array(np.array([1, 2, 8, WIDTH // 8], np.int64), "grid"),
        numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 0, 1], np.int64), "pads"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array((rng.standard_normal((WIDTH // 8 + 1, 8)) / 3).astype(np.float32), "w_head")])
    model.graph.node.extend([helper.make_node("Reshape", [out, "grid"], ["grid_view"], name="view"),
                             helper.make_node("Pad", ["grid_view", "pads", "one"], ["padded"], name="pad"),
                             helper.make_node("MatMul", ["padded", "w_head"], ["y"], name="head")])
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8]))
    return model


def test_dlc_fp16_drift_then_a_pad_the_simulator_gets_wrong_names_the_pad(tmp_path, monkeypatch):
    """Issue 32 (EfficientViT-B0): the HTP simulator's fp16 drift crosses the fixed fp16 tolerance blocks before a
    Pad at the end of the last axis, which the simulator gets wrong when the QNN rule rewriting it is left out. The
    tensors judged as the hop is (64x the fp16 emulation's error at each), the Pad is named."""
    require("onnxruntime_qnn")
    from onnxbridge.backends.dlc import build, probe
    from onnxbridge.backends.dlc.legalize import rules
    from onnxbridge.backends.dlc.qnn import EMULATION_FACTOR
    from onnxbridge.localize.onnx_probe import OnnxProbe, emulation_probe, onnx_checkpoints
    from onnxbridge.worker import IN_PROCESS_ENV

    monkeypatch.setattr(rules, "QNN_RULES", tuple(r for r in rules.QNN_RULES
                                                  if r.name != "last-axis-end-pad-to-concat"))
    monkeypatch.setenv(IN_PROCESS_ENV, "1")  # the probe prepares the model here, without the rule
    onnx_path = saved(padded(chain(blocks=6)), tmp_path / "padded.onnx")
    try:
        build(onnx_path, tmp_path / "padded.dlc", precision="fp16")
        sides = probe(tmp_path / "padded.dlc", onnx_path, onnx_checkpoints(onnx_path))
    except HopSkipped as exc:
        pytest.skip(f"the HTP simulator path does not run here: {exc.one_line()}")
    from onnxbridge.localize.bisect import localize

    reference = OnnxProbe(onnx_path)
    fixed = localize(reference, sides.probe, sides.checkpoints, samples(), Tolerance.for_precision("fp16"),
                     method=sides.method)
    drifted = [t["output"] for t in fixed["trace"] if not t["passed"] and t["output"].startswith(("mm", "h", "a"))]
    assert drifted, fixed["trace"]  # the premise: the fixed tolerance trips on the drift before the Pad
    htp = Tolerance(0.01, 0.01, "fp16", rule="fp16-emulation", factor=EMULATION_FACTOR)
    out = localize(reference, sides.probe, sides.checkpoints, samples(), htp, method=sides.method,
                   emulation=emulation_probe(reference, htp))
    found = out["first_divergent"]
    assert (found["node"], found["op"], found["inputs_ok"]) == ("pad", "Pad", True), out["trace"]
    assert all(t["passed"] for t in out["trace"] if t["index"] < found_index(out))


def found_index(block: dict) -> int:
    return next(t["index"] for t in block["trace"] if t["output"] == block["first_divergent"]["output"])


def test_tensorrt_probe_is_skipped_without_a_cuda_device(tmp_path):
    from onnxbridge.backends.tensorrt import probe
    from onnxbridge.backends.tensorrt.probe import _has_cuda_device

    if _has_cuda_device():
        pytest.skip("a CUDA device is present: the skip does not apply")
    onnx_path = saved(chain(blocks=2), tmp_path / "chain.onnx")
    with pytest.raises(HopSkipped, match="no CUDA device"):
        probe(tmp_path / "chain.engine", onnx_path, [])


@pytest.mark.slow
def test_a_probe_in_this_process_gives_what_the_worker_gives(tmp_path, monkeypatch):
    """``ONNXBRIDGE_IN_PROCESS=1`` opens the probe here (``LocalProbe``), with the same tensors and run count."""
    require("openvino")
    from onnxbridge.backends.openvino import probe
    from onnxbridge.backends.openvino.convert import build
    from onnxbridge.worker import IN_PROCESS_ENV, LocalProbe, RemoteProbe

    onnx_path = saved(chain(blocks=3), tmp_path / "chain.onnx")
    build(onnx_path, tmp_path / "chain.xml")
    cps = [Checkpoint("mm1", "block1/matmul", "MatMul"), Checkpoint("h2", "block2/tanh", "Tanh")]
    feeds = samples(1)[0].feeds
    remote = probe(tmp_path / "chain.xml", onnx_path, cps).probe
    monkeypatch.setenv(IN_PROCESS_ENV, "1")
    local = probe(tmp_path / "chain.xml", onnx_path, cps).probe
    assert isinstance(remote, RemoteProbe) and isinstance(local, LocalProbe) and remote.what == local.what
    a, b = remote.tensors(["mm1", "h2"], feeds), local.tensors(["mm1", "h2"], feeds)
    assert list(a) == list(b) == ["mm1", "h2"] and remote.runs == local.runs == 1
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_tensorrt_cut_marks_only_the_asked_tensors(tmp_path):
    """What a TensorRT cut changes in the parsed network (building and running it needs a GPU): the asked tensors
    become its only outputs, each layer output is named by its ONNX tensor, and an unknown one is refused."""
    from onnxbridge.backends.tensorrt import engine, flavours
    from onnxbridge.backends.tensorrt.probe import layer_outputs, mark_only
    from onnxbridge.errors import UnavailableError

    try:
        flavour = flavours.load(None)
    except UnavailableError as exc:
        pytest.skip(exc.one_line())
    onnx_path = saved(chain(blocks=3), tmp_path / "chain.onnx")
    _, network, parser, _ = engine.parse(flavour, onnx_path, engine.network_flags(flavour, "fp32"))
    assert layer_outputs(network)["mm1"][1] == "MATRIX_MULTIPLY (TensorRT layer block1/matmul)"
    mark_only(network, ["h0", "mm1"])
    assert [network.get_output(i).name for i in range(network.num_outputs)] == ["h0", "mm1"]
    with pytest.raises(KeyError, match="w0"):
        mark_only(network, ["w0"])
    del parser
