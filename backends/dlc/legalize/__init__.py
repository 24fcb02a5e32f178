"""The rules for onnxruntime's QNN execution provider (the DLC backend), by the ops they rewrite: ops it refuses, or
that its HTP computes wrongly (measured on onnxruntime-qnn 2.7's simulator, each noted where it applies), become
ops it takes, exactly (or up to float rounding: textbook identities such as sinh = (e^x - e^-x) / 2 count). A lone
``Erf`` or a ``Tan`` has no such rewrite and is left for the backend to refuse. The set, in the order it applies, is
in ``rules``; the engine that applies it (and what rules share, GELU's pattern among it) is ``onnxbridge.legalize``."""
