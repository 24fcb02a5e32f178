"""The matrix manifest: refusals that name the key and its line, expansion into cells, exclude, --only, precision
skips, and cache keys that follow the source file and the options."""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from onnxbridge.errors import BadInputError
from onnxbridge.matrix.cache import cell_key, cell_keys, reusable, save_record
from onnxbridge.matrix.cells import Cell, expand
from onnxbridge.matrix.manifest import load_manifest

FACTORY = "import torch\n\ndef mlp():\n    return torch.nn.Linear(3, 4).eval(), (torch.randn(2, 3),)\n"

GOOD = """\
[matrix]
targets = ["onnx", "openvino"]
precisions = ["fp32", "fp16"]
opsets = [17]
atol = 0.001

[[model]]
name = "mlp"
source = "factories.py:mlp"
from = "torch"

[[model]]
name = "other"
source = "factories.py:mlp"
seed = 3
"""


def write(folder: Path, text: str, factory: str = FACTORY) -> Path:
    (folder / "factories.py").write_text(factory)
    path = folder / "matrix.toml"
    path.write_text(textwrap.dedent(text))
    return path


def refusal(folder: Path, text: str) -> str:
    with pytest.raises(BadInputError) as info:
        load_manifest(write(folder, text))
    return info.value.one_line()


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line holding ``needle``."""
    return next(i for i, line in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in line)


@pytest.mark.parametrize("broken, key, needle", [
    (GOOD.replace("seed = 3", "sead = 3"), "sead", "sead = 3"),  # a typo in a model's option
    (GOOD.replace("atol = 0.001", "atoll = 0.001"), "atoll", "atoll"),  # a typo in a matrix default
    (GOOD.replace("seed = 3", "output = \"x.onnx\""), "output", "output ="),  # the cell sets it itself
    (GOOD + "\n[extra]\nx = 1\n", "extra", "[extra]"),  # an unknown table
    (GOOD.replace('"openvino"]', '"openvinoo"]'), "openvinoo", "targets ="),  # an unknown backend
    (GOOD.replace('"fp16"]', '"fp8"]'), "fp8", "precisions ="),  # an unknown precision
    (GOOD.replace("seed = 3", "seed = \"three\""), "seed", "seed ="),  # a wrong type (onnxbridge.arguments)
    (GOOD.replace('name = "other"', 'name = "../up"'), "../up", 'name = "../up"'),  # not a safe folder name
    (GOOD.replace('name = "other"', 'name = "mlp"'), "mlp", 'name = "mlp"\nsource = "factories.py:mlp"\nseed'),
    (GOOD.replace('source = "factories.py:mlp"\nseed', 'source = "nothere.py:mlp"\nseed'), "nothere.py",
     "nothere.py"),  # a missing factory file
    (GOOD.replace("atol = 0.001", 'exclude = [{ model = "mlp", targett = "onnx" }]'), "targett",
     "targett"),  # an unknown key inside an inline exclude table
    (GOOD.replace("atol = 0.001", 'exclude = [\n  { model = "mlp" },\n  { precision = "fp64" },\n]'), "fp64",
     "fp64"),  # an unknown precision in exclude, on its own line
])
def test_refusals_name_the_key_and_its_line(tmp_path, broken, key, needle):
    message = refusal(tmp_path, broken)
    assert key in message
    if "\n" in needle:  # the second of two identical lines: the one that starts the needle's block
        start = textwrap.dedent(broken).index(needle)
        expected = textwrap.dedent(broken)[:start].count("\n") + 1
    else:
        expected = line_of(broken, needle)
    assert re.search(rf"matrix\.toml:{expected}: ", message), (message, expected)


def test_refusals_without_models_targets_or_cells(tmp_path):
    assert "[[model]]" in refusal(tmp_path, '[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\n')
    message = refusal(tmp_path, GOOD.replace('targets = ["onnx", "openvino"]\n', ""))
    assert "targets" in message
    message = refusal(tmp_path, GOOD.replace('targets = ["onnx", "openvino"]', "targets = []"))
    assert "targets" in message and f"matrix.toml:{line_of(GOOD, 'targets')}:" in message
    assert "not valid TOML" in refusal(tmp_path, "[matrix\n")
    # every cell excluded: nothing to run is refused too
    every = GOOD.replace("atol = 0.001", 'exclude = [{ precision = "fp32" }, { precision = "fp16" }]')
    with pytest.raises(BadInputError, match="no cells"):
        expand(load_manifest(write(tmp_path, every)))


def test_expansion_exclude_and_only(tmp_path):
    manifest = load_manifest(write(tmp_path, GOOD))
    cells = expand(manifest)
    assert len(cells) == 2 * 2 * 2 * 1
    assert [c.name for c in cells[:4]] == ["mlp/onnx-fp32-opset17", "mlp/onnx-fp16-opset17",
                                           "mlp/openvino-fp32-opset17", "mlp/openvino-fp16-opset17"]
    first = cells[0]
    assert first.source == f"{(tmp_path / 'factories.py').resolve()}:mlp"  # resolved against the manifest's folder
    assert first.options == {"atol": 0.001, "from_": "torch"}  # matrix default + the model's own ("from" alias)
    assert cells[4].options == {"atol": 0.001, "seed": 3}
    assert first.output_name() == "model.onnx" and cells[2].output_name() == "model.xml"
    assert Cell.from_dict(json.loads(json.dumps(first.as_dict()))) == first

    excluded = GOOD.replace("atol = 0.001", 'exclude = [{ model = "mlp", target = "openvino" }, { opset = 17, '
                            'precision = "fp16", target = "onnx" }]')
    names = [c.name for c in expand(load_manifest(write(tmp_path, excluded)))]
    assert names == ["mlp/onnx-fp32-opset17", "other/onnx-fp32-opset17", "other/openvino-fp32-opset17",
                     "other/openvino-fp16-opset17"]

    only = [c.name for c in expand(manifest, only=["*/onnx-fp16-*", "other/openvino-fp32*"])]
    assert only == ["mlp/onnx-fp16-opset17", "other/onnx-fp16-opset17", "other/openvino-fp32-opset17"]
    with pytest.raises(BadInputError, match="--only"):
        expand(manifest, only=["nothing/*"])


def test_model_axes_and_default_opset(tmp_path):
    text = GOOD.replace("opsets = [17]\n", "").replace("seed = 3", 'seed = 3\ntargets = ["onnx"]\nopsets = [13, 18]')
    cells = expand(load_manifest(write(tmp_path, text)))
    other = [c.name for c in cells if c.model == "other"]
    assert other == ["other/onnx-fp32-opset13", "other/onnx-fp32-opset18", "other/onnx-fp16-opset13",
                     "other/onnx-fp16-opset18"]
    assert cells[0].name == "mlp/onnx-fp32-opsetdefault" and cells[0].opset is None


def test_a_precision_the_target_does_not_apply_is_skipped(tmp_path):
    text = GOOD.replace('precisions = ["fp32", "fp16"]', 'precisions = ["fp32", "int8"]')
    cells = {c.name: c for c in expand(load_manifest(write(tmp_path, text)))}
    assert "does not apply int8" in cells["mlp/onnx-int8-opset17"].skip  # onnx declares fp32, fp16
    assert cells["mlp/openvino-int8-opset17"].skip is None
    assert cells["mlp/onnx-fp32-opset17"].skip is None


def test_backend_options_reach_only_the_targets_that_declare_them(tmp_path):
    text = GOOD.replace("atol = 0.001", 'calibration = "calib.npz"')
    (tmp_path / "calib.npz").write_bytes(b"not read here")
    cells = {c.name: c for c in expand(load_manifest(write(tmp_path, text)))}
    assert "calibration" not in cells["mlp/onnx-fp32-opset17"].options
    assert cells["mlp/openvino-fp32-opset17"].options["calibration"] == str((tmp_path / "calib.npz").resolve())


def test_key_follows_the_factory_file_and_the_options(tmp_path):
    manifest = write(tmp_path, GOOD)
    cells = expand(load_manifest(manifest))
    keys = cell_keys(cells)
    assert len(set(keys)) == len(cells)  # target, precision and options all enter the key
    assert keys == cell_keys(expand(load_manifest(manifest)))  # stable
    assert cell_key(cells[0]) == keys[0]

    write(tmp_path, GOOD, FACTORY.replace("(3, 4)", "(3, 5)"))  # the factory's code changed
    assert cell_keys(expand(load_manifest(manifest)))[0] != keys[0]
    write(tmp_path, GOOD.replace("atol = 0.001", "atol = 0.002"))  # an option changed, the file as before
    changed = cell_keys(expand(load_manifest(manifest)))
    assert changed[0] != keys[0]
    write(tmp_path, GOOD)
    assert cell_keys(expand(load_manifest(manifest))) == keys


def test_key_covers_every_file_of_a_model_folder(tmp_path):
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"1")
    cell = Cell("m", "onnx", "fp32", None, str(folder), {})
    before = cell_key(cell)
    (folder / "sub").mkdir()
    (folder / "sub" / "b.bin").write_bytes(b"2")
    assert cell_key(cell) != before


def test_reusable_takes_only_passed_records_whose_key_and_report_match(tmp_path):
    cells = [Cell("m", "onnx", p, 17, "x.py:f", {}, key=f"k{p}") for p in ("fp32", "fp16")]
    cells.append(Cell("m", "openvino", "fp32", 17, "x.py:f", {}, key="kov"))
    for cell in cells:
        (tmp_path / cell.name).mkdir(parents=True)
        (tmp_path / cell.name / "report.json").write_text("{}")
    records = [{"name": cells[0].name, "status": "passed", "key": "kfp32", "report": f"{cells[0].name}/report.json"},
               {"name": cells[1].name, "status": "passed", "key": "old", "report": f"{cells[1].name}/report.json"},
               {"name": cells[2].name, "status": "failed", "key": "kov", "report": f"{cells[2].name}/report.json"}]
    (tmp_path / "matrix.json").write_text(json.dumps({"cells": records}))
    found = reusable(tmp_path, cells)
    assert list(found) == [cells[0].name] and found[cells[0].name]["cached"] is True
    (tmp_path / cells[0].name / "report.json").unlink()  # its report is gone: run it again
    assert reusable(tmp_path, cells) == {}
    (tmp_path / "matrix.json").write_text("not json")
    assert reusable(tmp_path, cells) == {}
    # a cell's own record (kept in its folder) serves when matrix.json does not list it (a run with --only)
    save_record(tmp_path, {**records[1], "key": "kfp16"})
    assert list(reusable(tmp_path, cells)) == [cells[1].name]


def test_values_a_cell_cannot_carry_are_refused(tmp_path):
    text = GOOD.replace("seed = 3", "atol = 1979-05-27")  # TOML dates parse, but no convert option takes one
    message = refusal(tmp_path, text)
    assert "atol" in message and f"matrix.toml:{line_of(text, '1979-05-27')}:" in message


def test_a_target_that_is_not_installed_is_skipped(tmp_path, monkeypatch):
    from onnxbridge.errors import UnavailableError
    from onnxbridge.plugins import BACKENDS

    real = BACKENDS.load

    def load(name):
        if name == "openvino":
            raise UnavailableError("backend 'openvino' needs openvino, not installed")
        return real(name)

    monkeypatch.setattr(BACKENDS, "load", load)
    cells = expand(load_manifest(write(tmp_path, GOOD)))
    skips = {c.name: c.skip for c in cells}
    assert skips["mlp/openvino-fp32-opset17"].startswith("backend openvino unavailable: ")
    assert "needs openvino" in skips["mlp/openvino-fp16-opset17"]
    assert skips["mlp/onnx-fp32-opset17"] is None
