"""The zoo's catalog: well-known architectures from torchvision, timm, transformers, Keras applications, Paddle
vision and scikit-learn / gradient boosting, with random weights (nothing is downloaded), at small sizes.

``MODELS`` holds one ``ZooModel`` per architecture: its name, library, family, a builder returning
``(model, sample)`` as ``onnxbridge.convert`` takes them, and the flexible axis it has (``image``, ``sequence`` or
``none``) with the ``--dynamic`` specs a flexible Core ML package of it is built with. ``build(name)`` builds one;
``build(name, flexible=True)`` builds the variant whose flexible axis the framework keeps (Keras and Paddle need
their input declared with ``None`` dims; a PyTorch module is the same module).

Sizes: 64x64 images where the architecture allows (Inception 96x96, video 8x64x64 clips), 16-token sequences, 2
layers and hidden size 64 for the transformers configs; each model converts in seconds. Weights are the libraries'
own initialisation under fixed seeds, with BatchNorm statistics set to a trained-like scale (each BatchNorm brings
its input back to unit RMS, see ``tests/helpers/zoo.py``; the same rule for Keras and Paddle here), so fp16 and
the HTP simulator see activations of a trained network's size.

Each model is also a factory for ``onnxbridge matrix``: ``zoo_models.py:NAME`` returns ``build(NAME)`` and
``zoo_models.py:flexible_NAME`` returns ``build(NAME, flexible=True)`` (``benchmarks/zoo.py --manifest`` writes
the manifest). Frameworks are imported inside the builders only: TensorFlow and Paddle cannot share a process.
"""
from __future__ import annotations

import importlib.util
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.helpers.zoo, also when a matrix cell imports this file by path
    sys.path.insert(0, str(ROOT))

IMAGE = 64  # image height and width where the architecture allows
TOKENS = 16  # sequence length of the token models
VOCAB = 256
CALIBRATION_BATCH = 8
IMAGE_RANGE = "32..128"  # the flexible image axes' range (Core ML RangeDim; validated at both ends)
SEQ_RANGE = "8..32"  # the flexible sequence axes' range

# the modules each library's rows need (a row whose library is not installed is skipped, naming them)
REQUIRES = {"torchvision": ("torch", "torchvision"), "timm": ("torch", "timm"),
            "transformers": ("torch", "transformers"), "keras": ("tensorflow", "keras", "tf2onnx"),
            "paddle": ("paddle",), "sklearn": ("sklearn", "skl2onnx"),
            "lightgbm": ("sklearn", "lightgbm", "onnxmltools"), "xgboost": ("sklearn", "xgboost", "onnxmltools"),
            "catboost": ("sklearn", "catboost")}
FRAMEWORK = {"torchvision": "torch", "timm": "torch", "transformers": "torch", "keras": "tensorflow",
             "paddle": "paddle", "sklearn": "sklearn", "lightgbm": "sklearn", "xgboost": "sklearn",
             "catboost": "sklearn"}


@dataclass(frozen=True)
class ZooModel:
    """One architecture. ``build(flexible)`` -> (model, sample inputs); ``dynamic``: the ``--dynamic`` specs of its
    flexible axis (empty when ``flex`` is ``none``); ``ml_ops``: its ONNX graph is made of ``ai.onnx.ml`` operators
    (trees, linear classifiers, scalers), not float tensor programs."""

    name: str
    library: str
    family: str
    build: Callable[[bool], tuple[Any, Any]]
    flex: str = "none"
    dynamic: tuple[str, ...] = ()
    ml_ops: bool = False

    @property
    def framework(self) -> str:
        return FRAMEWORK[self.library]

    def missing(self) -> list[str]:
        """The modules this model needs that are not installed."""
        return [m for m in REQUIRES[self.library] if importlib.util.find_spec(m) is None]


def _image_axes(name: str = "x", nchw: bool = True, sizes: str = IMAGE_RANGE) -> tuple[str, ...]:
    h, w = (2, 3) if nchw else (1, 2)
    return (f"{name}:{h}:height:{sizes}", f"{name}:{w}:width:{sizes}")


def _seq_axis(name: str = "x", axis: int = 1, sizes: str = SEQ_RANGE, label: str = "seq") -> tuple[str, ...]:
    return (f"{name}:{axis}:{label}:{sizes}",)


# ---------------------------------------------------------------------------------------------------------------------
# PyTorch: torchvision, timm, transformers


def _finish_torch(module, sample: Callable[[int, int], tuple], calibrate: bool = True):
    """``module`` in eval mode, gradients off, zero-initialised weight matrices re-drawn and BatchNorm statistics at
    a trained-like scale (``tests.helpers.zoo``); returns (module, sample(seed 0, batch 1))."""
    from tests.helpers import zoo

    zoo._no_zero_weights(module)
    module.eval()
    if calibrate:
        zoo.calibrate_batchnorm(module, sample(100, CALIBRATION_BATCH))
    for p in module.parameters():
        p.requires_grad_(False)
    return module, sample(0, 1)


def _randn(*shape: int) -> Callable[[int, int], tuple]:
    """Seeded standard-normal samples of ``shape`` (an image, a clip, audio), batch first."""
    def sample(seed: int, batch: int):
        import torch

        return (torch.randn(batch, *shape, generator=torch.Generator().manual_seed(seed + 1)),)
    return sample


def _tokens(length: int = TOKENS) -> Callable[[int, int], tuple]:
    def sample(seed: int, batch: int):
        import torch

        return (torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed + 1)),)
    return sample


def _torch(make: Callable[[], Any], sample: Callable[[int, int], tuple], calibrate: bool = True):
    """A builder: ``make()`` (imports inside) seeded, then ``_finish_torch``."""
    def build(flexible: bool = False):
        import torch

        from tests.helpers import zoo

        zoo.register_torchvision_ops()
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = make()
        return _finish_torch(module, sample, calibrate)
    return build


def _helper_zoo(name: str):
    """A model of ``tests/helpers/zoo.py`` (the verdict tests' zoo), as it builds it."""
    def build(flexible: bool = False):
        from tests.helpers import zoo

        return zoo.model(name)
    return build


def _tv(fn: str, **kw) -> Callable[[], Any]:
    def make():
        import torchvision.models as tvm
        import torchvision.models.segmentation as seg
        import torchvision.models.video as video

        ctor = getattr(tvm, fn, None) or getattr(seg, fn, None) or getattr(video, fn)
        return ctor(weights=None, **kw)
    return make


def _maxvit_t():
    """torchvision's MaxViT-T (its block layout, channels and heads) with 2x2 windows and grids, so a 64x64 image
    (a 2x2 map after the stride-32 stem and stages) partitions; ``maxvit_t`` fixes them at 7 for 224x224."""
    from torchvision.models.maxvit import MaxVit

    return MaxVit(input_size=(IMAGE, IMAGE), stem_channels=64, partition_size=2, block_channels=[64, 128, 256, 512],
                  block_layers=[2, 2, 5, 2], head_dim=32, stochastic_depth_prob=0.2)


def _s3d():
    """torchvision's S3D with its final average pool as a global one: the original's (2, 7, 7) kernel is the whole
    map of a 16x224x224 clip; at 8x64x64 the same global average needs the map's own size."""
    import torch
    import torchvision.models.video as video

    m = video.s3d(weights=None)
    m.avgpool = torch.nn.AdaptiveAvgPool3d(1)
    return m


class _Detector:
    """torchvision detectors on one image tensor: forward(x) of shape (1, 3, H, W) -> the first image's boxes,
    scores, labels (and masks or keypoints where the model has them)."""

    @staticmethod
    def wrap(inner, extra: tuple[str, ...] = ()):
        import torch

        class Detections(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                out = self.inner(list(x.unbind(0)))[0]
                return tuple(out[k] for k in ("boxes", "scores", "labels", *extra))

        Detections.__name__ = type(inner).__name__
        return Detections()


def _ops_available() -> bool:
    return True


def _exportable_torchvision_ops() -> None:
    """Make the detectors' RoIAlign and NMS export as the ONNX ops torchvision maps them to (``RoiAlign``,
    ``NonMaxSuppression``), as where its compiled operators load: torchvision's ops then call
    ``torch.ops.torchvision.*`` (``register_torchvision_ops`` defines them in PyTorch) instead of its pure-Python
    RoIAlign, which it wraps in ``torch.compile`` (no exporter traces through that: the kernel runs it uncompiled);
    and ``_has_ops`` becomes a plain function TorchScript can compile (``torchvision.ops.boxes`` scripts a call to
    it while tracing)."""
    import torchvision.extension

    roi_align = importlib.import_module("torchvision.ops.roi_align")  # (torchvision.ops.roi_align is the function)
    torchvision.extension._has_ops = _ops_available
    roi_align._has_ops = _ops_available
    roi_align._roi_align = getattr(roi_align._roi_align, "__wrapped__", roi_align._roi_align)


def _detector(fn: str, extra: tuple[str, ...] = (), **kw) -> Callable[[], Any]:
    """A torchvision detector, no pretrained backbone, resizing its input to 128 pixels (min_size) at most 160, with
    fewer region proposals than the 800-pixel defaults keep."""
    def make():
        import torchvision.models.detection as det

        _exportable_torchvision_ops()
        ctor = getattr(det, fn)
        m = ctor(weights=None, weights_backbone=None, **kw)
        if hasattr(m.transform, "fixed_size") and m.transform.fixed_size is not None:  # SSD: a fixed input size
            m.transform.fixed_size = (128, 128)
        return _Detector.wrap(m.eval(), extra)
    return make


# R-CNNs: every candidate box kept (score threshold 0; RetinaNet and FCOS too): random weights score no box above
# the defaults, and a detector that outputs nothing compares nothing
_RCNN = dict(min_size=128, max_size=160, rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=50,
             box_detections_per_img=20, box_score_thresh=0.0)


def _raft_small():
    """RAFT-small on two 128x128 frames (its correlation pyramid needs 128 pixels at least) with 2 flow updates (12
    by default): the flow of the last update."""
    import torch
    from torchvision.models.optical_flow import raft_small

    inner = raft_small(weights=None)

    class Flow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, image1, image2):
            return self.inner(image1, image2, num_flow_updates=2)[-1]

    Flow.__name__ = "RAFT"
    return Flow()


def _two_images(seed: int, batch: int):
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(batch, 3, 128, 128, generator=g), torch.randn(batch, 3, 128, 128, generator=g)


def _timm(fn: str, **kw) -> Callable[[], Any]:
    def make():
        import timm

        return timm.create_model(fn, pretrained=False, **kw)
    return make


class _Hf:
    """A transformers model whose forward takes one input by name and returns the named outputs (one tensor, or a
    tuple), so the exporters see tensors only."""

    @staticmethod
    def wrap(inner, keys: tuple[str, ...], arg: str):
        import torch

        class Main(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                out = self.inner(**{arg: x}, return_dict=True)
                got = tuple(out[k] for k in keys)
                return got[0] if len(got) == 1 else got

        Main.__name__ = type(inner).__name__
        return Main()


def _hf(cls: str, config: str, keys: str | tuple[str, ...] = "last_hidden_state", arg: str = "input_ids",
        part: str | None = None, **cfg) -> Callable[[], Any]:
    """``transformers.cls(config(**cfg))`` with eager attention; ``part``: a method giving the submodule to keep
    (``get_encoder``)."""
    def make():
        import transformers

        conf = getattr(transformers, config)(**cfg)
        if hasattr(conf, "_attn_implementation"):
            conf._attn_implementation = "eager"
        inner = getattr(transformers, cls)(conf)
        if part:
            inner = getattr(inner, part)()
        return _Hf.wrap(inner, (keys,) if isinstance(keys, str) else keys, arg)
    return make


_ENC = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_DEC = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            vocab_size=VOCAB, max_position_embeddings=64, use_cache=False, bos_token_id=1, eos_token_id=2,
            pad_token_id=0)
_VIS = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=IMAGE,
            patch_size=16)


# ---------------------------------------------------------------------------------------------------------------------
# Keras applications


def _calibrate_keras(model, x) -> int:
    """Keras's BatchNormalization layers set as ``calibrate_batchnorm`` sets PyTorch's: in one pass through the
    functional graph, right before each runs, moving mean 0 and moving variance the mean square of its input."""
    import keras
    import numpy as np

    norms = [op for op in model._operations if isinstance(op, keras.layers.BatchNormalization)]
    if not norms:
        return 0

    from keras.src.models.functional import operation_fn as inference

    def operation_fn(op):
        if not isinstance(op, keras.layers.BatchNormalization):
            return inference(op, training=False)

        def call(value, **kwargs):
            arr = np.asarray(keras.ops.convert_to_numpy(value), dtype=np.float64)
            op.moving_mean.assign(np.zeros(op.moving_mean.shape, np.float32))
            op.moving_variance.assign(np.full(op.moving_variance.shape, max(float((arr ** 2).mean()), 1e-12),
                                              np.float32))
            return op(value, training=False)
        return call

    model._run_through_graph(model._standardize_inputs(x), operation_fn=operation_fn)
    return len(norms)


def _keras(app: str, size: int = IMAGE, **kw):
    """``keras.applications.APP`` without weights, its classifier replaced by global average pooling and a 10-class
    Dense (so the same head takes any image size): 64x64 (``size``) NHWC input named ``image``; ``flexible``: height
    and width ``None``."""
    def build(flexible: bool = False):
        import keras
        import numpy as np

        keras.utils.set_random_seed(0)
        side = None if flexible else size
        image = keras.Input((side, side, 3), name="image")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            base = getattr(keras.applications, app)(weights=None, include_top=False, pooling="avg",
                                                   input_tensor=image, **kw)
        model = keras.Model(image, keras.layers.Dense(10, name="logits")(base.output), name=app)
        rng = np.random.default_rng(101)
        _calibrate_keras(model, rng.standard_normal((CALIBRATION_BATCH, size, size, 3)).astype(np.float32))
        x = np.random.default_rng(1).standard_normal((1, size, size, 3)).astype(np.float32)
        return model, x
    return build


# ---------------------------------------------------------------------------------------------------------------------
# Paddle vision


def _calibrate_paddle(layer, x) -> int:
    """Paddle's BatchNorm layers set as ``calibrate_batchnorm`` sets PyTorch's (forward pre-hooks, one pass)."""
    import numpy as np
    import paddle

    norms = [m for m in layer.sublayers() if "BatchNorm" in type(m).__name__ and hasattr(m, "_variance")]

    def hook(bn, inputs):
        v = max(float(np.mean(np.square(inputs[0].numpy().astype(np.float64)))), 1e-12)
        bn._mean.set_value(np.zeros(bn._mean.shape, np.float32))
        bn._variance.set_value(np.full(bn._variance.shape, v, np.float32))

    hooks = [m.register_forward_pre_hook(hook) for m in norms]
    layer.eval()
    try:
        with paddle.no_grad():
            layer(paddle.to_tensor(x))
    finally:
        for h in hooks:
            h.remove()
    return len(norms)


def _paddle(fn: str, size: int = IMAGE, **kw):
    """``paddle.vision.models.FN`` (random weights, 10 classes), eval mode, with a 1x3xSIZExSIZE sample array."""
    def build(flexible: bool = False):
        import numpy as np
        import paddle

        paddle.seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            layer = getattr(paddle.vision.models, fn)(num_classes=10, **kw)
        rng = np.random.default_rng(101)
        _calibrate_paddle(layer, rng.standard_normal((CALIBRATION_BATCH, 3, size, size)).astype(np.float32))
        layer.eval()
        return layer, np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)
    return build


# ---------------------------------------------------------------------------------------------------------------------
# scikit-learn and gradient boosting


def _tabular(classes: int | None = 3, rows: int = 200, features: int = 8):
    """Seeded float32 features and targets: ``classes`` labels, or a regression target when None."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    score = x @ np.linspace(-1.0, 1.0, features).astype(np.float32) + 0.3 * rng.standard_normal(rows)
    if classes is None:
        return x, score.astype(np.float32)
    return x, np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1])).astype(np.int64)


def _sk(make: Callable[[], Any], classes: int | None = 3):
    """A fitted estimator (``make()`` imports inside; fitted on float64 features, as numpy makes them by default)
    and 16 float32 sample rows."""
    def build(flexible: bool = False):
        import numpy as np

        x, y = _tabular(classes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = make().fit(x.astype(np.float64), y)
        return model, x[:16]
    return build


def _lazy(module: str, name: str, **kw) -> Callable[[], Any]:
    def make():
        return getattr(importlib.import_module(module), name)(**kw)
    return make


def _pipeline(*steps: Callable[[], Any]) -> Callable[[], Any]:
    def make():
        from sklearn.pipeline import make_pipeline

        return make_pipeline(*(s() for s in steps))
    return make


# ---------------------------------------------------------------------------------------------------------------------
# the catalog


def _m(name: str, library: str, family: str, build, flex: str = "none", dynamic: tuple[str, ...] = (), **kw):
    return ZooModel(name, library, family, build, flex, dynamic, **kw)


def _tv_cls(name: str, fn: str | None = None, size: int = IMAGE, flex: bool = True, **kw) -> ZooModel:
    return _m(name, "torchvision", "classification", _torch(_tv(fn or name, **kw), _randn(3, size, size)),
              *(("image", _image_axes()) if flex else ()))


def _timm_cls(name: str, fn: str, flex: bool = True, size: int = IMAGE, **kw) -> ZooModel:
    return _m(name, "timm", "classification", _torch(_timm(fn, **kw), _randn(3, size, size)),
              *(("image", _image_axes()) if flex else ()))


def _helper(name: str, library: str, family: str, flex: str = "none", dynamic: tuple[str, ...] = ()) -> ZooModel:
    return _m(name, library, family, _helper_zoo(name), flex, dynamic)


def _hf_model(name: str, family: str, make: Callable[[], Any], sample: Callable[[int, int], tuple],
              flex: str = "none", dynamic: tuple[str, ...] = ()) -> ZooModel:
    return _m(name, "transformers", family, _torch(make, sample), flex, dynamic)


_IMG = ("image", _image_axes())
_SEQ = ("sequence", _seq_axis())
_TOK = _tokens()
_PIX = _randn(3, IMAGE, IMAGE)

MODELS: list[ZooModel] = [
    # --- torchvision: classification (the ones tests/helpers/zoo.py has are built as it builds them)
    _helper("resnet18", "torchvision", "classification", *_IMG),
    _helper("resnet50", "torchvision", "classification", *_IMG),
    _helper("resnext50_32x4d", "torchvision", "classification", *_IMG),
    _tv_cls("wide_resnet50_2"),
    _helper("mobilenet_v2", "torchvision", "classification", *_IMG),
    _helper("mobilenet_v3_small", "torchvision", "classification", *_IMG),
    _tv_cls("mobilenet_v3_large"),
    _helper("efficientnet_b0", "torchvision", "classification", *_IMG),
    _tv_cls("efficientnet_v2_s"),
    _helper("regnet_x_400mf", "torchvision", "classification", *_IMG),
    _tv_cls("regnet_y_400mf"),
    _helper("densenet121", "torchvision", "classification", *_IMG),
    _helper("googlenet", "torchvision", "classification", *_IMG),
    _m("inception_v3", "torchvision", "classification",
       _torch(_tv("inception_v3", aux_logits=False, init_weights=True), _randn(3, 96, 96)), "image",
       _image_axes(sizes="80..160")),
    _helper("mnasnet0_5", "torchvision", "classification", *_IMG),
    _helper("shufflenet_v2_x0_5", "torchvision", "classification", *_IMG),
    _helper("squeezenet1_0", "torchvision", "classification", *_IMG),
    _tv_cls("squeezenet1_1"),
    _m("alexnet", "torchvision", "classification", _torch(_tv("alexnet"), _PIX), "image",
       _image_axes(sizes="64..128")),  # its features need 63 pixels at least
    _helper("vgg11_bn", "torchvision", "classification", *_IMG),
    _helper("convnext_tiny", "torchvision", "classification", *_IMG),
    _helper("swin_t", "torchvision", "classification", *_IMG),
    _tv_cls("swin_v2_t"),
    _tv_cls("vit_b_16", image_size=IMAGE, flex=False),
    _m("maxvit_t", "torchvision", "classification", _torch(_maxvit_t, _PIX)),
    # --- torchvision: segmentation
    _helper("fcn_resnet50", "torchvision", "segmentation", *_IMG),
    _helper("deeplabv3_mobilenet_v3_large", "torchvision", "segmentation", *_IMG),
    _m("deeplabv3_resnet50", "torchvision", "segmentation",
       _torch(_tv("deeplabv3_resnet50", weights_backbone=None, aux_loss=False), _PIX), *_IMG),
    _helper("lraspp_mobilenet_v3_large", "torchvision", "segmentation", "image", _image_axes("input")),
    # --- torchvision: detection (eval mode; the image is resized inside to 128 pixels)
    _m("fasterrcnn_mobilenet_v3_large_320_fpn", "torchvision", "detection",
       _torch(_detector("fasterrcnn_mobilenet_v3_large_320_fpn", **_RCNN), _PIX), *_IMG),
    _m("retinanet_resnet50_fpn", "torchvision", "detection",
       _torch(_detector("retinanet_resnet50_fpn", min_size=128, max_size=160, detections_per_img=20,
                        topk_candidates=100, score_thresh=0.0), _PIX), *_IMG),
    _m("ssdlite320_mobilenet_v3_large", "torchvision", "detection",
       _torch(_detector("ssdlite320_mobilenet_v3_large", detections_per_img=20, topk_candidates=100), _PIX), *_IMG),
    _m("fcos_resnet50_fpn", "torchvision", "detection",
       _torch(_detector("fcos_resnet50_fpn", min_size=128, max_size=160, detections_per_img=20,
                        topk_candidates=100, score_thresh=0.0), _PIX), *_IMG),
    _m("maskrcnn_resnet50_fpn", "torchvision", "detection",
       _torch(_detector("maskrcnn_resnet50_fpn", ("masks",), **_RCNN), _PIX), *_IMG),
    _m("keypointrcnn_resnet50_fpn", "torchvision", "detection",
       _torch(_detector("keypointrcnn_resnet50_fpn", ("keypoints", "keypoints_scores"), **_RCNN), _PIX), *_IMG),
    # --- torchvision: video (clips of 8 frames, 64x64)
    *[_m(fn, "torchvision", "video", _torch(make, _randn(3, 8, IMAGE, IMAGE)), "image",
         (f"x:3:height:{IMAGE_RANGE}", f"x:4:width:{IMAGE_RANGE}"))
      for fn, make in (("r3d_18", _tv("r3d_18")), ("mc3_18", _tv("mc3_18")), ("r2plus1d_18", _tv("r2plus1d_18")),
                       ("s3d", _s3d), ("swin3d_t", _tv("swin3d_t")))],
    # --- torchvision: optical flow
    _m("raft_small", "torchvision", "optical flow", _torch(_raft_small, _two_images)),

    # --- timm
    _helper("deit_tiny", "timm", "classification"),
    _helper("vit_small", "timm", "classification"),
    _helper("swin_tiny", "timm", "classification"),
    _helper("mobilevit_xxs", "timm", "classification", *_IMG),
    _helper("ghostnetv2", "timm", "classification", "image", _image_axes(sizes="64..128")),
    _helper("efficientvit_b0", "timm", "classification", *_IMG),
    _helper("mobileone_s0", "timm", "classification", *_IMG),
    _helper("convnextv2_atto", "timm", "classification", *_IMG),
    _helper("rexnet_100", "timm", "classification", *_IMG),
    _helper("levit_128s", "timm", "classification"),
    _helper("mixer_s16", "timm", "classification"),
    _helper("repvgg_a0", "timm", "classification", *_IMG),
    _helper("mobilenetv4_small", "timm", "classification", *_IMG),
    _helper("coatnet_0", "timm", "classification"),
    _timm_cls("resnet18d", "resnet18d"),
    _timm_cls("efficientnet_lite0", "efficientnet_lite0"),
    _timm_cls("tf_efficientnet_b0", "tf_efficientnet_b0"),
    _timm_cls("cspresnet50", "cspresnet50"),
    _timm_cls("regnetz_b16", "regnetz_b16"),
    _timm_cls("poolformerv2_s12", "poolformerv2_s12"),
    _timm_cls("pvt_v2_b0", "pvt_v2_b0"),
    _timm_cls("edgenext_xx_small", "edgenext_xx_small"),
    _timm_cls("fastvit_t8", "fastvit_t8"),
    _timm_cls("hrnet_w18_small", "hrnet_w18_small"),
    _timm_cls("dla34", "dla34"),
    _timm_cls("ese_vovnet19b_dw", "ese_vovnet19b_dw"),
    _timm_cls("hgnetv2_b0", "hgnetv2_b0"),
    _timm_cls("lcnet_050", "lcnet_050"),
    _timm_cls("ghostnet_100", "ghostnet_100"),
    _timm_cls("xcit_nano_12_p16", "xcit_nano_12_p16_224", img_size=IMAGE),
    _timm_cls("cait_xxs24", "cait_xxs24_224", flex=False, img_size=IMAGE),
    _timm_cls("eva02_tiny", "eva02_tiny_patch14_224", flex=False, size=56, img_size=56),
    _timm_cls("tiny_vit_5m", "tiny_vit_5m_224", num_classes=1000),
    _timm_cls("repvit_m0_9", "repvit_m0_9"),
    _timm_cls("starnet_s1", "starnet_s1"),
    _timm_cls("efficientformerv2_s0", "efficientformerv2_s0", flex=False, img_size=IMAGE),

    # --- transformers (configs at toy sizes; the wrapper takes one input, x, and returns the main output)
    _helper("bert", "transformers", "encoder", *_SEQ),
    _helper("bert_classifier", "transformers", "encoder", *_SEQ),
    _helper("distilbert", "transformers", "encoder", *_SEQ),
    _helper("roberta", "transformers", "encoder", *_SEQ),
    _helper("albert", "transformers", "encoder", *_SEQ),
    _hf_model("electra", "encoder", _hf("ElectraModel", "ElectraConfig", embedding_size=32, **_ENC), _TOK, *_SEQ),
    _hf_model("deberta_v2", "encoder", _hf("DebertaV2Model", "DebertaV2Config", **_ENC), _TOK, *_SEQ),
    _hf_model("mpnet", "encoder", _hf("MPNetModel", "MPNetConfig", **{**_ENC, "max_position_embeddings": 66}),
              _TOK, *_SEQ),
    _hf_model("xlm_roberta", "encoder", _hf("XLMRobertaModel", "XLMRobertaConfig",
                                            **{**_ENC, "max_position_embeddings": 66}), _TOK, *_SEQ),
    _hf_model("modernbert", "encoder", _hf("ModernBertModel", "ModernBertConfig", hidden_size=64,
                                           num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                           vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=0,
                                           bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
                                           global_attn_every_n_layers=2, local_attention=8), _TOK, *_SEQ),
    _helper("t5_encoder", "transformers", "encoder", *_SEQ),
    _helper("gpt2", "transformers", "decoder", *_SEQ),
    _hf_model("llama", "decoder", _hf("LlamaForCausalLM", "LlamaConfig", "logits", **_DEC), _TOK, *_SEQ),
    _hf_model("qwen2", "decoder", _hf("Qwen2ForCausalLM", "Qwen2Config", "logits", **_DEC), _TOK, *_SEQ),
    _hf_model("qwen3", "decoder", _hf("Qwen3ForCausalLM", "Qwen3Config", "logits", head_dim=16, **_DEC), _TOK,
              *_SEQ),
    _hf_model("mistral", "decoder", _hf("MistralForCausalLM", "MistralConfig", "logits", **_DEC), _TOK, *_SEQ),
    _hf_model("phi", "decoder", _hf("PhiForCausalLM", "PhiConfig", "logits", **_DEC), _TOK, *_SEQ),
    _hf_model("phi3", "decoder", _hf("Phi3ForCausalLM", "Phi3Config", "logits", **_DEC), _TOK, *_SEQ),
    _hf_model("gemma", "decoder", _hf("GemmaForCausalLM", "GemmaConfig", "logits", head_dim=16, **_DEC), _TOK,
              *_SEQ),
    _hf_model("gemma2", "decoder", _hf("Gemma2ForCausalLM", "Gemma2Config", "logits", head_dim=16,
                                       sliding_window=8, **_DEC), _TOK, *_SEQ),
    _hf_model("opt", "decoder", _hf("OPTForCausalLM", "OPTConfig", "logits", hidden_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, ffn_dim=128, word_embed_proj_dim=64, vocab_size=VOCAB,
                                    max_position_embeddings=64, use_cache=False, dropout=0.0, pad_token_id=0,
                                    bos_token_id=1, eos_token_id=2), _TOK, *_SEQ),
    _hf_model("gpt_neox", "decoder", _hf("GPTNeoXForCausalLM", "GPTNeoXConfig", "logits", hidden_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                         vocab_size=VOCAB, max_position_embeddings=64, use_cache=False,
                                         bos_token_id=1, eos_token_id=2), _TOK, *_SEQ),
    _hf_model("falcon", "decoder", _hf("FalconForCausalLM", "FalconConfig", "logits", hidden_size=64,
                                       num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB,
                                       max_position_embeddings=64, use_cache=False, bos_token_id=1,
                                       eos_token_id=2), _TOK, *_SEQ),
    _hf_model("bart", "encoder-decoder", _hf("BartModel", "BartConfig", d_model=64, encoder_layers=2,
                                             decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                             encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB,
                                             max_position_embeddings=64, dropout=0.0, use_cache=False,
                                             pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                             decoder_start_token_id=2), _TOK, *_SEQ),
    _hf_model("clip_text", "encoder", _hf("CLIPTextModel", "CLIPTextConfig", **{
        k: v for k, v in _ENC.items() if "dropout" not in k}), _TOK, *_SEQ),
    _hf_model("clip_vision", "vision", _hf("CLIPVisionModel", "CLIPVisionConfig", arg="pixel_values", **_VIS), _PIX),
    _hf_model("siglip_vision", "vision", _hf("SiglipVisionModel", "SiglipVisionConfig", arg="pixel_values", **_VIS),
              _PIX),
    _helper("vit_hf", "transformers", "vision"),
    _hf_model("deit_hf", "vision", _hf("DeiTModel", "DeiTConfig", arg="pixel_values", **_VIS), _PIX),
    _hf_model("beit", "vision", _hf("BeitModel", "BeitConfig", arg="pixel_values", vocab_size=VOCAB, **_VIS), _PIX),
    _hf_model("dinov2", "vision", _hf("Dinov2Model", "Dinov2Config", arg="pixel_values", **{
        k: v for k, v in _VIS.items() if k != "intermediate_size"}), _PIX, *_IMG),
    _hf_model("convnext_hf", "vision", _hf("ConvNextModel", "ConvNextConfig", "pooler_output", "pixel_values",
                                           hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1]), _PIX, *_IMG),
    _hf_model("swin_hf", "vision", _hf("SwinModel", "SwinConfig", "pooler_output", "pixel_values", image_size=IMAGE,
                                       patch_size=4, embed_dim=32, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8],
                                       window_size=2), _PIX, "image", _image_axes(sizes="64..128")),
    # (below 64 pixels its last stage is smaller than a window: the model then shrinks its window for good)
    _hf_model("resnet_hf", "vision", _hf("ResNetModel", "ResNetConfig", "pooler_output", "pixel_values",
                                         embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1]),
              _PIX, *_IMG),
    _hf_model("mobilenet_v2_hf", "vision", _hf("MobileNetV2Model", "MobileNetV2Config", "pooler_output",
                                               "pixel_values", image_size=IMAGE), _PIX, *_IMG),
    _hf_model("segformer", "vision", _hf("SegformerForSemanticSegmentation", "SegformerConfig", "logits",
                                         "pixel_values", hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                         decoder_hidden_size=64, num_labels=10), _PIX, *_IMG),
    _hf_model("yolos", "detection", _hf("YolosForObjectDetection", "YolosConfig", ("logits", "pred_boxes"),
                                        "pixel_values", num_detection_tokens=10, **{**_VIS, "image_size": [64, 64]}),
              _PIX),
    _hf_model("detr", "detection", _hf("DetrForObjectDetection", "DetrConfig", ("logits", "pred_boxes"),
                                       "pixel_values", use_timm_backbone=True, backbone="resnet18",
                                       use_pretrained_backbone=False, num_queries=10, d_model=64,
                                       encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                       decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                       dropout=0.0), _PIX, *_IMG),
    _hf_model("wav2vec2", "audio", _hf("Wav2Vec2Model", "Wav2Vec2Config", arg="input_values",
                                       conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                       **{k: v for k, v in _ENC.items() if k not in ("max_position_embeddings",)}),
              _randn(3200), "sequence", _seq_axis(sizes="1600..6400", label="samples")),
    _hf_model("hubert", "audio", _hf("HubertModel", "HubertConfig", arg="input_values",
                                     conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                     **{k: v for k, v in _ENC.items() if k not in ("max_position_embeddings",)}),
              _randn(3200), "sequence", _seq_axis(sizes="1600..6400", label="samples")),
    _helper("whisper_encoder", "transformers", "audio"),

    # --- Keras applications (TensorFlow backend; NHWC input 'image')
    *[_m(f"keras_{app.lower()}", "keras", "classification", _keras(app, size),
         *(("image", _image_axes("image", nchw=False, sizes=sizes)) if sizes else ()))
      for app, size, sizes in (("MobileNetV2", IMAGE, IMAGE_RANGE), ("MobileNetV3Small", IMAGE, IMAGE_RANGE),
                               ("ResNet50", IMAGE, IMAGE_RANGE), ("ResNet50V2", IMAGE, IMAGE_RANGE),
                               ("EfficientNetB0", IMAGE, IMAGE_RANGE), ("EfficientNetV2B0", IMAGE, IMAGE_RANGE),
                               ("DenseNet121", IMAGE, IMAGE_RANGE), ("InceptionV3", 96, "80..160"),
                               ("Xception", 96, "80..160"), ("VGG16", IMAGE, IMAGE_RANGE),
                               ("ConvNeXtTiny", IMAGE, IMAGE_RANGE), ("MobileNet", IMAGE, IMAGE_RANGE),
                               ("NASNetMobile", 96, None))],  # NASNet's cells crop by the static input size

    # --- Paddle vision (NCHW input named after forward's parameter)
    *[_m(f"paddle_{fn}", "paddle", "classification", _paddle(fn), "image", _image_axes(arg))
      for fn, arg in (("resnet18", "x"), ("resnet50", "x"), ("mobilenet_v1", "x"), ("mobilenet_v2", "x"),
                      ("mobilenet_v3_small", "x"), ("shufflenet_v2_x0_5", "inputs"), ("squeezenet1_1", "inputs"),
                      ("densenet121", "input"), ("vgg11", "x"), ("mobilenet_v3_large", "x"),
                      ("resnext50_32x4d", "x"))],

    # --- scikit-learn and gradient boosting (8 float features, 16 sample rows)
    _m("sk_linear_regression", "sklearn", "tabular", _sk(_lazy("sklearn.linear_model", "LinearRegression"), None),
       ml_ops=True),
    _m("sk_logistic_regression", "sklearn", "tabular",
       _sk(_pipeline(_lazy("sklearn.preprocessing", "StandardScaler"),
                     _lazy("sklearn.linear_model", "LogisticRegression"))), ml_ops=True),
    _m("sk_svc", "sklearn", "tabular", _sk(_lazy("sklearn.svm", "SVC", probability=False)), ml_ops=True),
    _m("sk_decision_tree", "sklearn", "tabular",
       _sk(_lazy("sklearn.tree", "DecisionTreeClassifier", max_depth=6, random_state=0)), ml_ops=True),
    _m("sk_random_forest", "sklearn", "tabular",
       _sk(_lazy("sklearn.ensemble", "RandomForestRegressor", n_estimators=20, max_depth=6, random_state=0), None),
       ml_ops=True),
    _m("sk_extra_trees", "sklearn", "tabular",
       _sk(_lazy("sklearn.ensemble", "ExtraTreesClassifier", n_estimators=20, max_depth=6, random_state=0)),
       ml_ops=True),
    _m("sk_gradient_boosting", "sklearn", "tabular",
       _sk(_lazy("sklearn.ensemble", "GradientBoostingClassifier", n_estimators=20, max_depth=3, random_state=0)),
       ml_ops=True),
    _m("sk_hist_gradient_boosting", "sklearn", "tabular",
       _sk(_lazy("sklearn.ensemble", "HistGradientBoostingRegressor", max_iter=20, random_state=0), None),
       ml_ops=True),
    _m("sk_mlp_regressor", "sklearn", "tabular",
       _sk(_lazy("sklearn.neural_network", "MLPRegressor", hidden_layer_sizes=(32, 16), max_iter=300,
                 random_state=0), None)),
    _m("sk_pca", "sklearn", "tabular", _sk(_lazy("sklearn.decomposition", "PCA", n_components=4, random_state=0),
                                           None)),
    _m("sk_kmeans", "sklearn", "tabular",
       _sk(_lazy("sklearn.cluster", "KMeans", n_clusters=3, n_init=3, random_state=0), None)),
    _m("lightgbm_classifier", "lightgbm", "tabular",
       _sk(_lazy("lightgbm", "LGBMClassifier", n_estimators=20, num_leaves=8, random_state=0, verbose=-1)),
       ml_ops=True),
    _m("xgboost_regressor", "xgboost", "tabular",
       _sk(_lazy("xgboost", "XGBRegressor", n_estimators=20, max_depth=3, random_state=0), None), ml_ops=True),
    _m("catboost_classifier", "catboost", "tabular",
       _sk(_lazy("catboost", "CatBoostClassifier", iterations=20, depth=4, random_seed=0, verbose=False,
                 allow_writing_files=False)), ml_ops=True),
]
NAMES = [m.name for m in MODELS]
LIBRARIES = tuple(dict.fromkeys(m.library for m in MODELS))
_BY_NAME = {m.name: m for m in MODELS}


def get(name: str) -> ZooModel:
    if name not in _BY_NAME:
        raise KeyError(f"unknown zoo model '{name}'")
    return _BY_NAME[name]


def build(name: str, flexible: bool = False) -> tuple[Any, Any]:
    """(model, sample) of zoo model ``name``; ``flexible``: the variant whose flexible axis the framework keeps."""
    return get(name).build(flexible)


def __getattr__(attr: str) -> Callable[[], tuple[Any, Any]]:
    """``NAME`` and ``flexible_NAME`` as zero-argument factories (``onnxbridge matrix`` sources
    ``zoo_models.py:NAME``)."""
    flexible = attr.startswith("flexible_")
    name = attr[len("flexible_"):] if flexible else attr
    if name in _BY_NAME:
        return lambda: build(name, flexible)
    raise AttributeError(f"module 'zoo_models' has no attribute '{attr}'")
