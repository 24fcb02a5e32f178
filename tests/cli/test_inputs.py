"""``onnxbridge inputs``: a sample input file for any source, drawn by the sampler validation uses."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import EXAMPLES
from tests.helpers.extras import requires

CNN = f"{EXAMPLES}:cnn"


@pytest.mark.slow
def test_seed_0_is_the_sample_validation_uses_and_validate_passes_on_it(cli, models, tmp_path):
    res = cli("inputs", CNN, "-o", tmp_path / "batch.npz")
    assert res.exit_code == 0 and "wrote" in res.output and "x 2x3x32x32 float32" in res.output, res.output
    with np.load(tmp_path / "batch.npz") as data:
        assert data.files == ["x"]
        np.testing.assert_array_equal(data["x"], models.cnn()[1][0].numpy())  # the factory's own sample
    assert cli("convert", CNN, "-o", tmp_path / "cnn.onnx", "--dynamic", "x:0", "-q").exit_code == 0
    res = cli("validate", CNN, tmp_path / "cnn.onnx", "--inputs", tmp_path / "batch.npz", "--report", tmp_path / "r.json")
    assert res.exit_code == 0 and "status: passed" in res.output, res.output


@requires("torch")
def test_batch_and_seed_draw_fresh_rows(cli, tmp_path):
    assert cli("inputs", CNN, "-o", tmp_path / "a.npz", "--batch", "5", "--seed", "3").exit_code == 0
    assert cli("inputs", CNN, "-o", tmp_path / "b.npz", "--batch", "5", "--seed", "4").exit_code == 0
    a, b = np.load(tmp_path / "a.npz")["x"], np.load(tmp_path / "b.npz")["x"]
    assert a.shape == (5, 3, 32, 32) and a.dtype == np.float32
    assert not np.array_equal(a[0], a[2]) and not np.array_equal(a, b)  # rows differ; seeds differ
    again = tmp_path / "again.npz"
    cli("inputs", CNN, "-o", again, "--batch", "5", "--seed", "3")
    np.testing.assert_array_equal(np.load(again)["x"], a)  # seeded: the same file twice


@requires("torch")
def test_calibration_stacks_batches_that_an_int8_build_reads(cli, tmp_path):
    from onnxbridge.calibration import batches

    res = cli("inputs", CNN, "-o", tmp_path / "calib.npz", "--calibration", "4", "--batch", "1")
    assert res.exit_code == 0, res.output
    arrays = dict(np.load(tmp_path / "calib.npz"))
    assert arrays["x"].shape == (4, 1, 3, 32, 32)
    feeds = batches(arrays, {"x": [None, 3, 32, 32]})
    assert len(feeds) == 4 and not np.array_equal(feeds[0]["x"], feeds[1]["x"])


def test_onnx_source_batch_needs_the_axis_open_and_int_inputs_keep_their_dtype(cli, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["out"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 7])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 7, 4])],
        [helper.make_tensor("table", TensorProto.FLOAT, [10, 4], np.arange(40, dtype=np.float32))])
    path = tmp_path / "emb.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    res = cli("inputs", path, "-o", tmp_path / "x.npz", "--batch", "3")
    assert res.exit_code == 2 and "fixes axis 0 of input 'ids' to 1" in res.output and "--dynamic ids:0" in res.output
    res = cli("inputs", path, "-o", tmp_path / "x.npz", "--batch", "3", "--dynamic", "ids:0")
    assert res.exit_code == 0, res.output
    ids = np.load(tmp_path / "x.npz")["ids"]
    assert ids.shape == (3, 7) and ids.dtype == np.int64 and 0 <= ids.min() and ids.max() < 10


@pytest.mark.parametrize("args, message", [
    pytest.param(["-o", "{tmp}/x.txt"], "an inputs file ends in .npz", marks=requires("torch")),
    (["-o", "{tmp}/x.npz", "--batch", "0"], "0 is not in the range"),
    (["-o", "{tmp}/x.npz", "--calibration", "-1"], "--calibration"),
    pytest.param(["-o", "{tmp}/x.npz", "--input-shape", "nope:1,2"], "names unknown input 'nope'",
                 marks=requires("torch")),
])
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, message):
    res = cli("inputs", CNN, *[a.format(tmp=tmp_path) for a in args])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
    assert not list(tmp_path.glob("x.*"))


def test_missing_source_and_output_over_the_source(cli, tmp_path):
    res = cli("inputs", tmp_path / "missing.onnx", "-o", tmp_path / "x.npz")
    assert res.exit_code == 2 and "does not exist" in res.output
    src = tmp_path / "m.npz"
    src.write_bytes(b"")
    res = cli("inputs", src, "-o", src, "--from", "onnx")
    assert res.exit_code == 2 and "would overwrite" in res.output, res.output
