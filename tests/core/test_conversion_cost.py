"""Conversion cost: the chunked comparison gives the metrics of the float64 formula; validation off runs no
reference forward; a large (external-data) conversion's weights are moved to the output, never copied; the source
model's weights are let go before the onnxruntime session is opened."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from onnxbridge import compare as comparing
from tests.helpers.extras import requires


def _old_compare(ref: np.ndarray, got: np.ndarray, *, atol: float, rtol: float) -> dict:
    """The comparison as it was (whole arrays widened to float64): the oracle for the chunked one."""
    r, g = ref.astype(np.float64), got.astype(np.float64)
    nan_r, nan_g = np.isnan(r), np.isnan(g)
    inf_mismatch = (np.isinf(r) != np.isinf(g)) | (np.isinf(r) & np.isinf(g) & (np.sign(r) != np.sign(g)))
    nan_mismatch = int((nan_r != nan_g).sum())
    both = ~(nan_r | nan_g | np.isinf(r) | np.isinf(g))
    diff = np.abs(r - g)[both]
    mag = np.abs(r)[both]
    out_of_tol = int((diff > atol + rtol * mag).sum()) + nan_mismatch + int(inf_mismatch.sum())
    rf, gf = r[both].ravel(), g[both].ravel()
    denom = float(np.linalg.norm(rf) * np.linalg.norm(gf))
    edges = [*comparing.HISTOGRAM_EDGES, np.inf]
    out = {
        "max_abs": float(diff.max()) if diff.size else 0.0,
        "mean_abs": float(diff.mean()) if diff.size else 0.0,
        "max_rel": float((diff / np.maximum(mag, 1e-12)).max()) if diff.size else 0.0,
        "cosine": float(rf @ gf / denom) if denom > 0 else (1.0 if np.array_equal(rf, gf) else 0.0),
        "mismatch_fraction": out_of_tol / max(int(r.size), 1),
        "nan_mismatch": nan_mismatch,
        "nonfinite_reference": int((~np.isfinite(r)).sum()),
        "nonfinite_output": int((~np.isfinite(g)).sum()),
        "required_atol": float(np.maximum(diff - rtol * mag, 0).max()) if diff.size else 0.0,
        "error_histogram": [int(c) for c in np.histogram(diff, bins=edges)[0]] if diff.size else
        [0] * len(comparing.HISTOGRAM_EDGES),
        "passed": out_of_tol == 0,
    }
    if r.ndim == 2 and r.shape[1] >= 2 and r.shape[0]:
        out["top1_agreement"] = comparing.top1_agreement(r, g)
        if comparing.topk_agreement(r, g, 5) is not None:
            out["top5_agreement"] = comparing.topk_agreement(r, g, 5)
    reason = comparing.nonfinite_reason(r, g)
    if reason:
        out["reason"] = reason
    return out


def _pair(rng, shape, dtype, noise, specials: float = 0.0, got_dtype=None):
    ref = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 50.0])).astype(dtype)
    got = (ref.astype(np.float64) + rng.standard_normal(shape) * noise).astype(got_dtype or dtype)
    if specials:
        for arr in (ref, got):
            flat = arr.reshape(-1)
            for value in (np.nan, np.inf, -np.inf):
                flat[rng.random(flat.size) < specials / 3] = value
    return ref, got


CASES = [  # (shape, reference dtype, noise, share of NaN/inf, output dtype)
    ((1, 7, 5000), np.float32, 1e-5, 0.0, None),
    ((3, 40000), np.float32, 1e-3, 0.0, None),  # [batch, classes]: top-1/top-5 too
    ((70001,), np.float16, 1e-2, 0.0, None),
    ((2, 33000), np.float16, 1e-3, 0.01, None),
    ((4, 9000), np.float64, 1e-9, 0.002, None),
    ((50, 1300), np.float32, 1e-4, 0.05, np.float16),  # fp16 output against an fp32 reference
    ((66000,), np.float32, 0.0, 0.0, None),  # identical
    ((40000,), np.float32, 10.0, 0.9, None),  # mostly non-finite
    ((0, 3), np.float32, 1e-3, 0.0, None),
    ((), np.float32, 1e-3, 0.0, None),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("chunk", [comparing.CHUNK, 1000])
def test_chunked_metrics_equal_the_float64_formula(case, chunk, monkeypatch):
    monkeypatch.setattr(comparing, "CHUNK", chunk)
    shape, dtype, noise, specials, got_dtype = CASES[case]
    rng = np.random.default_rng(case)
    ref, got = _pair(rng, shape, dtype, noise, specials, got_dtype)
    for atol, rtol in ((1e-4, 1e-3), (1e-2, 1e-2), (0.0, 0.0)):
        new = comparing.compare(ref, got, atol=atol, rtol=rtol)
        want = _old_compare(ref, got, atol=atol, rtol=rtol)
        for key, value in want.items():
            if key in ("mean_abs", "cosine"):  # sums: float64 accumulators, summed in another order
                assert math.isclose(new[key], value, rel_tol=1e-12, abs_tol=1e-15), (key, new[key], value)
            else:
                assert new[key] == value, (key, new[key], value)
        assert set(new) - set(want) == {"shape", "reference_shape", "dtype", "reference_dtype", "kind", "scale",
                                        "rel_rms", "snr_db", "atol", "rtol"}
        _check_power_metrics(ref, got, new)


def _check_power_metrics(ref, got, new) -> None:
    """scale, rel_rms and SNR from the chunks equal the float64 formulas over the values finite on both sides."""
    r, g = np.asarray(ref, np.float64).reshape(-1), np.asarray(got, np.float64).reshape(-1)
    both = np.isfinite(r) & np.isfinite(g)
    err, sig = float(((r[both] - g[both]) ** 2).sum()), float((r[both] ** 2).sum())
    finite_r = np.abs(r[np.isfinite(r)])
    assert new["scale"] == (float(finite_r.max()) if finite_r.size else 0.0)
    if sig > 0 and err > 0:
        assert math.isclose(new["rel_rms"], math.sqrt(err / sig), rel_tol=1e-9)
        assert math.isclose(new["snr_db"], 10 * math.log10(sig / err), rel_tol=1e-9, abs_tol=1e-9)
    elif err == 0:
        assert new["snr_db"] is None and (new["rel_rms"] == 0.0 or sig == 0)


def test_chunked_metrics_on_a_strided_view_and_overflowing_differences():
    rng = np.random.default_rng(7)
    ref = rng.standard_normal((300, 400)).astype(np.float32)[:, ::3]  # not contiguous
    got = ref + np.float32(1e-3)
    assert comparing.compare(ref, got, atol=1e-4, rtol=1e-3)["max_abs"] == \
        _old_compare(ref, got, atol=1e-4, rtol=1e-3)["max_abs"]
    big = np.array([1e308, -1e308, 1.0])  # |a - b| overflows to inf: the last histogram bin, as before
    new, old = comparing.compare(big, -big, atol=0, rtol=0), _old_compare(big, -big, atol=0, rtol=0)
    assert new["error_histogram"] == old["error_histogram"] and new["max_abs"] == old["max_abs"] == math.inf


def test_comparison_makes_no_full_size_float64_copy():
    """The peak extra memory of comparing [1, 128, 50257] fp32 logits stays far below one float64 copy."""
    import tracemalloc

    rng = np.random.default_rng(0)
    ref = rng.standard_normal((1, 128, 50257)).astype(np.float32)
    got = ref + np.float32(1e-5)
    tracemalloc.start()
    try:
        comparing.compare(ref, got, atol=1e-4, rtol=1e-3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < ref.nbytes / 8, f"comparison allocated {peak} bytes at its peak for {ref.nbytes} bytes of output"


# --- validation off: no reference forward -------------------------------------------------------------------------

def _counting_module():
    """A module, its sample and ``calls``, whose ``calls[0]`` counts the forward calls (outside the module:
    torch.export undoes changes to a module's own attributes)."""
    import torch

    calls = [0]

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            calls[0] += 1
            return torch.relu(self.fc(x))

    torch.manual_seed(0)
    return Counting().eval(), (torch.randn(2, 8),), calls


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.slow
@requires("torch")
def test_validation_off_runs_no_reference_forward(exporter, tmp_path):
    """The module's forward runs as often as the bare exporter runs it, and once more per sample with validation."""
    import torch

    import onnxbridge

    bare, args, bare_calls = _counting_module()
    torch.onnx.export(bare, args, str(tmp_path / "bare.onnx"), dynamo=exporter == "dynamo")
    by_exporter = bare_calls[0]
    assert by_exporter >= 1

    off, args, off_calls = _counting_module()
    result = onnxbridge.convert(off, args, output=tmp_path / "off.onnx", exporter=exporter, validate=False)
    assert result.report["status"] == "skipped"
    assert off_calls[0] == by_exporter, f"{off_calls[0] - by_exporter} forward(s) beyond the exporter's own"

    on, args, on_calls = _counting_module()
    result = onnxbridge.convert(on, args, output=tmp_path / "on.onnx", exporter=exporter)
    assert result.report["status"] == "passed"
    assert on_calls[0] == by_exporter + result.report["hops"][0]["samples"]


@requires("torch")
def test_outputs_get_default_names_without_a_reference_forward(tmp_path):
    import onnx
    import torch

    import onnxbridge

    class Two(torch.nn.Module):
        def forward(self, x):
            return x * 2, x  # the second output is the graph input itself: named by an Identity

    result = onnxbridge.convert(Two(), (torch.randn(3),), output=tmp_path / "two.onnx", exporter="torchscript")
    graph = onnx.load(str(tmp_path / "two.onnx")).graph
    assert [o.name for o in graph.output] == ["output_0", "output_1"]
    assert [i.name for i in graph.input] == ["x"]
    assert result.report["status"] == "passed"


@requires("torch")
def test_a_model_failing_on_its_sample_is_still_bad_input(tmp_path):
    import torch

    import onnxbridge
    from onnxbridge.errors import BadInputError

    model, _, _ = _counting_module()
    with pytest.raises(BadInputError, match="fails on inputs"):
        onnxbridge.convert(model, (torch.randn(2, 5),), output=tmp_path / "bad.onnx")


# --- large models: weights linked, not copied; the source's weights let go before onnxruntime --------------------

FACTORY = '''
import torch

def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).eval(), \\
        (torch.randn(2, 256),)
'''


@pytest.mark.slow
@requires("torch")
def test_external_data_is_linked_from_scratch_and_the_source_released_first(tmp_path, monkeypatch):
    import sys
    import weakref

    import onnxbridge
    from onnxbridge import runtime
    from onnxbridge.frontends.pytorch import model as torch_model

    factory = tmp_path / "big.py"
    factory.write_text(FACTORY)
    scratch_inodes: set[int] = set()
    modules: list[weakref.ref] = []
    alive_at_session: list[bool] = []
    export, open_session = torch_model.TorchModel.export, runtime.open

    def spying_export(self, workdir, **kwargs):
        modules.append(weakref.ref(self.module))
        exported = export(self, workdir, **kwargs)
        scratch_inodes.update(f.stat().st_ino for f in Path(workdir).iterdir() if f.is_file())
        return exported

    def spying_open(*args, **kwargs):
        alive_at_session.append(modules[0]() is not None)
        return open_session(*args, **kwargs)

    monkeypatch.setattr(torch_model.TorchModel, "export", spying_export)
    monkeypatch.setattr(runtime, "open", spying_open)
    out = tmp_path / "out" / "big.onnx"
    result = onnxbridge.convert(f"{factory}:build", output=out, exporter="dynamo", external_data=True)
    assert result.report["status"] == "passed", result.report
    data = out.parent / "big.onnx.data"
    assert result.report["artifact"]["external_data"] == ["big.onnx.data"]
    assert data.stat().st_ino in scratch_inodes, "the weights were copied, not moved from the scratch folder"
    assert alive_at_session and not any(alive_at_session), "the torch model was alive beside the onnxruntime session"
    assert not any(n.startswith(".big.onnx") for n in os.listdir(out.parent) if n != ".big.onnx.onnxbridge.lock")
    sys.modules.pop(next((k for k, m in sys.modules.items() if getattr(m, "__file__", None) == str(factory)), ""), None)


def _sparse_model(folder: Path, mb: int):
    """A model y = x + W (W: ``mb`` MiB of zeros in a sparse external file) with an inline 4 KiB bias."""
    from onnx import TensorProto, helper, numpy_helper

    n = mb * 2**20 // 4
    (folder / "w.bin").open("wb").truncate(n * 4)  # sparse: no blocks on disk
    w = helper.make_tensor("w", TensorProto.FLOAT, [n], vals=[])
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "w.bin"), ("offset", "0"), ("length", str(n * 4))):
        e = w.external_data.add()
        e.key, e.value = k, v
    b = numpy_helper.from_array(np.arange(1024, dtype=np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"]), helper.make_node("Slice", ["t", "zero", "end"], ["u"]),
         helper.make_node("Add", ["u", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024])],
        [w, b, numpy_helper.from_array(np.array([0], np.int64), "zero"),
         numpy_helper.from_array(np.array([1024], np.int64), "end")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_save_links_a_movable_sparse_weights_file_and_copies_otherwise(tmp_path):
    import time

    import onnx
    from onnx import numpy_helper

    from onnxbridge.onnxio import load_onnx, save_onnx

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    model = _sparse_model(scratch, 256)
    src = scratch / "w.bin"
    t = time.perf_counter()
    files = save_onnx(model, tmp_path / "m.onnx", base_dir=scratch, external_data=True, movable=True)
    linked_s = time.perf_counter() - t
    data = tmp_path / "m.onnx.data"
    assert files == ["m.onnx.data"]
    assert data.stat().st_ino == src.stat().st_ino and data.stat().st_nlink == 2
    assert data.stat().st_blocks * 512 < 2**20, "the sparse weights were written out, not linked"
    assert linked_s < 2.0
    loaded = load_onnx(tmp_path / "m.onnx", load_external_data=True)
    bias = next(t for t in loaded.graph.initializer if t.name == "b")
    assert np.array_equal(numpy_helper.to_array(bias), np.arange(1024, dtype=np.float32))  # appended after W
    assert model.graph.initializer[0].external_data[0].value == "w.bin"  # the caller's model is not modified

    save_onnx(model, tmp_path / "c.onnx", base_dir=scratch, external_data=True)  # not movable: a copy
    assert (tmp_path / "c.onnx.data").stat().st_ino != src.stat().st_ino
    onnx.checker.check_model(str(tmp_path / "m.onnx"))


@requires("torch")
def test_torchscript_export_is_read_in_place(tmp_path):
    """The exporter's inline file is not parsed for its weights: they are referenced where they lie in it."""
    import onnx
    import torch
    from onnx import numpy_helper

    from onnxbridge.external_data import external_files
    from onnxbridge.inplace import load_in_place
    from onnxbridge.onnxio import load_onnx, save_onnx

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 3))
    path = tmp_path / "ts.onnx"
    torch.onnx.export(module, (torch.randn(2, 64),), str(path), dynamo=False)
    full = onnx.load(str(path))
    skeleton = load_in_place(path)
    assert skeleton.ByteSize() < 4096 < full.ByteSize()
    assert external_files(skeleton) == ["ts.onnx"]
    onnx.load_external_data_for_model(skeleton, str(tmp_path))
    want = {t.name: numpy_helper.to_array(t) for t in full.graph.initializer}
    got = {t.name: numpy_helper.to_array(t) for t in skeleton.graph.initializer}
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)
    assert skeleton.graph.node == full.graph.node and skeleton.graph.output == full.graph.output

    save_onnx(full, tmp_path / "ext.onnx", external_data=True)  # already external: read as it is
    assert load_in_place(tmp_path / "ext.onnx") == load_onnx(tmp_path / "ext.onnx")
