"""What ``convert`` and ``validate`` take, declared once: each core option as an ``Option`` (name, kind, default,
help, the Python API's check). From these tables the CLI builds its flags (``cli.main.request_options``), the
Python API checks its arguments (``arguments.check``) and fills in defaults, and the stages read the ``Request``
(``self.request.latency_runs``). A new core option is one entry here; the stage that uses it reads it.

Options a plugin takes (``exporter`` for PyTorch, ``workspace`` for TensorRT...) are declared by the plugin
(``Plugin.options``) and reach it the same way. What the CLI alone offers (``--junit``, ``--fail-on``...) is how
the CLI reports, not part of the request: it lives in ``cli/main.py``.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Mapping

from onnxbridge import arguments as rules
from onnxbridge.options import Option
from onnxbridge.specs import TensorSpec


def names(registry: str) -> str:
    """The installed plugins of ``registry`` ("frontends", "backends"), for help texts."""
    from onnxbridge.plugins import BACKENDS, FRONTENDS

    return ", ".join((FRONTENDS if registry == "frontends" else BACKENDS).names())


def _suffixes() -> str:
    from onnxbridge.plugins import BACKENDS

    found = [s for n in BACKENDS.names() if not BACKENDS.plugin(n).broken for s in BACKENDS.module(n).SUFFIXES]
    return ", ".join(dict.fromkeys(found))


def _targets() -> str:
    from onnxbridge.plugins import BACKENDS

    declared = [(n, getattr(BACKENDS.module(n), "TARGETS", ())) for n in BACKENDS.names() if not BACKENDS.plugin(n).broken]
    return "; ".join(f"{n}: {', '.join(t)}" for n, t in declared if t) or "none installed"


OUTPUT = Option("output", lambda: f"Where to write the model ({_suffixes()}).", kind="output", flags=("-o", "--output"),
                required=True)
FROM = Option("from_", lambda: f"Source kind (default: detected): {names('frontends')}.", flags=("--from",),
              metavar="FRONTEND")
TO = Option("to", lambda: f"Target format: {names('backends')} (default: the one whose files end like -o; a suffix no "
            "backend writes is refused).")
TARGET = Option("target", lambda: f"Backend deployment target ({_targets()}).", metavar="TARGET")
OPSET = Option("opset", "Exact default-domain opset to deliver.", kind="int", low=None)
INPUT_SHAPES = Option("input_shapes", "Shape (and dtype) of an input; creates seeded random sample inputs.",
                      flags=("--input-shape",), multiple=True, metavar="NAME:D1,D2,...[:DTYPE]", default=(),
                      rule=rules.list_of((str, TensorSpec), "'NAME:D1,D2,...' str or TensorSpec"))
DYNAMIC = Option("dynamic", "Make an axis dynamic (validated also at MIN and MAX when given; ONNX sources too).",
                 multiple=True, metavar="NAME:AXIS[:LABEL][:MIN..MAX]", rule=rules.dynamic)
INPUT_NAMES = Option("input_names", "Name the tensor inputs, in order (default: the forward() parameter names).",
                     flags=("--input-name",), multiple=True, metavar="NAME")
OUTPUT_NAMES = Option("output_names", "Name the outputs, in order (default: output, or output_0, output_1, ...).",
                      flags=("--output-name",), multiple=True, metavar="NAME")
VALIDATE = Option("validate", "Compare the result with the source framework.", kind="switch", default=True,
                  show_default=True)
INPUTS = Option("inputs", "Validation inputs: .npz or a folder of .npy.", kind="path", rule=rules.inputs)
PRECISION = Option("precision", "Tolerance policy; fp16 also writes an fp16 model (fp32 inputs and outputs kept).",
                   kind="choice", choices=rules.PRECISIONS, default="fp32", show_default=True)
SEED = Option("seed", "Seed for random inputs.", kind="int", low=0, default=0, show_default=True)
EXTERNAL_DATA = Option("external_data", "Store weights in OUTPUT.data (default: only when over 2 GB).", kind="switch")
REPORT = Option("report", "Write the JSON report here.", kind="file")
TRUST = Option("trust", "Load and run model files that are code: pickles, Keras Lambda layers, and TorchScript, "
               "torch.export, SavedModel, TFLite and Paddle programs that touch files, the network, Python or custom "
               "operators (without it they are checked statically and refused before anything in them runs).",
               kind="flag", default=False)
OPTIMIZE = Option("optimize", "Simplify the graph (onnxscript's optimizer: constant folding, dead and Identity nodes, "
                  "shape arithmetic; bare flag = default) and validate it against the graph before, as a hop.",
                  kind="choice", choices=("basic", "default"), bare="default", default=False,
                  rule=lambda v: None if isinstance(v, bool) or v in ("basic", "default") else
                  "must be True, False, 'basic' or 'default'")
ATOL = Option("atol", "Absolute tolerance, for all outputs or one (repeatable; default by precision, fp32 1e-4).",
              multiple=True, metavar="[OUTPUT:]X", rule=rules.tolerance)
RTOL = Option("rtol", "Relative tolerance, for all outputs or one (repeatable; default by precision, fp32 1e-3).",
              multiple=True, metavar="[OUTPUT:]X", rule=rules.tolerance)
SAMPLES = Option("samples", "Random input batches to compare (besides the grown dynamic-axis sample).", kind="int",
                 low=1, high=1000, default=1, show_default=True)
LATENCY_RUNS = Option("latency_runs", "Time each runtime: median of N warm runs after a warm-up (0: no latency "
                      "figures).", kind="int", low=0, high=10000, default=0, show_default=True)
LOCALIZE = Option("localize", "Find the first diverging node of failed hops (auto), of every hop (on), or not (off); "
                  "mapped back to the source framework's module/layer where it records one.", kind="choice",
                  choices=("auto", "on", "off"), bare="auto", default="off", show_default=True,
                  metavar="[auto|on|off]",
                  rule=lambda v: None if isinstance(v, bool) or v in ("auto", "on", "off") else
                  "must be True, False, 'auto', 'on' or 'off'")
SPLIT_TAIL = Option("split_tail", "Where the backend cannot take part of the model (NonZero, NMS, If/Loop, dynamic "
                    "boxes...), cut the graph before the first node its own check refuses: the artifact holds the "
                    "head, OUTPUT.tail.onnx beside it the rest, for onnxruntime; validated as one pipeline against the "
                    "source. A backend that takes the whole model gets it whole (no tail).", kind="flag",
                    default=False)
# the Python API's only
RENDERERS = Option("renderers", "More reports to write: format (junit, markdown, html) -> path.", kind="value",
                   rule=rules.renderers, cli=False)
PROGRESS = Option("progress", "Show progress lines on stderr.", kind="flag", default=False, cli=False)

# the tables: the options of each command, in the order --help lists them
CONVERT: list[Option] = [OUTPUT, FROM, TO, TARGET, OPSET, INPUT_SHAPES, DYNAMIC, INPUT_NAMES, OUTPUT_NAMES, VALIDATE,
                         INPUTS, PRECISION, SEED, EXTERNAL_DATA, REPORT, TRUST, OPTIMIZE, ATOL, RTOL, SAMPLES,
                         LATENCY_RUNS, LOCALIZE, SPLIT_TAIL, RENDERERS, PROGRESS]
VALIDATE_OPTIONS: list[Option] = [
    INPUTS, FROM, dataclasses.replace(INPUT_SHAPES, help="Shape (and dtype) of an input, for random inputs."),
    dataclasses.replace(PRECISION, help="Tolerance policy."), SEED, REPORT, TRUST, ATOL, RTOL, SAMPLES, LATENCY_RUNS,
    dataclasses.replace(LOCALIZE, default="auto"), RENDERERS, PROGRESS]
# ``adapt``: ``convert`` of an ONNX model to an opset (the CLI's command; the Python API's ``adapt`` is in memory)
ADAPT: list[Option] = [
    dataclasses.replace(OUTPUT, help="Where to write the adapted model.", kind="file", required=False),
    dataclasses.replace(OPSET, help="Target default-domain opset.", required=True),
    dataclasses.replace(VALIDATE, help="Compare the adapted model with the original in onnxruntime."),
    INPUTS, REPORT, ATOL, RTOL, SAMPLES, LATENCY_RUNS]
TABLES: dict[str, list[Option]] = {"convert": CONVERT, "validate": VALIDATE_OPTIONS, "adapt": ADAPT}


def table(command: str) -> list[Option]:
    return TABLES[command]


def declared(name: str) -> Option | None:
    """The core option called ``name`` in any table (the first, where tables share it)."""
    return next((o for t in TABLES.values() for o in t if o.name == name), None)


def request_type(command: str) -> type:
    """The frozen dataclass of ``command``'s request: one field per option of its table, with its default."""
    options = table(command)
    key = (command, tuple(options))
    if key not in _TYPES:
        fields = [(o.name, Any, dataclasses.field(default=o.default)) for o in options]
        _TYPES[key] = dataclasses.make_dataclass(f"{command.capitalize()}Request", fields, frozen=True)
    return _TYPES[key]


_TYPES: dict[tuple, type] = {}


def split(command: str, given: Mapping[str, Any]) -> tuple[Any, dict]:
    """``given`` (keyword arguments) as ``command``'s request (defaults where absent or None, except where None
    means something: a switch's "decide") and the rest (plugin options, refused by the spine where no plugin takes
    them)."""
    options = {o.name: o for o in table(command)}
    values = {k: v for k, v in given.items() if k in options and (v is not None or options[k].kind == "switch")}
    return request_type(command)(**values), {k: v for k, v in given.items() if k not in options}


def signature(command: str, head: list[inspect.Parameter], tail: list[inspect.Parameter]) -> inspect.Signature:
    """The Python API's signature of ``command``: ``head`` (positional parameters), one keyword-only parameter per
    option, then ``tail`` (``timeout``, ``**options``)."""
    keyword = [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default) for o in table(command)
               if o.name not in {p.name for p in head}]
    return inspect.Signature([*head, *keyword, *tail])
