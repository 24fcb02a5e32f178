"""DLC backend: torch models -> ONNX -> .dlc through onnxruntime-qnn's QnnIr serializer, read back with our own
container reader, and checked on the x86 HTP simulator (hop ``qnn-htp-simulator``) with the .dlc proven by
structure to be the graph simulated; a foreign, altered or handcrafted .dlc fails, never passes; int8 QDQ from
calibration data; the errors; the QAIRT SDK path's command lines with a fake ``qairt-converter`` (its hop skipped);
``check --targets dlc`` and ``inspect``."""
from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.backends.dlc import container, structure
from onnxbridge.errors import ArtifactMismatch, BadInputError, UnsupportedError
from tests.conftest import EXAMPLES, assert_one_line_error, check_report
from tests.helpers.extras import require

require("onnxruntime_qnn")
FACTORY = f"{EXAMPLES}:cnn"
HOP = "qnn-htp-simulator"  # the dlc hop is named for what ran: the prepared ONNX on the HTP simulator


def _onnx(path: Path, nodes, x_shape, inits=(), out_shape=None) -> Path:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _conv_relu(path: Path, batch="N") -> Path:
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    return _onnx(path, [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                        helper.make_node("Relu", ["c"], ["y"], name="relu")], [batch, 3, 8, 8], [("w", w)])


@pytest.fixture(scope="module")
def cnn_dlc(models, tmp_path_factory):
    """The example CNN as ONNX and its fp32 DLC (built once; the SDK tests copy it)."""
    folder = tmp_path_factory.mktemp("cnn")
    model, sample = models.cnn()
    onnx_path = folder / "cnn.onnx"
    onnxbridge.convert(model, sample, output=onnx_path, opset=17, validate=False)
    rep = onnxbridge.convert(onnx_path, to="dlc", output=folder / "cnn.dlc", validate=False).report
    return onnx_path, folder / "cnn.dlc", rep


def _reader_checks(path: Path, onnx_model: onnx.ModelProto | None = None) -> dict:
    """Our reader's verdict on a DLC, and its I/O against the ONNX model's."""
    dlc = container.read(path)
    assert container.problems(dlc) == []
    assert dlc.identifiers == {"model": "NETD", "model.params": "NETP"} and dlc.version[0] == 4
    assert {"model", "model.params", "model.params.bin"} <= set(dlc.entries)
    assert dlc.converter["tool"] and dlc.converter["converterVersion"].startswith("2.")
    info = container.summary(dlc)
    if onnx_model is not None:
        inits = {t.name for t in onnx_model.graph.initializer}
        want_in = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in onnx_model.graph.input
                   if i.name not in inits]
        assert [(i["name"], i["shape"]) for i in info["inputs"]] == want_in
        assert [o["name"] for o in info["outputs"]] == [o.name for o in onnx_model.graph.output]
    return info


@pytest.mark.parametrize("name,precision", [("cnn", "fp32"), ("transformer", "fp32"), ("cnn", "fp16"),
                                            ("transformer", "fp16")])
@pytest.mark.fast_cases("cnn-fp32")
def test_torch_models_to_dlc_pass_on_the_htp_simulator(models, tmp_path, name, precision):
    model, sample = getattr(models, name)()
    out = tmp_path / f"{name}.dlc"
    rep = onnxbridge.convert(model, sample, to="dlc", output=out, opset=17, precision=precision,
                             report=tmp_path / "r.json").report
    check_report(tmp_path / "r.json")
    assert [(h["from"], h["to"], h["status"]) for h in rep["hops"]] == [("torch", "onnx", "passed"),
                                                                      ("onnx", HOP, "passed")], rep["hops"][-1]
    hop = rep["hops"][-1]
    assert hop["artifact_checked"] == "structure" and "x86 HTP simulator" in hop["runtimes"][HOP]
    assert "checked by structure" in hop["runtimes"][HOP]
    assert hop["samples"] >= 1 and max(o["max_abs"] for o in hop["outputs"]) > 0  # fp16 compute is not exact
    # judged as fp16, also for an fp32 DLC (the HTP computes in fp16): against the fp16 emulation of the ONNX model
    assert (hop["tolerance"]["precision"], hop["tolerance"]["rule"]) == ("fp16", "fp16-emulation"), hop["tolerance"]
    assert "computes in fp16" in hop["tolerance"]["reason"] and "fp16 emulation" in hop["runtimes"]
    assert rep["hops"][0]["tolerance"]["rule"] == "fp32"  # the export itself is an fp32 hop
    facts = rep["artifact"]["backend"]
    assert facts["flavour"] == "qnn-ir" and facts["partitions"] == 1 and facts["prepared_opset"] == 17
    # the convert path proves the written file is the graph simulated, and says so
    assert facts["artifact_checked"] == "structure" and "htp_check" in facts
    check = facts["structure_check"]
    placed = container.read(out)
    assert check == structure.facts(placed) and check["nodes"] == sum(len(g.nodes) for g in placed.graphs)
    assert check["static_tensors"] > 0 and check["weight_bytes"] == placed.weights_bytes > 0
    assert hop["artifact_check"]["graph_sha256"] == check["graph_sha256"]
    assert hop["artifact_check"]["files"][0] == str(out)
    assert facts["converter_version"].startswith("2.") and facts["precision"] == precision
    assert facts["input_shapes"] == {"x": list(sample[0].shape)}
    assert ("float16" in facts["dtypes"]) == (precision == "fp16")
    ref = model(*sample).detach().numpy()
    info = _reader_checks(out)
    assert [(i["name"], i["shape"], i["dtype"]) for i in info["inputs"]] == [("x", list(sample[0].shape), "float32")]
    assert [(o["name"], o["shape"], o["dtype"]) for o in info["outputs"]] == [("output", list(ref.shape), "float32")]
    assert info["ops"] == facts["ops"] and rep["artifact"]["bytes"] == out.stat().st_size
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_int8_qdq_dlc_has_quantized_tensors(models, tmp_path, cli):
    model, sample = models.transformer()
    cal = tmp_path / "cal.npz"
    np.savez(cal, x=np.random.default_rng(1).standard_normal((8, *sample[0].shape)).astype(np.float32))
    out = tmp_path / "t8.dlc"
    rep = onnxbridge.convert(model, sample, to="dlc", output=out, opset=17, precision="int8", calibration=cal,
                             report=tmp_path / "r.json").report
    check_report(tmp_path / "r.json")
    hop = rep["hops"][-1]
    assert (hop["to"], hop["status"], hop["tolerance"]["precision"]) == (HOP, "passed", "int8"), hop
    assert rep["artifact"]["backend"]["structure_check"]["graph_sha256"] == hop["artifact_check"]["graph_sha256"]
    assert any("8 batch(es)" in n for n in rep["notes"])
    info = _reader_checks(out)
    assert info["quantized_tensors"] > 10 and info["dtypes"].get("ufixed8", 0) > 10
    assert {i["storage"] for i in info["inputs"] + info["outputs"]} == {"uint8"}
    assert all(0 < i["scale"] < 1 and i["bitwidth"] == 8 for i in info["inputs"])
    assert {"FullyConnected", "LayerNorm", "Softmax"} <= set(info["ops"])
    # a saved quantized DLC cannot be checked again without its calibration data: skipped, never passed
    res = cli("validate", FACTORY, out, "--report", tmp_path / "v.json")
    hop = check_report(tmp_path / "v.json")["hops"][-1]
    assert res.exit_code == 5 and hop["status"] == "skipped" and "calibration" in hop["skipped_reason"]
    assert "validation incomplete: torch -> qnn-htp-simulator skipped" in res.stderr


def test_calibration_is_checked(tmp_path):
    src = _conv_relu(tmp_path / "m.onnx", batch=1)
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 3, 5, 5), np.float32))
    np.savez(tmp_path / "ok.npz", x=np.zeros((4, 3, 8, 8), np.float32))
    with pytest.raises(onnxbridge.errors.BadInputError, match=r"--calibration 'x' has size 5 at axis 2; the model fixes 8"):
        onnxbridge.convert(src, to="dlc", output=tmp_path / "a.dlc", precision="int8", calibration=tmp_path / "bad.npz")
    with pytest.raises(onnxbridge.errors.BadInputError, match="needs calibration data"):
        onnxbridge.convert(src, to="dlc", output=tmp_path / "b.dlc", precision="int8")
    with pytest.raises(onnxbridge.errors.BadInputError, match="int8 only"):
        onnxbridge.convert(src, to="dlc", output=tmp_path / "c.dlc", calibration=tmp_path / "ok.npz")
    assert not list(tmp_path.glob("*.dlc"))


def test_dynamic_input_takes_input_shape(cli, tmp_path):
    src = _conv_relu(tmp_path / "dyn.onnx")
    # check has no sample: it names the flag; convert takes the sample's shape (test_dynamic_inputs_take_...)
    checked = cli("check", src, "--targets", "dlc")
    assert checked.exit_code == 2 and "input 'x' has dynamic dims ['N', 3, 8, 8]" in checked.stdout
    assert "--input-shape x:N,3,8,8" in checked.stdout
    out = tmp_path / "b.dlc"
    res = cli("convert", src, "--to", "dlc", "-o", out, "--input-shape", "x:2,3,8,8", "--report", tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert res.exit_code == 0, (res.output, rep["hops"][-1])
    assert rep["artifact"]["backend"]["input_shapes_fixed"] == {"x": [2, 3, 8, 8]}
    # the DLC is static: the sample the spine grows along N is left out of the dlc hop, with a note
    hop = rep["hops"][-1]
    assert hop["status"] == "passed" and hop["samples"] == 1
    assert any("other input shapes left out" in n for n in hop["notes"]), hop["notes"]
    assert [i["shape"] for i in container.summary(container.read(out))["inputs"]] == [[2, 3, 8, 8]]


def test_unsupported_op_is_refused_before_trying(cli, tmp_path):
    src = _onnx(tmp_path / "hm.onnx", [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                                      helper.make_node("Erf", ["r"], ["y"], name="erf")], [2, 5])
    assert_one_line_error(cli("convert", src, "--to", "dlc", "-o", tmp_path / "a.dlc"), 2,
                          "node 'erf' (Erf)", "QNN execution provider cannot take it")
    assert not list(tmp_path.glob("*.dlc"))


def test_a_split_graph_names_the_nodes_that_fell_out(tmp_path, monkeypatch, native_in_process):
    """An op our table lets through but the QNN EP does not take (a lone Erf, pretended supported) splits the graph
    into two partitions: the error names the node between them."""
    from onnxbridge.backends.dlc import prepare

    monkeypatch.setattr(prepare, "QNN_OPS", prepare.QNN_OPS | {"Erf"})
    src = _onnx(tmp_path / "split.onnx", [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                                         helper.make_node("Erf", ["r"], ["h"], name="erf"),
                                         helper.make_node("Sigmoid", ["h"], ["y"], name="sig")], [2, 5])
    with pytest.raises(onnxbridge.errors.UnsupportedError, match=r"fell out to the CPU: 'erf' \(Erf\)$"):
        onnxbridge.convert(src, to="dlc", output=tmp_path / "s.dlc")
    assert not (tmp_path / "s.dlc").exists()


@pytest.mark.slow
def test_opset_above_what_qairt_takes_is_adapted(tmp_path, monkeypatch, native_in_process):
    """QAIRT takes opset <= 22; pretend the limit is 13 so this onnx can show the adapters moving the model down."""
    from onnxbridge.backends.dlc import prepare

    monkeypatch.setattr(prepare, "MAX_OPSET", 13)
    src = _conv_relu(tmp_path / "m.onnx", batch=1)
    rep = onnxbridge.convert(src, to="dlc", output=tmp_path / "m.dlc").report
    facts = rep["artifact"]["backend"]
    assert facts["prepared_opset"] == 13 and any("opset 17 adapted to 13" in n for n in rep["notes"])
    assert rep["hops"][-1]["status"] == "passed"


def test_a_model_the_simulator_refuses_is_skipped_not_passed(tmp_path, monkeypatch, native_in_process):
    from onnxbridge.backends.dlc import qnn
    from onnxbridge.errors import HopSkipped

    def refuse(model_path, **kwargs):
        raise HopSkipped("the HTP simulator cannot run this model: (simulated refusal)")

    monkeypatch.setattr(qnn, "HtpRunner", refuse)
    src = _conv_relu(tmp_path / "m.onnx", batch=1)
    rep = onnxbridge.convert(src, to="dlc", output=tmp_path / "m.dlc", report=tmp_path / "r.json").report
    check_report(tmp_path / "r.json")
    hop = rep["hops"][-1]
    assert (hop["status"], hop["passed"]) == ("skipped", False)
    assert "simulated refusal" in hop["skipped_reason"] and rep["status"] != "passed"


def test_missing_onnxruntime_qnn(cli, tmp_path, monkeypatch, native_in_process):
    import onnxbridge.registry as registry
    from onnxbridge.plugins import BACKENDS

    src = _conv_relu(tmp_path / "m.onnx", batch=1)
    # the distribution is not installed: the registry refuses the backend (exit 3, with the extra to install)
    real = registry.dist_version
    monkeypatch.setattr(registry, "dist_version", lambda d: None if d == "onnxruntime-qnn" else real(d))
    monkeypatch.delitem(BACKENDS._loaded, "dlc", raising=False)
    assert_one_line_error(cli("convert", src, "--to", "dlc", "-o", tmp_path / "a.dlc"), 3,
                          "needs onnxruntime-qnn", "pip install 'onnxbridge[qnn]'")
    monkeypatch.undo()
    from onnxbridge.worker import IN_PROCESS_ENV

    monkeypatch.setenv(IN_PROCESS_ENV, "1")  # undo() took native_in_process's setting away too
    # installed but not importable: the build says so before any work (exit 3)
    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", None)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert_one_line_error(cli("convert", src, "--to", "dlc", "-o", tmp_path / "b.dlc"), 3,
                          "onnxruntime-qnn is not importable", "pip install 'onnxbridge[qnn]'")
    assert not list(tmp_path.glob("*.dlc"))


@pytest.mark.slow
def test_inspect_needs_no_qualcomm_library(cnn_dlc):
    _, dlc, _ = cnn_dlc
    code = ("import sys, json; sys.modules['onnxruntime_qnn'] = None\n"
            "from click.testing import CliRunner\nfrom onnxbridge.cli.main import cli\n"
            f"r = CliRunner().invoke(cli, ['inspect', {str(dlc)!r}, '--json'])\n"
            "info = json.loads(r.stdout); print(r.exit_code, info['format'], info['inputs'][0]['name'], "
            "'onnxruntime' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["0", "dlc", "x", "False"], out.stderr[-800:]


def test_inspect_cli_and_reader_checks(cli, cnn_dlc, tmp_path):
    onnx_path, dlc, rep = cnn_dlc
    info = _reader_checks(dlc, onnx.load(onnx_path))
    assert info["converter_tool"] == "qnn-net-run" and info["dlc_version"] == "4.1"
    assert {"Conv2d": 2, "Transpose": 2, "Neuron": 1, "ResizeBilinear": 1} == info["ops"]
    assert info["weights_bytes"] > 4 * (16 * 3 * 3 * 3)  # the conv weights live in model.params.bin
    res = cli("inspect", dlc, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["ops"] == info["ops"]
    res = cli("inspect", dlc)
    assert res.exit_code == 0 and "Conv2d" in res.stdout and "NETD" in res.stdout
    # not a DLC; a DLC whose topology identifier is wrong
    (tmp_path / "junk.dlc").write_bytes(b"not a zip")
    assert_one_line_error(cli("inspect", tmp_path / "junk.dlc"), 2, "not a DLC")
    raw = bytearray(dlc.read_bytes())
    at = raw.find(b"NETD")
    raw[at:at + 4] = b"XXXX"
    (tmp_path / "bad.dlc").write_bytes(bytes(raw))
    assert any("identifier 'XXXX'" in p for p in container.summary(container.read(tmp_path / "bad.dlc"))["problems"])
    raw[at - 4:at] = b"\xff\xff\xff\x7f"  # the root table offset, pointing far outside the buffer
    (tmp_path / "broken.dlc").write_bytes(bytes(raw))
    assert_one_line_error(cli("inspect", tmp_path / "broken.dlc"), 2, "the DLC graph cannot be read")


@pytest.mark.slow
def test_validate_a_saved_dlc_rebuilds_its_htp_check(cnn_dlc, tmp_path):
    """The genuine pair: the DLC is the graph of its ONNX model, so the simulator's numbers stand for it."""
    onnx_path, dlc, built = cnn_dlc
    rep = onnxbridge.validate(onnx_path, dlc)
    hop = rep["hops"][-1]
    assert (hop["to"], hop["status"], hop["artifact_checked"]) == (HOP, "passed", "structure"), hop
    # QnnIr writes the same bytes for the same model: the check in this run matches the one made at build time
    assert hop["artifact_check"]["graph_sha256"] == built["artifact"]["backend"]["structure_check"]["graph_sha256"]
    assert "checked by structure" in hop["runtimes"][HOP]
    rep = onnxbridge.validate(FACTORY, dlc)  # no ONNX model to rebuild from: skipped, with the reason
    assert rep["hops"][-1]["status"] == "skipped" and "ONNX model" in rep["hops"][-1]["skipped_reason"]


def test_check_targets_dlc(cli, tmp_path):
    dyn = _onnx(tmp_path / "dyn.onnx", [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                                       helper.make_node("Hardmax", ["r"], ["y"], name="hm")], ["N", 5])
    res = cli("check", dyn, "--targets", "dlc", "--report", tmp_path / "r.json")
    assert res.exit_code == 2
    rep = check_report(tmp_path / "r.json")
    blockers = rep["targets"]["dlc"]["blockers"]
    assert any("dynamic dims ['N', 5]" in b for b in blockers) and any("'hm' (Hardmax)" in b for b in blockers)
    ok = _conv_relu(tmp_path / "ok.onnx")
    res = cli("check", ok, "--targets", "dlc", "--input-shape", "x:1,3,8,8")
    assert res.exit_code == 0, res.output
    res = cli("check", ok, "--targets", "dlc")
    assert res.exit_code == 2 and "--input-shape x:N,3,8,8" in res.stdout


FAKE_TOOL = """#!{python}
import json, shutil, sys
args = sys.argv[1:]
entry = [sys.argv[0].rsplit("/", 1)[-1], *args]
if "--input_list" in args:  # keep what the list says (the build's scratch folder goes away)
    lines = open(args[args.index("--input_list") + 1]).read().splitlines()
    entry.append({{"lines": lines, "first_raw_bytes": len(open(lines[0].split(":=")[1], "rb").read())}})
with open({log!r}, "a") as f:
    f.write(json.dumps(entry) + "\\n")
out = args[args.index("--output_path" if "--output_path" in args else "--output_dlc") + 1]
shutil.copyfile({dlc!r}, out)
print("fake QAIRT tool: wrote", out)
"""


def _fake_sdk(folder: Path, dlc: Path, log: Path, names=("qairt-converter", "qairt-quantizer")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        tool = folder / name
        tool.write_text(FAKE_TOOL.format(python=sys.executable, log=str(log), dlc=str(dlc)))
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.mark.slow
def test_sdk_path_builds_the_command_lines(cnn_dlc, tmp_path, monkeypatch, native_in_process):
    onnx_path, dlc, _ = cnn_dlc
    log = tmp_path / "argv.jsonl"
    bin_dir = _fake_sdk(tmp_path / "bin", dlc, log)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "sdk.dlc"
    rep = onnxbridge.convert(onnx_path, to="dlc", output=out, precision="fp16", report=tmp_path / "r.json").report
    check_report(tmp_path / "r.json")
    call = json.loads(log.read_text().splitlines()[0])
    assert call[:3] == ["qairt-converter", "--input_network", call[2]] and call[2].endswith("prepared.onnx")
    assert call[3] == "--output_path" and call[5:] == ["--source_model_input_shape", "x", "2,3,32,32",
                                                       "--float_bitwidth", "16", "--float_bias_bitwidth", "16"]
    facts = rep["artifact"]["backend"]
    assert facts["flavour"] == "sdk" and facts["sdk_converter"] == str(bin_dir / "qairt-converter")
    assert facts["converter_version"].startswith("2.51") and facts["sdk_commands"][0].startswith("qairt-converter ")
    assert out.read_bytes() == dlc.read_bytes()
    # another converter's DLC is not the graph the simulator runs: its hop is skipped, never passed
    hop = rep["hops"][-1]
    assert hop["status"] == "skipped" and "cannot be executed or proven identical" in hop["skipped_reason"], hop
    assert facts["artifact_checked"] == "not run" and "structure_check" not in facts
    assert not any("SDK's DLC" in w for w in rep["warnings"])

    # int8: the quantizer gets the float DLC and an input list of raw float32 files, one line per batch
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).standard_normal((6, 3, 32, 32)).astype(np.float32))
    onnxbridge.convert(onnx_path, to="dlc", output=tmp_path / "q.dlc", precision="int8",
                       calibration=tmp_path / "cal.npz", validate=False)
    conv, quant = [json.loads(ln) for ln in log.read_text().splitlines()[1:]]
    assert "--float_bitwidth" not in conv and quant[0] == "qairt-quantizer"
    assert quant[1] == "--input_dlc" and quant[2] == conv[conv.index("--output_path") + 1]
    assert quant[3] == "--input_list" and quant[4].endswith("input_list.txt")
    assert quant[5:7] == ["--output_dlc", quant[6]] and quant[6].endswith(".dlc")
    listed = quant[7]
    assert len(listed["lines"]) == 3 and all(ln.startswith("x:=") for ln in listed["lines"])
    assert listed["first_raw_bytes"] == 4 * 2 * 3 * 32 * 32  # float32 raw, one batch at the static shape

    # --flavour qnn-ir ignores the SDK on PATH
    rep = onnxbridge.convert(onnx_path, to="dlc", output=tmp_path / "ir.dlc", flavour="qnn-ir", validate=False).report
    assert rep["artifact"]["backend"]["flavour"] == "qnn-ir" and len(log.read_text().splitlines()) == 3

    # an SDK-only user (no onnxruntime-qnn) still converts: the SDK stands in for the pip toolchain (no hop)
    import onnxbridge.registry as registry
    from onnxbridge.plugins import BACKENDS

    real = registry.dist_version
    monkeypatch.setattr(registry, "dist_version", lambda d: None if d == "onnxruntime-qnn" else real(d))
    monkeypatch.delitem(BACKENDS._loaded, "dlc", raising=False)
    assert BACKENDS.status("dlc")["available"]
    assert onnxbridge.convert(onnx_path, to="dlc", output=tmp_path / "sdk_only.dlc", validate=False)
    assert (tmp_path / "sdk_only.dlc").read_bytes() == dlc.read_bytes()
    monkeypatch.setattr(registry, "dist_version", real)


def test_sdk_found_under_snpe_root(cnn_dlc, tmp_path, monkeypatch, cli, native_in_process):
    from onnxbridge.backends.dlc import sdk

    onnx_path, dlc, _ = cnn_dlc
    log = tmp_path / "argv.jsonl"
    root = tmp_path / "snpe"
    _fake_sdk(root / sdk.HOST_BIN, dlc, log, names=("snpe-onnx-to-dlc",))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("QAIRT_SDK_ROOT", raising=False)
    assert_one_line_error(cli("convert", onnx_path, "--to", "dlc", "-o", tmp_path / "a.dlc", "--flavour", "qairt"),
                          3, "--flavour qairt needs the QAIRT SDK")
    monkeypatch.setenv("SNPE_ROOT", str(root))
    found = sdk.find()
    assert found.kind == "snpe-onnx-to-dlc" and found.root == f"SNPE_ROOT={root}" and found.quantizer is None
    assert sdk.converter_args(found, Path("m.onnx"), Path("o.dlc"), {"x": [1, 3, 8, 8]}, "fp32")[1:] == [
        "--input_network", "m.onnx", "--output_path", "o.dlc", "--input_dim", "x", "1,3,8,8"]
    res = cli("convert", onnx_path, "--to", "dlc", "-o", tmp_path / "b.dlc", "--flavour", "qairt", "--no-validate")
    assert res.exit_code == 0, res.output
    assert json.loads(log.read_text())[0] == "snpe-onnx-to-dlc"
    np.savez(tmp_path / "cal.npz", x=np.zeros((2, 3, 32, 32), np.float32))
    assert_one_line_error(cli("convert", onnx_path, "--to", "dlc", "-o", tmp_path / "c.dlc", "--precision", "int8",
                              "--calibration", tmp_path / "cal.npz"), 3, "snpe-dlc-quant")
    assert shutil.which("snpe-onnx-to-dlc") is None


# --- a verdict is a fact: the .dlc must hold exactly the graph the simulator ran ------------------------------


@pytest.fixture(scope="module")
def other_cnn(models, tmp_path_factory):
    """Model B: the example CNN's architecture with other weights, so its DLC has the same nodes, tensors, names
    and I/O shapes as A's, and only the weight bytes differ (the nasty case)."""
    import torch

    torch.manual_seed(1)
    model = models.SmallCNN().eval()
    path = tmp_path_factory.mktemp("cnn_b") / "b.onnx"
    onnxbridge.convert(model, (torch.randn(2, 3, 32, 32),), output=path, opset=17, validate=False)
    return path


def _flip_weight(path: Path, tensor: str) -> None:
    """Flip one bit of ``tensor``'s bytes inside model.params.bin (stored, CRC 0: nothing else to fix)."""
    dlc = container.read(path)
    at = dlc.spans["model.params.bin"][0] + dlc.weights[tensor][0] + dlc.weights[tensor][1] // 2
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.slow
def test_a_dlc_of_another_model_fails_naming_the_tensor(cnn_dlc, other_cnn, cli, tmp_path):
    """`validate B.onnx A.dlc`: same architecture and I/O, other weights. Before, the simulator ran B and the hop
    passed; now the DLC is compared with B's graph and the hop fails, naming the tensors whose bytes differ."""
    from onnxbridge.backends.dlc import convert

    _, a_dlc, _ = cnn_dlc
    with pytest.raises(ArtifactMismatch, match=r"static tensor 'head\.weight' bytes differ \(sha256 [0-9a-f]{12}"):
        convert.runner(a_dlc, onnx_path=other_cnn)
    rep = onnxbridge.validate(other_cnn, a_dlc)
    hop = rep["hops"][-1]
    assert rep["status"] == "failed" and hop["status"] == "failed" and not hop["passed"], hop
    assert any("static tensor 'head.weight' bytes differ" in e for e in hop["errors"]), hop["errors"]
    res = cli("validate", other_cnn, a_dlc, "--report", tmp_path / "r.json")
    assert res.exit_code == 1, res.output
    assert check_report(tmp_path / "r.json")["hops"][-1]["status"] == "failed"


def test_a_flipped_weight_byte_fails(cnn_dlc, cli, tmp_path):
    from onnxbridge.backends.dlc import convert

    onnx_path, dlc, _ = cnn_dlc
    bad = tmp_path / "flipped.dlc"
    shutil.copyfile(dlc, bad)
    _flip_weight(bad, "head.weight")
    assert container.problems(container.read(bad)) == []  # our reader alone sees nothing wrong
    with pytest.raises(ArtifactMismatch) as info:
        convert.runner(bad, onnx_path=onnx_path)
    assert "static tensor 'head.weight' bytes differ" in str(info.value)
    assert "onnx::Conv" not in str(info.value)  # only the tensor that differs is named
    assert cli("validate", onnx_path, bad).exit_code == 1


def test_an_altered_node_or_unparsed_field_fails(cnn_dlc, tmp_path):
    """Same-length edits in the stored ``model`` entry: an op type (named), and the graph name, which our reader
    does not compare field by field (the raw entry check catches it)."""
    _, dlc, _ = cnn_dlc
    ref = container.read(dlc)
    assert structure.compare(container.read(dlc), ref) == []
    raw = dlc.read_bytes()
    conv = tmp_path / "conv.dlc"
    conv.write_bytes(raw.replace(b"Conv2d", b"Conv3d", 1))
    assert any(" is Conv3d in the DLC, Conv2d in the graph simulated" in d
               for d in structure.compare(container.read(conv), ref))
    name = ref.graphs[0].name.encode()
    renamed = tmp_path / "renamed.dlc"
    renamed.write_bytes(raw.replace(name, name[:-1] + (b"9" if name[-1:] != b"9" else b"8")))
    [line] = structure.compare(container.read(renamed), ref)
    assert "the 'model' entry differs" in line and "fields our reader does not compare" in line


def test_the_build_refuses_a_placed_file_that_is_not_the_graph_simulated(cnn_dlc, tmp_path, monkeypatch):
    from onnxbridge.backends.dlc import convert

    onnx_path, _, _ = cnn_dlc
    real = convert._place

    def tampered(dlc, output):
        real(dlc, output)
        _flip_weight(output, "head.bias")

    monkeypatch.setattr(convert, "_place", tampered)
    out = tmp_path / "m.dlc"
    with pytest.raises(UnsupportedError, match=r"static tensor 'head\.bias' bytes differ"):
        convert.build(onnx_path, out)
    assert not out.exists()


def test_the_build_describes_a_runner_another_process_can_make(cnn_dlc, tmp_path):
    """build returns a BuildResult whose runner is plain values (RunnerSpec), the model it names stays on disk under
    the run's workdir, and the factory makes the runner with the hop's name and the structure facts."""
    from onnxbridge.plugins import BuildContext
    from onnxbridge.worker import RunnerSpec, open_runner

    onnx_path, _, _ = cnn_dlc
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "m.dlc"
    built = onnxbridge.backends.dlc.build(onnx_path, out, context=BuildContext(workdir=work))
    spec, facts = built.runner, built.facts
    assert isinstance(spec, RunnerSpec) and spec.factory == "onnxbridge.backends.dlc.convert:htp_runner"
    assert spec.library.startswith("onnxruntime-qnn ")
    assert json.loads(json.dumps(spec.kwargs)) == spec.kwargs  # plain values only
    model = Path(spec.kwargs["model_path"])
    assert model.is_file() and work in model.parents and spec.kwargs["dlc_path"] == str(out)
    assert [p.name for p in model.parent.iterdir()] == [model.name]  # the rest of the build's scratch is gone
    runner = open_runner(spec, "the dlc runner")
    assert (runner.hop_name, runner.artifact_checked, runner.compute_precision) == (HOP, "structure", "fp16")
    assert runner.artifact_check["graph_sha256"] == facts["structure_check"]["graph_sha256"]
    assert runner.static_shapes == {"x": [2, 3, 32, 32]}
    y = runner({"x": np.zeros((2, 3, 32, 32), np.float32)})
    assert y[0].shape == (2, 4, 64, 64)
    del runner  # the worker frees its session before its next call
    # the file changed between build and validation: the hop fails
    _flip_weight(out, "head.weight")
    with pytest.raises(ArtifactMismatch, match="changed after it was built"):
        open_runner(spec, "the dlc runner")


class _Shared:
    """One object that many offsets point at (placed where it is first reached)."""

    def __init__(self, value):
        self.value, self.pos = value, None


def _flatbuffer(root: dict, ident: bytes) -> bytes:
    """A FlatBuffer laid out parent first (offsets point forward), enough to craft DLCs: a table is {slot: value},
    a value an int (4-byte scalar), a str, a table, a list of tables or strings, or ("u32", [ints])."""
    buf = bytearray(4) + ident

    def put(value) -> int:
        if isinstance(value, _Shared):
            if value.pos is None:
                value.pos = put(value.value)
            return value.pos
        buf.extend(b"\0" * (-len(buf) % 4))
        pos = len(buf)
        if isinstance(value, str):
            buf.extend(struct.pack("<I", len(value.encode())) + value.encode() + b"\0")
        elif isinstance(value, tuple):
            buf.extend(struct.pack(f"<I{len(value[1])}I", len(value[1]), *value[1]))
        elif isinstance(value, list):
            buf.extend(struct.pack("<I", len(value)) + bytes(4 * len(value)))
            for i, item in enumerate(value):
                struct.pack_into("<I", buf, pos + 4 + 4 * i, put(item) - (pos + 4 + 4 * i))
        else:
            order = sorted(value)
            slots = [4 + 4 * order.index(s) if s in value else 0 for s in range(max(order) + 1)]
            buf.extend(struct.pack(f"<HH{len(slots)}H", 4 + 2 * len(slots), 4 + 4 * len(order), *slots))
            buf.extend(b"\0" * (-len(buf) % 4))
            table = len(buf)
            buf.extend(struct.pack("<i", table - pos) + bytes(4 * len(order)))
            for i, slot in enumerate(order):
                at, v = table + 4 + 4 * i, value[slot]
                struct.pack_into("<I", buf, at, v if isinstance(v, int) else put(v) - at)
            return table
        return pos

    struct.pack_into("<I", buf, 0, put(root))
    return bytes(buf)


def _crafted_dlc(path: Path, topology: dict, params: dict | None = None) -> Path:
    header = container.MAGIC + b"\x04\x00\x01\x00\x00\x00"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("model", header + _flatbuffer(topology, b"NETD"))
        z.writestr("model.params", header + _flatbuffer(params or {0: [{0: "g"}]}, b"NETP"))
        z.writestr("model.params.bin", b"")
    return path


def test_handcrafted_dlcs_never_pass(cnn_dlc, cli, tmp_path):
    """The 528-byte file of the issue: a stored ZIP whose `model` entry has the D5 0A header and garbage (our
    reader refuses it: exit 2); and a well-formed little DLC with the CNN's I/O and one node (exit 1)."""
    onnx_path, _, _ = cnn_dlc
    junk = tmp_path / "junk.dlc"
    garbage = bytes(range(256)) * 2
    with zipfile.ZipFile(junk, "w", zipfile.ZIP_STORED) as z:
        z.writestr("model", container.MAGIC + b"\x04\x00\x01\x00\x00\x00" + garbage[:528 - 116])
    assert junk.stat().st_size == 528
    res = cli("validate", onnx_path, junk)
    assert res.exit_code == 2, res.output
    tensor = {1: "x", 2: 0, 3: ("u32", [2, 3, 32, 32]), 6: 0x232}
    out = {1: "output", 2: 1, 3: ("u32", [2, 4, 64, 64]), 6: 0x232}
    tiny = _crafted_dlc(tmp_path / "tiny.dlc", {0: [{0: "g", 1: [{0: "n", 1: "Neuron", 2: ["x"], 3: ["output"]}],
                                                     2: [tensor, out]}]})
    assert container.problems(container.read(tiny)) == []  # well formed: only the structure check refuses it
    res = cli("validate", onnx_path, tiny, "--report", tmp_path / "r.json")
    assert res.exit_code == 1, res.output
    errors = check_report(tmp_path / "r.json")["hops"][-1]["errors"]
    assert any("node(s) in 'tiny.dlc', 6 in 'cnn.onnx'" in e for e in errors), errors


def test_a_crafted_dlc_cannot_make_the_reader_slow(tmp_path, cli, cnn_dlc):
    """20,000 node entries pointing at one node whose 20,000 inputs point at one 4 kB string: read naively that
    is 1.6 TB of string decoding; the reader's budget refuses it at once."""
    big = _Shared("a" * 4000)
    node = _Shared({0: "n", 1: "Neuron", 2: [big] * 20000, 3: ["y"]})
    path = _crafted_dlc(tmp_path / "bomb.dlc", {0: [{0: "g", 1: [node] * 20000}]})
    t = time.perf_counter()
    with pytest.raises(BadInputError, match="more work than its size allows"):
        container.read(path)
    assert time.perf_counter() - t < 5
    onnx_path, _, _ = cnn_dlc
    assert cli("validate", onnx_path, path).exit_code == 2


def test_a_model_without_weights_converts_and_validates(tmp_path):
    """QnnIr writes no model.params.bin for a graph without weights: that DLC is well formed."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    src = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), src)
    result = onnxbridge.convert(str(src), to="dlc", output=str(tmp_path / "relu.dlc"))
    assert result.report["status"] == "passed"
    dlc = container.read(tmp_path / "relu.dlc")
    assert container.WEIGHTS not in dlc.entries and container.problems(dlc) == []
    assert onnxbridge.validate(str(src), str(tmp_path / "relu.dlc"))["status"] == "passed"


@pytest.mark.parametrize("attrs", [{"pads": [0, 0, 1, 1]}, {"auto_pad": "SAME_UPPER"}])
def test_an_average_pool_the_htp_crashes_on_is_refused(tmp_path, attrs):
    """onnxruntime-qnn's HTP simulator dies (SIGSEGV) on AveragePool with asymmetric padding it does not count
    (dilated here: the padded-pool rule leaves those as they are)."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    src = tmp_path / "pool.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=8), src)
    with pytest.raises(UnsupportedError, match="count_include_pad=0"):
        onnxbridge.convert(str(src), to="dlc", output=str(tmp_path / "pool.dlc"))
    assert not (tmp_path / "pool.dlc").exists()
    from onnxbridge.spine import check_targets

    blockers = check_targets(str(src), ["dlc"])["blockers"]
    assert any("onnxruntime-qnn's HTP crashes on it" in b for b in blockers)


def test_dynamic_inputs_take_the_sample_shapes(tmp_path):
    """A model with dynamic dims converts without --input-shape: the DLC is fixed at the sample's shapes."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    src = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), src)
    rep = onnxbridge.convert(str(src), {"x": np.ones((3, 4), np.float32)}, to="dlc",
                             output=str(tmp_path / "dyn.dlc")).report
    assert rep["status"] == "passed" and rep["hops"][-1]["status"] == "passed"
    assert any("fixed at the sample's shapes (x [3, 4]" in n for n in rep["notes"])
    assert rep["artifact"]["backend"]["input_shapes"] == {"x": [3, 4]}


def _node_case(name: str) -> tuple[Path, dict]:
    """An onnx node test's model and its test_data_set_0 inputs."""
    import onnx.backend.test

    case = Path(onnx.backend.test.__file__).parent / "data" / "node" / name
    model = onnx.load(case / "model.onnx")
    feeds = {}
    for i, value in enumerate(model.graph.input):
        tensor = onnx.TensorProto()
        tensor.ParseFromString((case / "test_data_set_0" / f"input_{i}.pb").read_bytes())
        feeds[value.name] = numpy_helper.to_array(tensor)
    return case / "model.onnx", feeds


@pytest.mark.parametrize("case,rule", [
    ("test_layer_normalization_4d_axis1", "layernorm-to-reductions"),  # Mean and InvStdDev outputs, run-time scale
    ("test_clip_splitbounds", "clip-to-max-min"),
    ("test_argmin_negative_axis_keepdims_random_select_last_index", "argmin-last-to-reversed"),
    ("test_dropout_default_mask", "dropout-to-copy"),
    ("test_hardswish", "hardsigmoid-mul-to-hardswish"),  # the QNN EP's HardSigmoid * x fusion is wrong on the HTP
    ("test_selu", "selu-to-elu"),
    ("test_softplus", "softplus-to-exp-log"),
    ("test_shrink_soft", "shrink-to-where"),
    ("test_max_one_input", "one-input-variadic-to-reshape"),
    ("test_gemm_default_vector_bias", "gemm-to-matmul"),  # a [1, N] run-time C: the DLC's inputs are the model's
    ("test_xor_bcast4v2d", "xor-to-and-or"),
    ("test_batchnorm_example", "batchnorm-to-arithmetic"),  # run-time scale, mean and variance
    ("test_gather_elements_negative_indices", "gather-elements-nonnegative-indices"),  # failed on the HTP before
    ("test_scatter_elements_with_negative_indices", "scatter-elements-nonnegative-indices"),
    ("test_hardmax_axis_1", "hardmax-to-equal-argmax"),
    ("test_lppool_2d_pads", "lppool-to-averagepool"),
    ("test_group_normalization_example", "shape-to-constant"),  # the inlined function's Shape, then folded again
    ("test_acos", "trig-to-identities"),
    ("test_isinf_float16", "isinf-to-equal"),
    ("test_averagepool_2d_precomputed_same_upper", "padded-averagepool-to-pad"),  # the HTP crashed on it before
    ("test_averagepool_2d_pads", "padded-averagepool-to-pad"),  # wrong numbers on the HTP before
    ("test_averagepool_2d_ceil", "padded-averagepool-to-pad"),
    ("test_lppool_2d_same_lower", "lppool-to-averagepool"),
    ("test_convtranspose_output_shape", "convtranspose-extended-to-slice-pad"),  # wrong numbers on the HTP before
    ("test_reduce_sum_square_default_axes_keepdims_example", "reduction-to-reducesum"),  # axes: an empty input
])
@pytest.mark.fast_cases("test_layer_normalization_4d_axis1-layernorm-to-reductions")
def test_legalized_node_tests_pass_on_the_htp_simulator(tmp_path, case, rule):
    """Node-suite cases the QNN EP refuses (or the HTP gets wrong) as they stand: legalized, converted, passing the
    simulator hop; and ``check`` clears them, since it prepares the model as the build does."""
    from onnxbridge.spine import check_targets

    src, feeds = _node_case(case)
    rep = onnxbridge.convert(str(src), feeds, to="dlc", output=str(tmp_path / "m.dlc")).report
    assert rep["status"] == "passed" and rep["hops"][-1]["status"] == "passed", rep["hops"][-1]
    assert any(n.startswith("legalized") and rule in n for n in rep["notes"]), rep["notes"]
    assert check_targets(str(src), ["dlc"])["blockers"] == []


def _htp_blind_spot(path: Path, case: str) -> Path:
    """What the HTP got wrong before a rule: a Pad of the last axis at its end only (after a Relu here; EfficientViT
    pads v with ones so: wrong numbers), and an RMS normalization scaled weight-first (Llama's: the graph did not
    finalize)."""
    inits = [numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 0, 1], np.int64), "pads"),
             numpy_helper.from_array(np.float32(1), "one"), numpy_helper.from_array(np.float32(2), "two"),
             numpy_helper.from_array(np.float32(1e-6), "eps"),
             numpy_helper.from_array(np.random.default_rng(0).uniform(0.5, 1.5, 64).astype(np.float32), "w")]
    shape = [1, 8, 16, 16] if case == "pad" else [1, 16, 64]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Pad", ["r", "pads", "one"], ["y"])] \
        if case == "pad" else [
        helper.make_node("Pow", ["x", "two"], ["p"]), helper.make_node("ReduceMean", ["p"], ["m"], axes=[-1]),
        helper.make_node("Add", ["m", "eps"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"]),
        helper.make_node("Reciprocal", ["s"], ["r"]), helper.make_node("Mul", ["x", "r"], ["n"]),
        helper.make_node("Mul", ["w", "n"], ["y"])]
    used = {i for n in nodes for i in n.input}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [t for t in inits if t.name in used])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.mark.parametrize("case,rule", [("pad", "last-axis-end-pad-to-concat"), ("rms", "rms-scale-operand-second")])
def test_what_the_htp_got_wrong_passes_legalized(tmp_path, case, rule):
    src = _htp_blind_spot(tmp_path / f"{case}.onnx", case)
    rep = onnxbridge.convert(str(src), to="dlc", output=str(tmp_path / "m.dlc")).report
    assert rep["status"] == "passed" and rep["hops"][-1]["status"] == "passed", rep["hops"][-1]
    assert any(n.startswith("legalized") and rule in n for n in rep["notes"]), rep["notes"]


def test_check_sees_what_folding_removes(tmp_path):
    """CastLike of a constant (as opset-18 expanded functions write it) is folded away before the QNN EP sees the
    model: check does not block on it; a run-time op without a QNN builder is still named."""
    from onnxbridge.spine import check_targets

    nodes = [helper.make_node("CastLike", ["half", "x"], ["h"]), helper.make_node("Mul", ["x", "h"], ["y"])]
    src = _onnx(tmp_path / "castlike.onnx", nodes, [2, 4], [("half", np.array(0.5, np.float64))])
    assert check_targets(str(src), ["dlc"])["blockers"] == []
    src = _onnx(tmp_path / "erf.onnx", [helper.make_node("Erf", ["x"], ["y"], name="erf")], [2, 4])
    assert any("'erf' (Erf)" in b for b in check_targets(str(src), ["dlc"])["blockers"])


def test_an_opset_below_what_the_qnn_ep_takes_is_adapted_up(tmp_path):
    """onnxruntime-qnn takes no node of an opset-1 model (test_not_2d): it is adapted to opset 7 first."""
    src, feeds = _node_case("test_not_2d")
    rep = onnxbridge.convert(str(src), feeds, to="dlc", output=str(tmp_path / "not.dlc")).report
    assert rep["status"] == "passed" and rep["hops"][-1]["status"] == "passed", rep["hops"][-1]
    assert rep["artifact"]["backend"]["prepared_opset"] == 7 and any("opset 1 adapted to 7" in n for n in rep["notes"])


def test_an_input_holding_no_element_becomes_a_constant(tmp_path):
    """ReduceSum over an empty axes input (all axes): the input has a known value and QNN no zero-size tensors, so
    it is an empty constant of the prepared model; the DLC's inputs are the others, and a saved DLC validates."""
    src, feeds = _node_case("test_reduce_sum_default_axes_keepdims_example")
    rep = onnxbridge.convert(str(src), feeds, to="dlc", output=str(tmp_path / "m.dlc")).report
    assert rep["status"] == "passed" and rep["hops"][-1]["status"] == "passed", rep["hops"][-1]
    assert any("axes hold no element" in n for n in rep["notes"]), rep["notes"]
    assert [i["name"] for i in rep["artifact"]["backend"]["inputs"]] == ["data"]
    assert onnxbridge.validate(str(src), str(tmp_path / "m.dlc"), feeds)["status"] == "passed"
