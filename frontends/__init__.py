"""Frontends: one per source framework, imported only when used.

A frontend module defines ``accepts(source) -> bool`` (cheap: no framework import) and
``load(source, **options) -> SourceModel`` (the ``onnxbridge.plugins.Frontend`` contract). Options a frontend takes beyond the
common ones (sample_inputs, input_shapes, dynamic, input_names, trust, seed) are declared in its
``PLUGIN.options``; the spine refuses an option the chosen frontend does not declare.

A frontend declares itself with ``PLUGIN`` and an entry point in group ``onnxbridge.frontends`` (see
``onnxbridge.plugins``); frontends are tried in ``Plugin.priority`` order when no ``--from`` is given.
"""
