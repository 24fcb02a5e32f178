"""``onnxbridge matrix`` from the command line: exit 0 when every cell passed, 5 when a cell was skipped (0 with
--allow-skipped), 1 on an error cell, 2 on a bad manifest naming the key and its line."""
from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, assert_one_line_error
from tests.helpers.extras import requires

MANIFEST = """\
[matrix]
targets = ["onnx"]
precisions = ["fp32", "int8"]
opsets = [17]

[[model]]
name = "cnn"
source = "{models}:cnn"
dynamic = ["x:0:batch"]
"""


@pytest.mark.slow
@requires("torch")
def test_a_skipped_cell_is_exit_5_unless_allowed_and_an_error_cell_is_exit_1(cli, tmp_path):
    manifest = tmp_path / "m.toml"
    manifest.write_text(MANIFEST.format(models=ROOT / "examples" / "models.py"))
    res = cli("matrix", manifest, "-o", tmp_path / "out", "--workers", "1")
    assert res.exit_code == 5, res.output
    last = res.stderr.strip().splitlines()[-1]  # after the progress lines (one per finished cell)
    assert last.startswith("error: matrix incomplete: 1 cell(s) skipped, first cnn/onnx-int8-opset17: ") and \
        "does not apply int8" in last and "--allow-skipped" in last, res.stderr
    result = json.loads((tmp_path / "out" / "matrix.json").read_text())
    cells = {c["name"]: c["status"] for c in result["cells"]}
    assert cells == {"cnn/onnx-fp32-opset17": "passed", "cnn/onnx-int8-opset17": "skipped"}
    assert result["status"] == "skipped" and "skipped cnn/onnx-int8-opset17" in res.stdout
    res = cli("matrix", manifest, "-o", tmp_path / "out", "--workers", "1", "--allow-skipped")  # the passed cell reused
    assert res.exit_code == 0 and "matrix incomplete" not in res.stderr, res.output
    assert json.loads((tmp_path / "out" / "matrix.json").read_text())["status"] == "skipped"  # still not passed
    broken = tmp_path / "broken.py"
    broken.write_text("def cnn():\n    raise RuntimeError('broken on purpose')\n")
    manifest.write_text(MANIFEST.format(models=broken))
    res = cli("matrix", manifest, "-o", tmp_path / "out2", "--workers", "1")
    assert res.exit_code == 1 and "broken on purpose" in res.output


def test_a_bad_manifest_is_exit_2_naming_the_key_and_line(cli, tmp_path):
    manifest = tmp_path / "m.toml"
    manifest.write_text(MANIFEST.format(models=ROOT / "examples" / "models.py").replace('opsets = [17]',
                                                                                        'opsets = [17]\nspeed = 3'))
    assert_one_line_error(cli("matrix", manifest, "-o", tmp_path / "out"), 2, "m.toml:5:", "'speed'")
    assert not (tmp_path / "out").exists()
