"""Rewrite rules, grouped by what changed; importing this package registers them all."""
from onnxbridge.adapters.rules import axes, softmax, resize, pools, norms, decompose, misc, broadcast  # noqa: F401,E402
