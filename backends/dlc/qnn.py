"""onnxruntime-qnn sessions: the QnnIr backend that serializes a DLC, and the x86 HTP simulator that runs the
prepared model on the host (fp16, CPU fallback disabled). ``onnxruntime_qnn`` is imported here only."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from onnxbridge.backends.dlc import HOP_NAME
from onnxbridge.errors import HopSkipped, UnavailableError

EP = "QNNExecutionProvider"
SOC_MODEL = "60"  # the simulated SoC; fp16 on the simulator needs one set
COMPUTE_PRECISION = "fp16"  # the HTP computes float models in fp16
# How far the HTP's fp16 kernels may err beyond fp16 storage rounding (the fp16 emulation's error), measured with
# benchmarks/verdicts.py on 40 zoo models: 0.9-1.13x the emulation's relative RMS error on every model without the
# ops below (ResNets, RegNet, DenseNet, GoogLeNet, VGG, MobileNetV2), up to 36x on models with them, whose HTP kernels
# are approximations (EfficientNet-B0 36x, CoAtNet and ReXNet 23x, DeiT and ViT 6x; BERT 1.0x); a real conversion
# error (EfficientViT-B0's, a Pad the HTP got wrong, now legalized) was 670x. So a model without them keeps the
# default factor, one with them gets 64.
APPROXIMATED = frozenset({"Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Exp", "Erf", "Gelu", "Softmax",
                          "LogSoftmax", "LayerNormalization", "Swish", "Mish", "Softplus", "Elu", "Selu"})
EMULATION_FACTOR = 64.0
INSTALL = "pip install 'onnxbridge[qnn]' (onnxruntime-qnn from PyPI; Qualcomm's libraries are not redistributed)"


def qnn_module():
    """``onnxruntime_qnn``, its EP registered with onnxruntime once per process."""
    import onnxruntime as ort

    try:
        import onnxruntime_qnn
    except ImportError as exc:
        raise UnavailableError(f"onnxruntime-qnn is not importable ({exc}); the DLC backend needs it to write a "
                               "DLC without the QAIRT SDK", hint=INSTALL) from None
    if not any(d.ep_name == EP for d in ort.get_ep_devices()):
        try:
            ort.register_execution_provider_library(EP, onnxruntime_qnn.get_library_path())
        except Exception as exc:
            raise UnavailableError(f"onnxruntime {ort.__version__} cannot load the QNN plugin: "
                                   f"{' '.join(str(exc).split())[:300]}",
                                   hint="onnxruntime-qnn needs onnxruntime >= 1.24.2") from None
    return onnxruntime_qnn


def version() -> str | None:
    from onnxbridge.registry import dist_version

    return dist_version("onnxruntime-qnn")


@contextlib.contextmanager
def quiet() -> Iterator[list[str]]:
    """Send the QNN libraries' own prints (stdout and stderr, at the fd level) to a buffer; the list it yields
    holds their lines afterwards, for error messages."""
    lines: list[str] = []
    saved = []
    with tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            for fd in (1, 2):
                saved.append((fd, os.dup(fd)))
                os.dup2(sink.fileno(), fd)
        except OSError:  # no real fds (embedded interpreters): leave them be
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)
            saved = []
        try:
            yield lines
        finally:
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            lines.extend(ln.strip() for ln in sink.read().decode("utf-8", "replace").splitlines() if ln.strip())


def _why(lines: list[str]) -> str:
    errors = [ln for ln in lines if (" [E:" in ln or "ERROR" in ln.upper()) and "power config" not in ln]
    return errors[-1][:300] if errors else ""


def _options(so, opts: dict) -> None:
    import onnxruntime as ort

    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP]
    so.add_provider_for_devices(devices, opts)


def dump_dlc(model_path: Path, out_dir: Path) -> list[Path]:
    """Serialize the QNN graph(s) of ``model_path`` with libQnnIr.so into ``out_dir``: one .dlc per partition.

    The model is handed to onnxruntime as bytes: onnxruntime names the QNN graph after a hash of the model's path
    when it has one, of its inputs and node outputs when not, so from bytes the same model always serializes to
    the same ``model`` / ``model.params`` / ``model.params.bin`` (what ``structure.compare`` relies on)."""
    import onnxruntime as ort

    oq = qnn_module()
    out_dir.mkdir(parents=True, exist_ok=True)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    _options(so, {"backend_path": oq.get_qnn_htp_path(), "dump_qnn_ir_dlc": "1", "dump_qnn_ir_dlc_dir": str(out_dir),
                  "qnn_ir_backend_path": str(Path(oq.get_library_path()).parent / "libQnnIr.so")})
    with quiet() as lines:
        try:
            ort.InferenceSession(Path(model_path).read_bytes(), sess_options=so)
        except Exception as exc:  # the dump happens while the session is made; running it is not needed
            if not list(out_dir.glob("*.dlc")):
                from onnxbridge.errors import UnsupportedError

                raise UnsupportedError(f"the QNN execution provider could not serialize the model: "
                                       f"{' '.join(str(exc).split())[:300]}") from None
    if not list(out_dir.glob("*.dlc")) and _why(lines):
        from onnxbridge.errors import UnsupportedError

        raise UnsupportedError(f"the QNN execution provider wrote no DLC: {_why(lines)}")
    return sorted(out_dir.glob("*.dlc"))


def approximated_ops(model_path: Path) -> list[str]:
    """The ops of the model at ``model_path`` whose HTP kernels are approximations (``APPROXIMATED``), sorted."""
    from onnxbridge.inplace import load_in_place
    from onnxbridge.modelwalk import graphs

    model = load_in_place(model_path)
    return sorted({n.op_type for g in graphs(model.graph) for n in g.node} & APPROXIMATED)


class HtpRunner:
    """The prepared model on the x86 HTP simulator: fp16 compute, every node on QNN (CPU fallback disabled).

    Creating it raises HopSkipped with the simulator's reason when the simulator cannot take the model.
    ``compute_precision``: float models are computed in fp16, so the hop is judged against the fp16 emulation of its
    ONNX model, within ``emulation_factor`` times its error (where the model has ops the HTP approximates, its kernels
    err more than fp16 rounding alone: ``APPROXIMATED``);
    ``static_shapes``: the only input shapes it takes. The hop is named for what ran (``hop_name``,
    ``what_ran``); the .dlc itself is checked by structure (``artifact_checked``, ``artifact_check``: the facts of
    ``structure.compare``). ``keep``: an object whose ``cleanup()`` frees the model's folder on ``close``.
    """

    compute_precision = COMPUTE_PRECISION
    emulation_factor: float | None = None  # the default, unless the model has ops the HTP approximates
    hop_name = HOP_NAME
    artifact_checked = "structure"

    def __init__(self, model_path: Path, *, artifact_check: dict | None = None, keep=None):
        import onnxruntime as ort

        self.artifact_check = artifact_check
        self.what_ran = (f"onnxruntime-qnn {version() or '(unknown version)'} x86 HTP simulator on the prepared "
                         "ONNX (fp16 compute, CPU fallback disabled); the .dlc itself was checked by structure")
        self._keep = keep

        oq = qnn_module()
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        _options(so, {"backend_path": oq.get_qnn_htp_path(), "soc_model": SOC_MODEL,
                      "enable_htp_fp16_precision": "1"})
        with quiet() as lines:
            try:
                self.session = ort.InferenceSession(str(model_path), sess_options=so)
            except Exception as exc:
                detail = _why(lines) or " ".join(str(exc).split())[:300]
                raise HopSkipped(f"the HTP simulator cannot run this model: {detail}") from None
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.static_shapes = {i.name: list(i.shape) for i in self.session.get_inputs()}
        approximated = approximated_ops(model_path)
        if approximated:
            self.emulation_factor = EMULATION_FACTOR
            self.what_ran += f"; its {', '.join(approximated)} kernels are approximations (factor {EMULATION_FACTOR:g})"

    def close(self) -> None:
        """Free the session and the folder kept for it."""
        self.session = None
        keep, self._keep = self._keep, None
        if keep is not None:
            keep.cleanup()

    def __call__(self, feeds) -> list:
        import numpy as np

        for name in self.inputs:
            if name in feeds and list(np.shape(feeds[name])) != self.static_shapes[name]:
                raise ValueError(f"the DLC takes {name} at its static shape {self.static_shapes[name]}, "
                                 f"not {list(np.shape(feeds[name]))}")
        with quiet():
            out = self.session.run(None, {n: np.ascontiguousarray(feeds[n]) for n in self.inputs})
        return [np.asarray(o) for o in out]
