"""``onnxbridge convert --split-tail``: the artifact and OUTPUT.tail.onnx written together, the cut named in the
output; refused in one line (exit 2) where no backend takes part of the model."""
from __future__ import annotations

import json

import numpy as np
import onnx

from tests.conftest import assert_one_line_error
from tests.core.test_split import detector, sample
from tests.helpers.extras import requires


def files(tmp_path):
    source = tmp_path / "det.onnx"
    onnx.save(detector(), source)
    np.savez(tmp_path / "x.npz", x=sample())
    return source, tmp_path / "x.npz"


@requires("onnxruntime_qnn")
def test_convert_split_tail_to_a_dlc(cli, tmp_path):
    source, inputs = files(tmp_path)
    result = cli("convert", source, "-o", tmp_path / "m.dlc", "--inputs", inputs, "--split-tail",
                 "--report", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert "--split-tail: cut before node 'nonzero' (NonZero), the first dlc refuses" in result.output
    assert "onnx -> qnn-htp-simulator+onnxruntime: passed" in result.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["split"]["tail"] == str(tmp_path / "m.dlc.tail.onnx")
    assert (tmp_path / "m.dlc").is_file() and (tmp_path / "m.dlc.tail.onnx").is_file()


def test_split_tail_needs_a_backend(cli, tmp_path):
    source, _ = files(tmp_path)
    result = cli("convert", source, "-o", tmp_path / "m.onnx", "--split-tail")
    assert_one_line_error(result, 2, "--split-tail", "--to onnx writes the whole model for onnxruntime")
    assert not (tmp_path / "m.onnx").exists()
