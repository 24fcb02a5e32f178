"""Frontends: one per source framework, imported only when used.

A frontend module defines ``accepts(source) -> bool`` (cheap: no framework import) and
``load(source, **options) -> SourceModel`` (see ``base.py``). Options a frontend takes beyond the
common ones (sample_inputs, input_shapes, dynamic, input_names, trust, seed) are listed in its
``OPTIONS`` tuple; the spine refuses an option the chosen frontend does not take.
"""
from __future__ import annotations

from onnxbridge.registry import Plugin, Registry

FRONTENDS = Registry("frontend", [
    Plugin("torch", "onnxbridge.frontends.pytorch", requires=("torch", "onnxscript"), extra="torch",
           description="PyTorch nn.Module, factory module:function, torch.export .pt2, TorchScript .pt"),
    Plugin("tensorflow", "onnxbridge.frontends.tensorflow", requires=("tensorflow", "tf2onnx"), extra="tensorflow",
           description="TensorFlow SavedModel, Keras .keras/.h5, tf.keras.Model, tf.function, .tflite"),
    Plugin("paddle", "onnxbridge.frontends.paddle", requires=("paddlepaddle", "paddle2onnx"), extra="paddle",
           description="PaddlePaddle nn.Layer + InputSpec, inference models (.json PIR, .pdmodel + .pdiparams)"),
    Plugin("sklearn", "onnxbridge.frontends.sklearn", requires=("scikit-learn", "skl2onnx"), extra="sklearn",
           description="scikit-learn estimators and pipelines; .joblib/.pkl with --trust, .skops"),
    Plugin("onnx", "onnxbridge.frontends.onnxfile", requires=("onnx", "onnxruntime"),
           description="an existing ONNX model (re-target opset, validate against it)"),
])
