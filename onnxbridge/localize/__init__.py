"""Localization: find the first node where a failed hop's numbers diverge (issue 17).

``probe``: the contract (Checkpoint, Probe, Sides); ``bisect.localize``: the search; ``tolerance``: per-tensor
tolerances; ``onnx_probe``: ONNX models as probes (prefix models) and the ONNX -> ONNX hop.
"""
