"""Real architectures with random weights, for the verdict tests and ``benchmarks/verdicts.py``.

``model(name)`` builds one of ``NAMES`` (torchvision, timm, transformers) seeded, in eval mode, with its sample
inputs; nothing is downloaded (no pretrained weights, transformers models come from configs written here).

"Trained-like" BatchNorm: at their initial statistics (running mean 0, variance 1) BatchNorm layers are identities,
so a randomly initialised network's activations grow or shrink layer after layer, and the logits end up far from the
size a trained network gives (MobileNetV2's are ~1e-9, EfficientNet-B0's ~1e-14). ``model(name)`` therefore sets
every BatchNorm's statistics from its own input on a batch of random data (``CALIBRATION_BATCH`` x the sample's
shape, seeded), one layer after the other in a single eval-mode pass: running mean 0 and running variance the mean
square of its input (one value for all channels), so each BatchNorm brings its input back to unit RMS
(``calibrate_batchnorm`` says why not per-channel statistics from a train-mode pass: that makes random deep networks
chaotic, 30-100x more sensitive to rounding than trained ones). Activations and logits keep a trained-like (unit-ish)
scale and fp16 errors of a trained network's size. ``model(name, calibrate_bn=False)`` keeps the initial statistics.
The affine weight and bias stay at their initial values (1 and 0); the convolution/linear weights are the library's
own initialisation under ``torch.manual_seed(seed)``.

torchvision 0.28.0 on this machine: the wheel is a CUDA build whose compiled ops (``torchvision/_C.so``) do not load
beside the CPU torch 2.13.0, and ``import torchvision`` then fails in ``torchvision/_meta_registrations.py``
(``register_fake("torchvision::nms")``: the operator does not exist). ``register_torchvision_ops()`` defines the
operators torchvision's Python side needs with pure-PyTorch CPU kernels before it is imported: ``nms``/``qnms``
(greedy NMS, as the C++ kernel), ``roi_align`` (torchvision's own pure-PyTorch ``_roi_align``, which
``torchvision.ops.roi_align`` also uses as its fallback), and ``roi_pool``. ``ps_roi_align``, ``ps_roi_pool`` and
``deform_conv2d`` are not defined (no model in ``torchvision.models`` uses them); calling them raises.
"""
from __future__ import annotations

import contextlib
import importlib.util
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

IMAGE = (1, 3, 64, 64)  # the vision models' sample input
TOKENS = 16  # the token models' sequence length
VOCAB = 256
CALIBRATION_BATCH = 8

_LIB = None  # the torch.library.Library that defines the torchvision operators (kept alive: it owns them)


# ---------------------------------------------------------------------------------------------------------------------
# torchvision's operators, in pure PyTorch


def _nms(dets, scores, iou_threshold: float):
    """Greedy non-maximum suppression as torchvision's CPU kernel: boxes (x1, y1, x2, y2) in decreasing score order;
    a box is dropped when its IoU with a kept box is > ``iou_threshold``. Returns the kept indices (int64)."""
    import torch

    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=dets.device)
    dets = dets.float() if not dets.is_floating_point() else dets
    x1, y1, x2, y2 = dets.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = torch.sort(scores.float() if not scores.is_floating_point() else scores, descending=True,
                       stable=True).indices
    suppressed = torch.zeros(dets.shape[0], dtype=torch.bool, device=dets.device)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        xx1 = torch.maximum(x1[i], x1)
        yy1 = torch.maximum(y1[i], y1)
        xx2 = torch.minimum(x2[i], x2)
        yy2 = torch.minimum(y2[i], y2)
        inter = (xx2 - xx1).clamp(min=0) * (yy2 - yy1).clamp(min=0)
        iou = inter / (areas[i] + areas - inter)
        suppressed |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.long, device=dets.device)


def _roi_align(input, rois, spatial_scale: float, pooled_height: int, pooled_width: int, sampling_ratio: int,
               aligned: bool):
    from torchvision.ops.roi_align import _roi_align as pure

    return pure(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)


def _roi_align_fake(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    return input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))


def _roi_pool(input, rois, spatial_scale: float, pooled_height: int, pooled_width: int):
    """Max pooling over each RoI's bins, as torchvision's CPU kernel (integer bin edges, empty bins give 0 and
    argmax -1). Returns (output, argmax)."""
    import torch

    n_rois, channels = rois.shape[0], input.shape[1]
    height, width = input.shape[2], input.shape[3]
    out = input.new_zeros((n_rois, channels, pooled_height, pooled_width))
    argmax = torch.full((n_rois, channels, pooled_height, pooled_width), -1, dtype=torch.int32)
    for r in range(n_rois):
        b = int(rois[r, 0])
        start_w, start_h = round(float(rois[r, 1]) * spatial_scale), round(float(rois[r, 2]) * spatial_scale)
        end_w, end_h = round(float(rois[r, 3]) * spatial_scale), round(float(rois[r, 4]) * spatial_scale)
        bin_h = max(end_h - start_h + 1, 1) / pooled_height
        bin_w = max(end_w - start_w + 1, 1) / pooled_width
        for ph in range(pooled_height):
            hs = min(max(math.floor(ph * bin_h) + start_h, 0), height)
            he = min(max(math.ceil((ph + 1) * bin_h) + start_h, 0), height)
            for pw in range(pooled_width):
                ws = min(max(math.floor(pw * bin_w) + start_w, 0), width)
                we = min(max(math.ceil((pw + 1) * bin_w) + start_w, 0), width)
                if he <= hs or we <= ws:
                    continue
                patch = input[b, :, hs:he, ws:we].reshape(channels, -1)
                value, index = patch.max(dim=1)
                out[r, :, ph, pw] = value
                argmax[r, :, ph, pw] = ((index // (we - ws) + hs) * width + index % (we - ws) + ws).int()
    return out, argmax


def _roi_pool_fake(input, rois, spatial_scale, pooled_height, pooled_width):
    import torch

    shape = (rois.size(0), input.size(1), pooled_height, pooled_width)
    return input.new_empty(shape), input.new_empty(shape, dtype=torch.int32)


def register_torchvision_ops() -> None:
    """Make ``import torchvision`` work here (see the module's docstring). Idempotent; does nothing where
    torchvision's compiled operators load (or are already defined)."""
    global _LIB
    import torch

    if _LIB is not None:
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return
    try:  # defined already (torchvision's compiled library loaded)
        torch.ops.torchvision.nms.default
        return
    except (AttributeError, RuntimeError):
        pass
    try:  # does the compiled library load here? (then it defines everything)
        torch.ops.load_library(str(Path(spec.origin).parent / "_C.so"))
        return
    except (OSError, RuntimeError):
        pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
               "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")
    lib.define("roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
               "SymInt pooled_width) -> (Tensor, Tensor)")
    lib.impl("nms", _nms, "CPU")
    lib.impl("qnms", _nms, "CPU")
    lib.impl("roi_align", _roi_align, "CPU")
    lib.impl("roi_pool", _roi_pool, "CPU")
    # nms/qnms get their fake (meta) kernels from torchvision's _meta_registrations on import; the others register
    # theirs only when the compiled library loaded, so they are given here
    torch.library.register_fake("torchvision::roi_align", _roi_align_fake, lib=lib)
    torch.library.register_fake("torchvision::roi_pool", _roi_pool_fake, lib=lib)
    _LIB = lib
    import torchvision.extension

    torchvision.extension._has_ops = lambda: True  # nms/roi_pool check it before calling the operator
    import torchvision  # noqa: F401  (now importable)


# ---------------------------------------------------------------------------------------------------------------------
# the zoo


@dataclass(frozen=True)
class Entry:
    name: str
    library: str  # torchvision | timm | transformers
    build: Callable[[], Any]  # -> nn.Module (random weights)
    inputs: str = "image"  # image (1x3x64x64) | tokens (1x16 int64 ids) | whisper (1x16x64 log-mel features)


def _tv(fn: str, **kw) -> Callable[[], Any]:
    def build():
        register_torchvision_ops()
        import torchvision.models as tvm
        import torchvision.models.segmentation as seg

        ctor = getattr(tvm, fn, None) or getattr(seg, fn)
        return ctor(weights=None, **kw)
    return build


def _timm(fn: str, **kw) -> Callable[[], Any]:
    def build():
        register_torchvision_ops()  # timm imports torchvision where it is installed
        import timm

        return timm.create_model(fn, pretrained=False, **kw)
    return build


class _Main:
    """An HF model whose forward takes the inputs by name and returns its main tensor (``logits`` or
    ``last_hidden_state``), so the exporters see one output."""

    @staticmethod
    def wrap(inner, key: str, arg: str = "input_ids"):
        import torch

        class Main(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                out = self.inner(**{arg: x}, return_dict=True)
                return out[key]

        Main.__name__ = type(inner).__name__
        return Main()


def _hf(cls: str, config: str, key: str, arg: str = "input_ids", **cfg) -> Callable[[], Any]:
    def build():
        register_torchvision_ops()  # transformers imports torchvision where it is installed
        import transformers

        conf = getattr(transformers, config)(**cfg)
        if hasattr(conf, "_attn_implementation"):
            conf._attn_implementation = "eager"
        inner = getattr(transformers, cls)(conf)
        return _Main.wrap(inner, key, arg)
    return build


_SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB,
              max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

ENTRIES: list[Entry] = [
    # torchvision classification
    Entry("resnet18", "torchvision", _tv("resnet18")),
    Entry("resnet50", "torchvision", _tv("resnet50")),
    Entry("mobilenet_v2", "torchvision", _tv("mobilenet_v2")),
    Entry("mobilenet_v3_small", "torchvision", _tv("mobilenet_v3_small")),
    Entry("efficientnet_b0", "torchvision", _tv("efficientnet_b0")),
    Entry("regnet_x_400mf", "torchvision", _tv("regnet_x_400mf")),
    Entry("densenet121", "torchvision", _tv("densenet121")),
    Entry("googlenet", "torchvision", _tv("googlenet", aux_logits=False, init_weights=True)),
    Entry("mnasnet0_5", "torchvision", _tv("mnasnet0_5")),
    Entry("shufflenet_v2_x0_5", "torchvision", _tv("shufflenet_v2_x0_5")),
    Entry("squeezenet1_0", "torchvision", _tv("squeezenet1_0")),
    Entry("convnext_tiny", "torchvision", _tv("convnext_tiny")),
    Entry("resnext50_32x4d", "torchvision", _tv("resnext50_32x4d")),
    Entry("vgg11_bn", "torchvision", _tv("vgg11_bn")),
    Entry("swin_t", "torchvision", _tv("swin_t")),
    # torchvision segmentation
    Entry("lraspp_mobilenet_v3_large", "torchvision", _tv("lraspp_mobilenet_v3_large", weights_backbone=None)),
    Entry("fcn_resnet50", "torchvision", _tv("fcn_resnet50", weights_backbone=None, aux_loss=False)),
    Entry("deeplabv3_mobilenet_v3_large", "torchvision",
          _tv("deeplabv3_mobilenet_v3_large", weights_backbone=None, aux_loss=False)),
    # timm
    Entry("deit_tiny", "timm", _timm("deit_tiny_patch16_224", img_size=64)),
    Entry("vit_small", "timm", _timm("vit_small_patch16_224", img_size=64)),
    Entry("swin_tiny", "timm", _timm("swin_tiny_patch4_window7_224", img_size=64, window_size=2)),
    Entry("mobilevit_xxs", "timm", _timm("mobilevit_xxs")),
    Entry("ghostnetv2", "timm", _timm("ghostnetv2_100")),
    Entry("efficientvit_b0", "timm", _timm("efficientvit_b0")),
    Entry("mobileone_s0", "timm", _timm("mobileone_s0")),
    Entry("convnextv2_atto", "timm", _timm("convnextv2_atto")),
    Entry("rexnet_100", "timm", _timm("rexnet_100")),
    Entry("levit_128s", "timm", _timm("levit_128s", img_size=64)),
    Entry("mixer_s16", "timm", _timm("mixer_s16_224", img_size=64)),
    Entry("repvgg_a0", "timm", _timm("repvgg_a0")),
    Entry("mobilenetv4_small", "timm", _timm("mobilenetv4_conv_small")),
    Entry("coatnet_0", "timm", _timm("coatnet_nano_rw_224", img_size=64)),
    # transformers
    Entry("bert", "transformers", _hf("BertModel", "BertConfig", "last_hidden_state", **_SMALL), "tokens"),
    Entry("distilbert", "transformers", _hf("DistilBertModel", "DistilBertConfig", "last_hidden_state", dim=64,
                                            n_layers=2, n_heads=4, hidden_dim=128, vocab_size=VOCAB,
                                            max_position_embeddings=64, dropout=0.0, attention_dropout=0.0),
          "tokens"),
    Entry("roberta", "transformers", _hf("RobertaModel", "RobertaConfig", "last_hidden_state",
                                         **{**_SMALL, "max_position_embeddings": 66}), "tokens"),
    Entry("gpt2", "transformers", _hf("GPT2LMHeadModel", "GPT2Config", "logits", n_embd=64, n_layer=2, n_head=4,
                                      vocab_size=VOCAB, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, use_cache=False, bos_token_id=0, eos_token_id=0), "tokens"),
    Entry("t5_encoder", "transformers", _hf("T5EncoderModel", "T5Config", "last_hidden_state", d_model=64, d_kv=16,
                                            d_ff=128, num_layers=2, num_heads=4, vocab_size=VOCAB,
                                            dropout_rate=0.0, use_cache=False), "tokens"),
    Entry("vit_hf", "transformers", _hf("ViTForImageClassification", "ViTConfig", "logits", "pixel_values",
                                        image_size=64, patch_size=16, num_labels=10,
                                        **{k: v for k, v in _SMALL.items()
                                           if k not in ("vocab_size", "max_position_embeddings")})),
    Entry("whisper_encoder", "transformers", _hf("WhisperModel", "WhisperConfig", "last_hidden_state",
                                                 "input_features", d_model=64, encoder_layers=2,
                                                 decoder_layers=1, encoder_attention_heads=4,
                                                 decoder_attention_heads=4, encoder_ffn_dim=128,
                                                 decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32,
                                                 max_target_positions=32, vocab_size=VOCAB, dropout=0.0,
                                                 pad_token_id=0, bos_token_id=0, eos_token_id=0,
                                                 decoder_start_token_id=1),
          "whisper"),
    Entry("bert_classifier", "transformers", _hf("BertForSequenceClassification", "BertConfig", "logits",
                                                 num_labels=5, **_SMALL), "tokens"),
    Entry("albert", "transformers", _hf("AlbertModel", "AlbertConfig", "last_hidden_state", embedding_size=32,
                                        **_SMALL), "tokens"),
]
NAMES = [e.name for e in ENTRIES]
_BY_NAME = {e.name: e for e in ENTRIES}


def entry(name: str) -> Entry:
    if name not in _BY_NAME:
        raise KeyError(f"unknown zoo model '{name}'; known: {', '.join(NAMES)}")
    return _BY_NAME[name]


def _whisper_encoder(model):
    """WhisperModel -> its encoder alone (the wrapper keeps one output)."""
    model.inner = model.inner.get_encoder()
    return model


def sample(name: str, seed: int = 0, batch: int = 1):
    """The sample inputs (a tuple of tensors) for ``name``."""
    import torch

    e = entry(name)
    g = torch.Generator().manual_seed(seed + 1)
    if e.inputs == "tokens":
        return (torch.randint(1, VOCAB, (batch, TOKENS), generator=g),)
    if e.inputs == "whisper":
        return (torch.randn(batch, 16, 64, generator=g),)
    return (torch.randn(batch, *IMAGE[1:], generator=g),)


def _no_zero_weights(module) -> int:
    """Give a weight matrix or kernel initialised to all zeros (timm zero-initialises some heads, e.g. MLP-Mixer's)
    small random values (normal, std 0.02), so the output is not identically zero. Returns how many it changed."""
    import torch

    changed = 0
    with torch.no_grad():
        for m in module.modules():
            w = getattr(m, "weight", None)
            if isinstance(w, torch.Tensor) and w.dim() >= 2 and not w.any():
                w.normal_(0.0, 0.02)
                changed += 1
    return changed


def calibrate_batchnorm(module, inputs) -> int:
    """Set every BatchNorm's running statistics so that it scales its input to unit RMS on ``inputs``: in one
    eval-mode forward pass, right before each BatchNorm runs, its running mean becomes 0 and its running variance
    (every channel) the mean square of its input over the batch, the spatial positions and the channels. Returns
    how many it set.

    Why one scalar per layer and no mean subtraction: with per-channel statistics (a train-mode pass) a randomly
    initialised deep network becomes chaotic (whitening every channel of random features amplifies perturbations
    layer after layer): a ResNet-50's fp32 rounding grows to rel. RMS 4e-5 and fp16's to 7e-2 on the logits, where a
    trained ResNet-50 shows ~1e-3 at fp16. Scaling each layer back to unit RMS keeps the logits at O(1) like a trained
    network's and its sensitivity to rounding like a trained network's (fp16: ~1e-3 rel. RMS on ResNet-18/50,
    RegNet, DenseNet, MobileNetV2)."""
    import torch

    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return 0

    def scale_to_unit(bn, args):
        x = args[0].detach().double()
        bn.running_mean.zero_()
        bn.running_var.fill_(max(float(x.pow(2).mean()), 1e-12))

    module.eval()
    hooks = [m.register_forward_pre_hook(scale_to_unit) for m in norms]
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return len(norms)


def model(name: str, *, seed: int = 0, calibrate_bn: bool = True):
    """(model, sample_inputs) for zoo model ``name``: random weights under ``torch.manual_seed(seed)`` (an all-zero
    weight matrix re-drawn, see ``_no_zero_weights``), BatchNorm statistics set to trained-like scale (unless
    ``calibrate_bn=False``: the library's initial statistics), eval mode, gradients off."""
    import torch

    e = entry(name)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = e.build()
    if e.inputs == "whisper":
        m = _whisper_encoder(m)
    _no_zero_weights(m)
    m.eval()
    if calibrate_bn:
        calibrate_batchnorm(m, sample(name, seed=seed + 100, batch=CALIBRATION_BATCH))
    for p in m.parameters():
        p.requires_grad_(False)
    return m, sample(name, seed=seed)


def factory(name: str, **kw) -> Callable[[], Any]:
    """A zero-argument callable returning ``model(name, **kw)`` (a fresh model each call)."""
    return lambda: model(name, **kw)


# ---------------------------------------------------------------------------------------------------------------------
# planted bugs: mutations of the exported ONNX graph
#
# ``planted(mutation)`` wraps ``onnxbridge.builder.finalize`` (and ``onnxbridge.external_data.detach_weights``, to learn
# where the exporter's weights were put) in this process: the finalized model is mutated before it is written, so the
# bug is in the ONNX model and every artifact built from it (fp16 model, OpenVINO IR, Core ML package, DLC), never in
# the source. The mutated model's weights are all inline (small models only); the exporter's own copy, which the opset
# adapters' hop compares against, is untouched.
#
# The exporters here fold an eval-mode BatchNorm into the Conv before it (W' = W * g / sqrt(v + eps), b' = (b - m) * g /
# sqrt(v + eps) + beta). With the affine parameters at their initial values (g = 1, beta = 0, as every zoo model has),
# "the BatchNorm's scale g x f" is exactly "that Conv's weight and bias x f", and "eps x k" is a per-channel factor
# sqrt(v + eps) / sqrt(v + k * eps) on them, computed from the source model's running variance.


class Mutation:
    """A named change to an ONNX graph: ``apply(model)`` changes ``model`` in place and returns a one-line account
    of what it changed (raises ``LookupError`` when the graph has nothing it applies to)."""

    def __init__(self, name: str, fn: Callable[[Any], str]):
        self.name, self.fn = name, fn

    def apply(self, model) -> str:
        return self.fn(model)

    def __repr__(self) -> str:
        return f"Mutation({self.name})"


class _Graph:
    """Lookups on a finalized model: the constant behind a node input (initializer, Constant node, through Identity
    nodes), and writing a new value for it."""

    def __init__(self, model):
        self.model = model
        g = model.graph
        self.inits = {t.name: t for t in g.initializer}
        self.producer = {o: n for n in g.node for o in n.output}
        self.consumers: dict[str, list] = {}
        for n in g.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)

    def const_source(self, name: str):
        """The TensorProto holding the constant ``name`` (following Identity), or None."""
        seen = 0
        while seen < 16:
            if name in self.inits:
                return self.inits[name]
            node = self.producer.get(name)
            if node is None:
                return None
            if node.op_type == "Identity":
                name = node.input[0]
                seen += 1
                continue
            if node.op_type == "Constant":
                for a in node.attribute:
                    if a.name == "value":
                        return a.t
            return None
        return None

    def get(self, name: str):
        from onnx import numpy_helper

        t = self.const_source(name)
        return None if t is None else numpy_helper.to_array(t)

    def put(self, name: str, array) -> None:
        from onnx import numpy_helper

        t = self.const_source(name)
        new = numpy_helper.from_array(array.astype(numpy_helper.to_array(t).dtype), t.name)
        t.CopyFrom(new)

    def nodes(self, *ops: str) -> list:
        return [n for n in self.model.graph.node if n.op_type in ops]

    def attr(self, node, name: str, default=None):
        from onnx import helper

        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def set_attr(self, node, name: str, value) -> None:
        from onnx import helper

        for i, a in enumerate(node.attribute):
            if a.name == name:
                del node.attribute[i]
                break
        node.attribute.append(helper.make_attribute(name, value))

    def rank(self, name: str) -> int | None:
        for v in (*self.model.graph.value_info, *self.model.graph.output, *self.model.graph.input):
            if v.name == name and v.type.tensor_type.HasField("shape"):
                return len(v.type.tensor_type.shape.dim)
        return None


def _pick(items: list, at: float):
    """The item at fraction ``at`` of the list (0: first, 1: last)."""
    if not items:
        raise LookupError("nothing to apply to")
    return items[min(len(items) - 1, max(0, round(at * (len(items) - 1))))]


def _weighted(g: _Graph, ops=("Conv",)) -> list:
    """Nodes of ``ops`` whose weight (input 1) is a constant."""
    return [n for n in g.nodes(*ops) if len(n.input) > 1 and g.const_source(n.input[1]) is not None]


def scale_weight(factor: float, op: str = "Conv", at: float = 1.0, with_bias: bool = False) -> Mutation:
    """One layer's weight x ``factor``: the ``op`` node (Conv, or "linear" for Gemm/MatMul with a constant weight)
    at fraction ``at`` of the graph's such nodes (1.0: the last, e.g. the classifier). ``with_bias``: its bias too
    (a folded BatchNorm's scale, see above)."""
    ops = ("Gemm", "MatMul") if op == "linear" else (op,)

    def fn(model):
        g = _Graph(model)
        n = _pick(_weighted(g, ops), at)
        g.put(n.input[1], g.get(n.input[1]) * factor)
        what = f"{n.op_type} {n.name}: weight x{factor:g}"
        if with_bias and len(n.input) > 2 and g.const_source(n.input[2]) is not None:
            g.put(n.input[2], g.get(n.input[2]) * factor)
            what += " and bias"
        return what
    return Mutation(f"{op} weight x{factor:g}", fn)


def bn_scale(factor: float = 1.05, at: float = 0.66) -> Mutation:
    """One BatchNorm's scale x ``factor``: a BatchNormalization node's scale where the graph has them, else (folded)
    the Conv at fraction ``at``'s weight and bias."""
    def fn(model):
        g = _Graph(model)
        bns = [n for n in g.nodes("BatchNormalization") if g.const_source(n.input[1]) is not None]
        if bns:
            n = _pick(bns, at)
            g.put(n.input[1], g.get(n.input[1]) * factor)
            return f"BatchNormalization {n.name}: scale x{factor:g}"
        convs = [n for n in _weighted(g) if len(n.input) > 2]
        n = _pick(convs, at)
        g.put(n.input[1], g.get(n.input[1]) * factor)
        g.put(n.input[2], g.get(n.input[2]) * factor)
        return f"Conv {n.name} (a folded BatchNorm): weight and bias x{factor:g}"
    return Mutation(f"BatchNorm scale x{factor:g}", fn)


def swap_first_channels(a: int = 0, b: int = 1) -> Mutation:
    """The first Conv's input channels ``a`` and ``b`` swapped (its weight's axis 1)."""
    def fn(model):
        g = _Graph(model)
        n = _pick(_weighted(g), 0.0)
        w = g.get(n.input[1]).copy()
        w[:, [a, b]] = w[:, [b, a]]
        g.put(n.input[1], w)
        return f"Conv {n.name}: input channels {a} and {b} swapped"
    return Mutation("first-layer channels swapped", fn)


def norm_eps(factor: float = 1000.0, torch_model=None) -> Mutation:
    """The last normalization's epsilon x ``factor``: a LayerNormalization / BatchNormalization /
    InstanceNormalization / GroupNormalization node's ``epsilon``, else (a BatchNorm folded into the last Conv) the
    equivalent per-channel factor on that Conv, from ``torch_model``'s last BatchNorm."""
    def fn(model):
        import numpy as np

        g = _Graph(model)
        norms = g.nodes("LayerNormalization", "BatchNormalization", "InstanceNormalization", "GroupNormalization")
        if norms:
            n = norms[-1]
            eps = g.attr(n, "epsilon", 1e-5)
            g.set_attr(n, "epsilon", float(eps * factor))
            return f"{n.op_type} {n.name}: epsilon {eps:.3g} -> {eps * factor:.3g}"
        if torch_model is None:
            raise LookupError("no normalization node, and no source model to find a folded BatchNorm's variance")
        import torch

        bn = [m for m in torch_model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)][-1]
        var, eps = bn.running_var.detach().double().numpy(), bn.eps
        k = np.sqrt(var + eps) / np.sqrt(var + eps * factor)
        convs = [n for n in _weighted(g) if len(n.input) > 2 and g.get(n.input[1]).shape[0] == var.shape[0]]
        n = _pick(convs, 1.0)
        w, bias = g.get(n.input[1]), g.get(n.input[2])
        g.put(n.input[1], w * k.reshape(-1, *([1] * (w.ndim - 1))))
        g.put(n.input[2], bias * k)  # beta = 0 (initial): b' scales with g / sqrt(v + eps)
        return (f"Conv {n.name} (BatchNorm folded): eps {eps:.3g} -> {eps * factor:.3g}, channel factors "
                f"{k.min():.6f}..{k.max():.6f}")
    return Mutation(f"last norm eps x{factor:g}", fn)


def scale_output(factor: float = 1.03) -> Mutation:
    """The (first) graph output x ``factor``: a Mul appended after the node that produced it."""
    def fn(model):
        import numpy as np
        from onnx import helper, numpy_helper

        g = model.graph
        out = g.output[0].name
        inner = out + "_before_planted_scale"
        for n in g.node:
            for i, o in enumerate(n.output):
                if o == out:
                    n.output[i] = inner
            for i, x in enumerate(n.input):
                if x == out:
                    n.input[i] = inner
        g.initializer.append(numpy_helper.from_array(np.array(factor, dtype=np.float32), "planted_scale"))
        g.node.append(helper.make_node("Mul", [inner, "planted_scale"], [out], name="planted_scale_mul"))
        return f"output {out} x{factor:g}"
    return Mutation(f"output x{factor:g}", fn)


def softmax_axis(at: float = 0.0) -> Mutation:
    """A Softmax over the wrong axis: the Softmax at fraction ``at`` of them, axis -1 -> -2 (attention scores:
    over the queries instead of the keys)."""
    def fn(model):
        g = _Graph(model)
        n = _pick(g.nodes("Softmax"), at)
        axis = g.attr(n, "axis", -1)
        rank = g.rank(n.output[0]) or 4
        new = -2 if axis in (-1, rank - 1) else -1
        g.set_attr(n, "axis", new)
        return f"Softmax {n.name}: axis {axis} -> {new}"
    return Mutation("Softmax axis", fn)


def drop_bias(at: float = 1.0) -> Mutation:
    """A dropped bias: the Conv/Gemm bias (or MatMul's following Add of a constant vector) at fraction ``at`` of
    the non-zero ones set to zero."""
    def fn(model):
        import numpy as np

        g = _Graph(model)
        biases = []
        for n in g.model.graph.node:
            name = None
            if n.op_type in ("Conv", "Gemm") and len(n.input) > 2 and g.const_source(n.input[2]) is not None:
                name = n.input[2]
            elif n.op_type == "Add" and any(p.op_type == "MatMul" for x in n.input
                                            for p in [g.producer.get(x)] if p is not None):
                name = next((x for x in n.input if g.const_source(x) is not None), None)
            if name is not None and np.abs(g.get(name)).max() > 0:
                biases.append((n, name))
        n, name = _pick(biases, at)
        b = g.get(name)
        g.put(name, np.zeros_like(b))
        return f"{n.op_type} {n.name}: bias dropped (|b| max {np.abs(b).max():.3g})"
    return Mutation("dropped bias", fn)


def transpose_square(at: float = 0.5) -> Mutation:
    """A transposed square weight: the square constant weight of a MatMul/Gemm (or a square 1x1 Conv) at fraction
    ``at`` of them, transposed."""
    def fn(model):
        g = _Graph(model)
        found = []
        for n in _weighted(g, ("MatMul", "Gemm", "Conv")):
            w = g.get(n.input[1])
            if w.ndim == 2 and w.shape[0] == w.shape[1] > 1 or (
                    n.op_type == "Conv" and w.ndim == 4 and w.shape[0] == w.shape[1] > 1 and w.shape[2:] == (1, 1)):
                found.append(n)
        n = _pick(found, at)
        w = g.get(n.input[1])
        g.put(n.input[1], w.swapaxes(0, 1).copy())
        return f"{n.op_type} {n.name}: square weight {tuple(w.shape)} transposed"
    return Mutation("transposed square weight", fn)


def concat_axis() -> Mutation:
    """A Concat over the wrong axis, where the graph still runs: the last Concat (of non-constant inputs) for which
    another axis gives the same output shapes under onnxruntime (e.g. ShuffleNet's channel shuffle, whose Reshape
    takes the wrongly concatenated tensor as well)."""
    def fn(model):
        import numpy as np
        import onnx
        import onnxruntime as ort

        g = _Graph(model)
        feeds = _random_feeds(model)

        def run(m):
            so = ort.SessionOptions()
            so.log_severity_level = 4
            sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
            return sess.run(None, feeds)

        want = run(model)
        for n in reversed(g.nodes("Concat")):
            if sum(g.const_source(x) is None for x in n.input) < 2:
                continue
            axis, rank = g.attr(n, "axis"), g.rank(n.output[0])
            if rank is None:
                continue
            for new in range(rank):
                if new == axis % rank:
                    continue
                trial = onnx.ModelProto()
                trial.CopyFrom(model)
                del trial.graph.value_info[:]
                node = next(x for x in trial.graph.node if x.name == n.name)
                _Graph(trial).set_attr(node, "axis", new)
                try:
                    got = run(trial)
                except Exception:  # noqa: BLE001 - this axis breaks the graph: try the next
                    continue
                if [a.shape for a in got] == [a.shape for a in want] and not all(
                        np.array_equal(a, b) for a, b in zip(got, want)):
                    model.CopyFrom(trial)
                    return f"Concat {n.name}: axis {axis} -> {new}"
        raise LookupError("no Concat whose axis can change with the graph still running")
    return Mutation("Concat axis", fn)


def _random_feeds(model) -> dict:
    import numpy as np
    from onnx import helper

    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for v in model.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        shape = [d.dim_value or 1 for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[v.name] = (rng.integers(1, 8, shape) if np.issubdtype(dtype, np.integer)
                         else rng.standard_normal(shape)).astype(dtype)
    return feeds


MUTATIONS = {"scale_weight": scale_weight, "bn_scale": bn_scale, "swap_first_channels": swap_first_channels,
             "norm_eps": norm_eps, "scale_output": scale_output, "softmax_axis": softmax_axis,
             "drop_bias": drop_bias, "transpose_square": transpose_square, "concat_axis": concat_axis}


@contextlib.contextmanager
def planted(mutation: Mutation):
    """While inside: every ``onnxbridge.convert`` in this process writes the exported graph changed by
    ``mutation`` (see above). Yields a dict whose ``"what"`` is set to the mutation's account once applied."""
    from onnx.external_data_helper import load_external_data_for_model

    from onnxbridge import builder, external_data

    state: dict = {"what": None, "base_dir": None}
    finalize, detach = builder.finalize, external_data.detach_weights

    def detach_weights(model, base_dir, folder):
        model, base_dir = detach(model, base_dir, folder)
        state["base_dir"] = base_dir
        return model, base_dir

    def planted_finalize(model, *args, **kwargs):
        model, notes = finalize(model, *args, **kwargs)
        if state["base_dir"] is not None:
            load_external_data_for_model(model, str(state["base_dir"]))
        state["what"] = mutation.apply(model)
        return model, notes

    builder.finalize, external_data.detach_weights = planted_finalize, detach_weights
    try:
        yield state
    finally:
        builder.finalize, external_data.detach_weights = finalize, detach


@contextlib.contextmanager
def planted_in_artifact(mutation: Mutation, backend: str):
    """While inside: the bug is only in what the reduced-precision step builds, never in the ONNX graph the hops use
    as their reference, so the fp16 hop alone must find it. ``backend="onnx"`` (``precision="fp16"``): the graph
    handed to ``onnxbridge.precision.to_fp16`` is mutated (the fp32 graph kept for the fp16 hop is not). Another
    backend: its ``build`` gets a mutated copy of the ONNX file, and runs in this process
    (``ONNXBRIDGE_IN_PROCESS=1`` while inside: a native crash ends this process). Yields a dict as ``planted``."""
    import importlib
    import os
    import tempfile

    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    from onnxbridge import precision, worker

    state: dict = {"what": None}
    if backend == "onnx":
        to_fp16 = precision.to_fp16

        def planted_to_fp16(model, *args, base_dir=None, **kwargs):
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            if base_dir is not None:
                load_external_data_for_model(copy, str(base_dir))
            state["what"] = mutation.apply(copy)
            return to_fp16(copy, *args, base_dir=None, **kwargs)

        precision.to_fp16 = planted_to_fp16
        try:
            yield state
        finally:
            precision.to_fp16 = to_fp16
        return
    from onnxbridge.plugins import BACKENDS

    module = importlib.import_module(BACKENDS.load(backend).__name__)
    build = module.build
    before = os.environ.get(worker.IN_PROCESS_ENV)

    def planted_build(onnx_path, output, *args, **kwargs):
        model = onnx.load(str(onnx_path), load_external_data=False)
        load_external_data_for_model(model, str(Path(onnx_path).parent))
        state["what"] = mutation.apply(model)
        path = Path(tempfile.mkdtemp(prefix="planted-", dir=keep.name)) / Path(onnx_path).name
        onnx.save(model, str(path))  # kept while inside: the runner the build returns may read it
        return build(path, output, *args, **kwargs)

    keep = tempfile.TemporaryDirectory(prefix="planted-")
    module.build = planted_build
    os.environ[worker.IN_PROCESS_ENV] = "1"
    try:
        yield state
    finally:
        module.build = build
        keep.cleanup()
        if before is None:
            os.environ.pop(worker.IN_PROCESS_ENV, None)
        else:
            os.environ[worker.IN_PROCESS_ENV] = before


# ---------------------------------------------------------------------------------------------------------------------
# source-level exporter bugs


def frozen_item_model(seed: int = 0):
    """(model, sample): a forward that centres a feature map with ``.item()``: a traced export (TorchScript exporter)
    freezes the mean of the trace input into a constant, right for that input only."""
    import torch
    from torch import nn

    class FrozenItem(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, padding=1)
            self.head = nn.Linear(16, 10)

        def forward(self, x):
            h = torch.relu(self.conv(x))
            h = h - h.mean().item()
            return self.head(h.mean((2, 3)))

    torch.manual_seed(seed)
    return FrozenItem().eval(), (torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(seed + 1)),)


def fixed_pos_model(seed: int = 0):
    """(model, sample): a ViT-like model whose position table is added at the 4x4 patch grid of a 64x64 input
    (16-pixel patches): converted with dynamic height and width, only 64x64-grid inputs can run."""
    import torch
    from torch import nn

    class FixedPos(nn.Module):
        def __init__(self, d=32, grid=4, patch=16):
            super().__init__()
            self.patch = nn.Conv2d(3, d, patch, patch)
            self.pos = nn.Parameter(torch.randn(1, grid * grid, d) * 0.5)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, 10)

        def forward(self, x):
            t = self.patch(x).flatten(2).transpose(1, 2) + self.pos
            return self.head(self.norm(t).mean(1))

    torch.manual_seed(seed)
    return FixedPos().eval(), (torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(seed + 1)),)


def dynamic_vit_model(seed: int = 0):
    """(model, sample): timm's DeiT-Tiny with ``dynamic_img_size=True`` (it interpolates its position table to the
    input's patch grid); a TorchScript-traced export freezes the interpolation at the trace input's grid."""
    import torch

    register_torchvision_ops()
    import timm

    torch.manual_seed(seed)
    m = timm.create_model("deit_tiny_patch16_224", pretrained=False, img_size=64, dynamic_img_size=True).eval()
    return m, (torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(seed + 1)),)
