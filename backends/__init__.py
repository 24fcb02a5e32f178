"""Backends: targets a converted ONNX model is turned into, imported only when used.

Each is a module satisfying ``onnxbridge.plugins.Backend`` (``SUFFIXES``, ``PRECISIONS``, ``build``, ``runner``,
``inspect``, ``check`` and the optional members listed there), declared by ``PLUGIN`` (an
``onnxbridge.registry.Plugin``) and an entry point in group ``onnxbridge.backends``, exactly as a third-party backend
is (docs/plugins.md).
"""
