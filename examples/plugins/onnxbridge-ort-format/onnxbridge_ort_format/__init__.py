"""An onnxbridge backend outside onnxbridge: the ONNX Runtime mobile format (``.ort``), written by onnxruntime itself
(a session that saves its optimized graph in ORT format) and run by onnxruntime for the hop. It uses only the public
plugin contract (docs/plugins.md): a ``PLUGIN`` declaration with one option, and the backend functions."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from onnxbridge.options import Option
from onnxbridge.registry import Plugin

PLUGIN = Plugin("ort", "onnxbridge_ort_format", requires=("onnxruntime",),
                description="ONNX Runtime mobile format (.ort), run with onnxruntime",
                options=(Option("optimization", "Graph optimizations saved into the .ort file (default: all).",
                                kind="choice", choices=("basic", "extended", "all")),))

NAME = "ort"
SUFFIXES = (".ort",)
PRECISIONS = ("fp32",)
TARGETS = ()
MAX_OPSET = None
LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


def _options(optimization: str, saved: Path | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[optimization])
    if saved is not None:
        options.optimized_model_filepath = str(saved)
        options.add_session_config_entry("session.save_model_format", "ORT")
    return options


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32", context=None,
          optimization: str = "all"):
    """Write ``output`` (.ort) atomically: onnxruntime optimizes the model at ``optimization`` and saves it.
    ``onnxbridge.atomic.placing`` gives the path to write in a staging folder beside ``output`` and places it over
    ``output`` only when the block ends without an error (docs/plugins.md)."""
    import onnxruntime as ort

    from onnxbridge.atomic import placing
    from onnxbridge.plugins import BuildResult

    with placing(Path(output)) as staged:
        ort.InferenceSession(str(onnx_path), _options(optimization, staged), providers=["CPUExecutionProvider"])
    note = f"ORT format saved by onnxruntime {ort.__version__} at optimization level {optimization}"
    return BuildResult({"onnxruntime": ort.__version__, "optimization": optimization}, notes=[note])


class Runner:
    """onnxruntime on the saved .ort file (CPU)."""

    def __init__(self, path: Path):
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.what_ran = f"onnxruntime {ort.__version__} (CPU) on {Path(path).name}"

    def __call__(self, feeds: Mapping) -> list:
        names = {i.name for i in self.session.get_inputs()}
        return self.session.run(None, {k: v for k, v in feeds.items() if k in names})


def runner(path: Path, *, onnx_path: Path | None = None) -> Runner:
    return Runner(Path(path))


def check(onnx_path: Path, context=None) -> list[str]:
    """What stops onnxruntime from loading the model (one line), else nothing."""
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(onnx_path), _options("basic"), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own refusal is the blocker
        return [" ".join(str(exc).split())[:300]]
    return []


def inspect(path: str | Path) -> dict:
    """Format, size and I/O of a .ort file, read by onnxruntime."""
    session = Runner(Path(path)).session

    def io(values):
        return [{"name": v.name, "shape": list(v.shape), "dtype": v.type} for v in values]
    return {"format": "ort", "path": str(path), "bytes": Path(path).stat().st_size,
            "inputs": io(session.get_inputs()), "outputs": io(session.get_outputs())}
