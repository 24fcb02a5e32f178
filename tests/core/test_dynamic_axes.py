"""Dynamic axes are really exercised: the second size changes every shape derived from the axes (shape inference
finds the patch grid a 64x64 image makes and grows it to 80, not 65), sources that need a multiple of their patch
or stride run at it (the next size is tried when they refuse one), the report lists the sizes, and axes no second
size could exercise leave the run unpassed."""
from __future__ import annotations

import pytest

import onnxbridge
from onnxbridge.specs import DynamicAxis, Sample, grow, growth_sizes
from tests.conftest import check_report
from tests.helpers.extras import require

MODELS = '''
import torch
import torch.nn.functional as F
from torch import nn


class FrozenGrid(nn.Module):
    """A ViT-like stem: 16x16 patches; the 4x4 position table is resized to the patch grid, whose size int()
    reads, so the export freezes it at 4x4 while torch runs at any multiple of 16."""

    def __init__(self, c=8):
        super().__init__()
        self.patch = nn.Conv2d(3, c, 16, stride=16)
        self.pos = nn.Parameter(torch.randn(1, c, 4, 4))

    def forward(self, x):
        h = self.patch(x)
        pos = F.interpolate(self.pos, size=(int(h.shape[2]), int(h.shape[3])), mode="bilinear", align_corners=False)
        return (h + pos).flatten(2).transpose(1, 2)


class FixedTable(nn.Module):
    """x + a [1, 16, C] position table: torch itself runs only where the patch grid is 4x4."""

    def __init__(self, c=8):
        super().__init__()
        self.patch = nn.Conv2d(3, c, 16, stride=16)
        self.pos = nn.Parameter(torch.randn(1, 16, c))

    def forward(self, x):
        return self.patch(x).flatten(2).transpose(1, 2) + self.pos


class OnlyAt64(nn.Module):
    """Refuses any width but 64 under torch; the export (which skips the check) is dynamic anyway."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        if not torch.onnx.is_in_onnx_export():
            assert x.shape[-1] == 64, "this model takes 64x64 images only"
        return self.conv(x)


class Patches(nn.Module):
    """16x16 patches, then the mean over the grid: correct at any size the source takes, a multiple of ``multiple``."""

    def __init__(self, multiple=16):
        super().__init__()
        self.multiple = multiple
        self.patch = nn.Conv2d(3, 8, 16, stride=16)

    def forward(self, x):
        if not torch.onnx.is_in_onnx_export():
            assert x.shape[-1] % self.multiple == 0 and x.shape[-2] % self.multiple == 0, "size not a multiple"
        return self.patch(x).flatten(2).mean(-1)


class Strided(nn.Module):
    """Two stride-2 convolutions: correct at any size."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.b = nn.Conv2d(4, 4, 3, stride=2, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class Positions(nn.Module):
    """A learned position table of 8 rows, sliced to the sequence: torch runs at any length up to 8."""

    def __init__(self, d=4):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 8, d))

    def forward(self, x):
        return x + self.pos[:, : x.shape[1]]


def _image(size=64):
    return (torch.randn(1, 3, size, size),)


def frozen_grid():
    torch.manual_seed(0)
    return FrozenGrid().eval(), _image()


def fixed_table():
    torch.manual_seed(0)
    return FixedTable().eval(), _image()


def only_at_64():
    torch.manual_seed(0)
    return OnlyAt64().eval(), _image()


def patches():
    torch.manual_seed(0)
    return Patches().eval(), _image()


def patches_of_32():
    torch.manual_seed(0)
    return Patches(32).eval(), _image()


def positions():
    torch.manual_seed(0)
    return Positions().eval(), (torch.randn(2, 8, 4),)


def strided():
    torch.manual_seed(0)
    return Strided().eval(), _image(32)
'''

HW = ["x:2", "x:3"]


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    require("torch")
    path = tmp_path_factory.mktemp("models") / "dynamic_models.py"
    path.write_text(MODELS)
    return str(path)


def _convert(factories, name, tmp_path, dynamic=HW):
    result = onnxbridge.convert(f"{factories}:{name}", output=tmp_path / f"{name}.onnx", dynamic=dynamic,
                                report=tmp_path / "r.json")
    check_report(tmp_path / "r.json")
    return result.report


def test_growth_sizes_keep_power_of_two_divisibility():
    assert growth_sizes(64) == [80, 96, 128, 192]
    assert growth_sizes(224) == [240, 256, 288, 352]
    assert growth_sizes(1) == [2, 3, 5, 9]
    assert growth_sizes(6) == [8, 10, 14, 22]


@pytest.mark.slow
def test_frozen_patch_grid_fails_at_a_size_that_changes_the_grid(factories, tmp_path):
    """65x65 makes the same 4x4 grid as 64x64 (and passed); 80x80 makes 5x5, where the frozen table breaks."""
    rep = _convert(factories, "frozen_grid", tmp_path)
    hop = rep["hops"][0]
    assert rep["status"] == "failed" and hop["status"] == "failed"
    assert hop["dynamic_axes"]["axes"] == HW and hop["dynamic_axes"]["exercised"] is True
    assert hop["dynamic_axes"]["sizes"] == [{"x": [1, 3, 64, 64]}, {"x": [1, 3, 80, 80]}]
    assert {"x": [1, 3, 80, 80]} in rep["inputs"]["samples"] and {"x": [1, 3, 65, 65]} not in rep["inputs"]["samples"]
    assert any("[1, 3, 80, 80]" in e for e in hop["errors"])
    assert "65x65 leaves" in hop["dynamic_axes"]["reason"]


@pytest.mark.slow
def test_shape_inference_picks_80_over_65(factories, tmp_path):
    path = tmp_path / "fg.onnx"
    onnxbridge.convert(f"{factories}:frozen_grid", output=path, dynamic=HW, validate=False)
    import numpy as np

    first = Sample({"x": np.zeros((1, 3, 64, 64), np.float32)})
    axes = [DynamicAxis("x", 2), DynamicAxis("x", 3)]
    inferred = grow(first, axes, path)
    assert [s.shapes()["x"][2:] for s in inferred.candidates] == [[80, 80], [96, 96], [128, 128], [192, 192]]
    assert [s.shapes()["x"][2:] for s in inferred.smaller] == [[48, 48], [63, 63]]  # 3x3 grids
    blind = grow(first, axes)  # no model: the sizes that keep the divisibility, never 65
    assert [s.shapes()["x"][2] for s in blind.candidates] == [80, 96, 128, 192] and "no shape inference" in blind.reason


@pytest.mark.parametrize("name", ["fixed_table", "only_at_64"])
@pytest.mark.slow
def test_axes_the_source_runs_at_no_second_size_are_not_passed(factories, tmp_path, name):
    rep = _convert(factories, name, tmp_path)
    hop = rep["hops"][0]
    assert rep["status"] == "skipped" and hop["status"] == "skipped" and hop["passed"] is False
    assert hop["dynamic_axes"]["exercised"] is False and hop["dynamic_axes"]["sizes"] == [{"x": [1, 3, 64, 64]}]
    assert "x:2, x:3" in hop["skipped_reason"] and "torch does not run at" in hop["skipped_reason"]
    assert rep["inputs"]["samples"] == [{"x": [1, 3, 64, 64]}]
    assert all(o["passed"] for o in hop["outputs"])  # the first size's numbers still shown


@pytest.mark.slow
def test_a_source_that_needs_a_multiple_of_its_patch_passes_at_80(factories, tmp_path):
    rep = _convert(factories, "patches", tmp_path)
    hop = rep["hops"][0]
    assert rep["status"] == "passed" and hop["dynamic_axes"]["exercised"] is True
    assert hop["dynamic_axes"]["sizes"] == [{"x": [1, 3, 64, 64]}, {"x": [1, 3, 80, 80]}]
    assert not any("skipped" in n for n in hop["notes"])


@pytest.mark.slow
def test_a_size_the_source_refuses_is_followed_by_the_next(factories, tmp_path):
    rep = _convert(factories, "patches_of_32", tmp_path)
    axes = rep["hops"][0]["dynamic_axes"]
    assert rep["status"] == "passed" and axes["exercised"] is True
    assert axes["sizes"][1] == {"x": [1, 3, 96, 96]} and "does not run at x 1x3x80x80" in axes["reason"]
    assert rep["inputs"]["samples"] == [{"x": [1, 3, 64, 64]}, {"x": [1, 3, 96, 96]}]


@pytest.mark.slow
def test_correct_dynamic_conv_passes_and_lists_both_sizes(factories, tmp_path):
    rep = _convert(factories, "strided", tmp_path)
    hop = rep["hops"][0]
    assert rep["status"] == "passed" and hop["status"] == "passed" and hop["samples"] == 2
    assert hop["dynamic_axes"]["exercised"] is True
    sizes = hop["dynamic_axes"]["sizes"]
    assert sizes[0] == {"x": [1, 3, 32, 32]} and sizes[1]["x"][2] == sizes[1]["x"][3] > 32
    assert rep["inputs"]["samples"] == sizes


@pytest.mark.slow
def test_no_dynamic_axes_no_record(factories, tmp_path):
    rep = _convert(factories, "strided", tmp_path, dynamic=None)
    assert rep["status"] == "passed" and "dynamic_axes" not in rep["hops"][0]


@pytest.mark.slow
def test_a_sample_at_the_longest_size_the_source_takes_is_checked_at_a_smaller_one(factories, tmp_path):
    """The sample is as long as the position table: no longer sequence runs in torch, a shorter one does."""
    rep = _convert(factories, "positions", tmp_path, dynamic=["x:1:seq"])
    axes = rep["hops"][0]["dynamic_axes"]
    assert rep["status"] == "passed" and axes["exercised"] is True
    assert axes["sizes"] == [{"x": [2, 8, 4]}, {"x": [2, 7, 4]}] and "does not run at x 2x9x4" in axes["reason"]
