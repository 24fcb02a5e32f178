"""Backends: targets a converted ONNX model is turned into, imported only when used.

A backend module defines:

- ``SUFFIXES``: how its artifacts end (``inspect`` and ``validate`` pick the backend by suffix);
- ``inspect(path) -> dict``: what the artifact holds, read without running it;
- ``runner(path, *, onnx_path=None) -> callable(feeds) -> outputs``: runs a saved artifact on this host, or raises
  ``HopSkipped`` saying why it cannot (no GPU, no simulator): that hop is reported as skipped, never passed.

A backend other than onnx also defines:

- ``build(onnx_path, output, *, target, precision, context, **options) -> BuildResult``: writes ``output``
  atomically and returns an ``onnxbridge.plugins.BuildResult`` (facts, notes, warnings, the precision applied, and a
  ``runner`` for the hop where ``runner(output)`` cannot run what was built, or the ``HopSkipped`` saying why);
  ``context`` is a ``BuildContext``;
- ``check(model, context) -> list[str]``: every blocker, without building (``onnxbridge check --targets``);
- optionally ``companions(output) -> list[Path]``: files the build writes beside ``output`` (an IR's weights), removed
  with it when a run fails and counted in the artifact's size; ``rewrites(onnx_path, context)``: see ``check``.

A backend declares itself with ``PLUGIN`` (an ``onnxbridge.registry.Plugin``: its name, module, the distributions it
needs and their extra) and an entry point in group ``onnxbridge.backends`` naming it; ``onnxbridge.plugins`` finds
it there, and whether it is usable is the registry's business (``BACKENDS.status``, from package metadata).
"""
