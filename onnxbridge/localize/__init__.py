"""Localization: find the first node where a failed hop's numbers diverge (issue 17).

``probe``: the contract (Checkpoint, Probe, Sides); ``bisect.localize``: the search; ``tolerance``: per-tensor
tolerances (elementwise, or the hop's factor of the fp16 emulation's error); ``onnx_probe``: ONNX models as probes
(prefix models, the fp16 emulation's too) and the ONNX -> ONNX hop.
"""
