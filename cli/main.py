"""``onnxbridge`` commands. Only click is imported at start-up; each command imports what it uses.

Exit codes: 0 ok, 1 validation failed, 2 bad input or usage, 3 backend/toolchain unavailable,
4 internal error (a bug: please report it with --debug output), 5 validation incomplete (a hop was skipped:
it did not run here, e.g. TensorRT without a GPU; --allow-skipped accepts it).
"""
from __future__ import annotations

import functools
import sys

import click

from onnxbridge._version import __version__

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNAVAILABLE, EXIT_INTERNAL, EXIT_SKIPPED = 0, 1, 2, 3, 4, 5


def _stderr(message: str) -> None:
    """One line on stderr; control characters a message quotes from a model are written out, never sent."""
    from onnxbridge.renderers.text import printable

    click.echo(printable(message), err=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so that it ends as Ctrl-C does: its worker stopped, its staging
    and scratch folders removed, its output lock released, the output as it was."""


def _terminate(signum, frame) -> None:  # noqa: ARG001 - signal handler
    raise Terminated()


def handle_errors(fn):
    """One line and an exit code for every error; the traceback only with --debug."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        debug = ctx.find_root().params.get("debug", False)
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Terminated:
            _stderr("terminated")
            sys.exit(143)
        except KeyboardInterrupt:
            _stderr("interrupted")
            sys.exit(130)
        except SystemExit as exc:  # raised by code the command ran for the model (onnxbridge's own exits come after)
            if _reader_gone(exc):
                raise
            from onnxbridge.sources import exit_call

            _stderr(f"error: the model's code (or a library it calls) called {exit_call(exc)}")
            sys.exit(EXIT_BAD_INPUT)
        except Exception as exc:
            from onnxbridge.errors import OnnxBridgeError

            if debug:
                raise
            if isinstance(exc, OnnxBridgeError):
                _stderr(f"error: {exc.one_line()}")
                sys.exit(exc.exit_code)
            text = " ".join(str(exc).split())[:400]
            _stderr(f"internal error: {type(exc).__name__}: {text} (run with --debug for the traceback)")
            sys.exit(EXIT_INTERNAL)

    return wrapper


def _reader_gone(exc: SystemExit) -> bool:
    """Whether rich raised ``exc`` because stdout's reader left (``... | head``): an exit, not the model's."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "on_broken_pipe"


PIPED_WIDTH = 10_000  # stdout is a file or a pipe (CI logs): lines as long as they need, never cut with "…"


def _console(ctx: click.Context):
    """A rich console for results, or None with --quiet (rich is then never imported). On a terminal it takes the
    terminal's width; piped, ``$COLUMNS`` when set, else ``PIPED_WIDTH`` (rich would otherwise assume 80 columns and
    cut shapes and numbers in tables)."""
    if ctx.find_root().params.get("quiet", False):
        return None
    import os

    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "").strip()
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH)


def _progress(ctx: click.Context) -> bool:
    return not ctx.find_root().params.get("quiet", False) and sys.stderr.isatty()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="onnxbridge")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def cli(quiet: bool, debug: bool) -> None:
    """Move trained models between frameworks and runtimes through ONNX, validated hop by hop.

    \b
    Exit codes: 0 ok, 1 validation failed, 2 bad input, 3 backend unavailable, 4 internal error,
    5 validation incomplete (a hop was skipped, e.g. TensorRT without a GPU; --allow-skipped accepts it).
    """


TRUST_HELP = ("Load and run model files that are code: pickles, Keras Lambda layers, and TorchScript, torch.export, "
              "SavedModel, TFLite and Paddle programs that touch files, the network, Python or custom operators "
              "(without it they are checked statically and refused before anything in them runs).")
FROM_HELP = "Source kind (default: detected): torch, tensorflow, jax, paddle, sklearn, onnx."


def report_options(fn):
    """Tolerances, samples and the renderers every validating command offers."""
    for option in reversed([
        click.option("--atol", multiple=True, metavar="[OUTPUT:]X",
                     help="Absolute tolerance, for all outputs or one (repeatable; default by precision, fp32 1e-4)."),
        click.option("--rtol", multiple=True, metavar="[OUTPUT:]X",
                     help="Relative tolerance, for all outputs or one (repeatable; default by precision, fp32 1e-3)."),
        click.option("--samples", type=click.IntRange(1, 1000), default=1, show_default=True,
                     help="Random input batches to compare (besides the grown dynamic-axis sample)."),
        click.option("--latency-runs", type=click.IntRange(0, 10000), default=0, show_default=True,
                     help="Time each runtime: median of N warm runs after a warm-up (0: no latency figures)."),
        click.option("--fail-on", type=click.Choice(["error", "warning"]), default="error", show_default=True,
                     help="Exit 1 on failed hops only (error), or also on warnings and skipped samples (warning)."),
        click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML (one test case per output)."),
        click.option("--markdown", type=click.Path(dir_okay=False), help="Write a Markdown summary (CI comments)."),
        click.option("--html", type=click.Path(dir_okay=False), help="Write a self-contained HTML report."),
    ]):
        fn = option(fn)
    return fn


ALLOW_SKIPPED_HELP = ("Exit 0, not 5, when validation is incomplete: a hop was skipped because it cannot run here "
                      "(e.g. TensorRT without a GPU). The report still says skipped, never passed.")


def allow_skipped_option(fn):
    """``--allow-skipped``: a skipped hop (status ``skipped``) is exit 0 instead of ``EXIT_SKIPPED``."""
    return click.option("--allow-skipped", is_flag=True, help=ALLOW_SKIPPED_HELP)(fn)


def localize_option(default: str):
    """``--localize [auto|on|off]``: name the first node whose output diverges on failed hops (auto), every hop
    (on) or none (off); bare ``--localize`` is auto."""
    return click.option("--localize", type=click.Choice(["auto", "on", "off"]), is_flag=False, flag_value="auto",
                        default=default, show_default=True, metavar="[auto|on|off]",
                        help="Find the first diverging node of failed hops (auto), of every hop (on), or not (off); "
                             "mapped back to the source framework's module/layer where it records one.")


TIMEOUT_HELP = ("Seconds the whole command may take, then exit 2 naming the step that ran out (default: "
                "$ONNXBRIDGE_TIMEOUT_S, else 3600; 0: no limit).")


def timeout_option(fn):
    """``--timeout SECONDS``: the command runs within that time budget (``onnxbridge.deadline``)."""

    def start(ctx: click.Context, param: click.Parameter, value: float | None) -> None:
        from onnxbridge import deadline

        try:
            ctx.with_resource(deadline.budget(value))
        except Exception as exc:  # a bad ONNXBRIDGE_TIMEOUT_S
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None

    return click.option("--timeout", type=click.FloatRange(min=0), metavar="SECONDS", expose_value=False,
                        callback=start, help=TIMEOUT_HELP)(fn)


def _renderers(junit, markdown, html) -> dict:
    return {fmt: path for fmt, path in (("junit", junit), ("markdown", markdown), ("html", html)) if path}


def _backend_names() -> list[str]:
    """The installed backends (the onnx output first), for help texts."""
    from onnxbridge.plugins import BACKENDS

    return BACKENDS.names()


def plugin_options(kind: str):
    """Click flags for every option the ``kind`` plugins ("frontend", "backend") declare (``onnxbridge.options``):
    one flag per name, its help prefixed with the plugins that take it; the spine refuses it for the others."""
    def decorate(fn):
        from onnxbridge.plugins import BACKENDS, FRONTENDS

        registry = FRONTENDS if kind == "frontend" else BACKENDS
        selector = "--from" if kind == "frontend" else "--to"
        for name, by_plugin in reversed(list(registry.options().items())):
            fn = _flag(name, by_plugin, selector)(fn)
        return fn
    return decorate


def _plugin_values(options: dict) -> dict:
    """Plugin option values as the Python API takes them: repeated flags as lists."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}


def _flag(name: str, by_plugin: dict, selector: str):
    """One click option from the declarations of ``name`` by several plugins (choices merged)."""
    first = next(iter(by_plugin.values()))
    takers = ", ".join(by_plugin)
    helps = list(dict.fromkeys(o.help for o in by_plugin.values()))
    text = f"[{selector} {takers}] " + " ".join(helps if len(helps) == 1 else
                                                 [f"{p}: {o.help}" for p, o in by_plugin.items()])
    types = {"int": click.IntRange(1), "path": click.Path(exists=True), "file": click.Path(dir_okay=False),
             "choice": click.Choice(list(dict.fromkeys(c for o in by_plugin.values() for c in o.choices)))}
    return click.option(first.flag, name, type=types.get(first.kind), multiple=first.multiple, metavar=first.metavar,
                        help=text)


@cli.command()
@click.argument("source")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Where to write the model (.onnx, .mlpackage, .dlc, .engine).")
@click.option("--from", "from_", metavar="FRONTEND", help=FROM_HELP)
@click.option("--to", help=f"Target format: {', '.join(_backend_names())} (default: the one whose files end like "
              "-o; a suffix no backend writes is refused).")
@click.option("--target", metavar="TARGET", help="Backend deployment target (Core ML: iOS15, iOS16 (default), iOS17, iOS18).")
@click.option("--opset", type=click.IntRange(7, 30), help="Exact default-domain opset to deliver.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME:D1,D2,...[:DTYPE]",
              help="Shape (and dtype) of an input; creates seeded random sample inputs.")
@click.option("--dynamic", multiple=True, metavar="NAME:AXIS[:LABEL][:MIN..MAX]",
              help="Make an axis dynamic (validated also at MIN and MAX when given; ONNX sources too).")
@click.option("--input-name", "input_names", multiple=True, metavar="NAME",
              help="Name the tensor inputs, in order (default: the forward() parameter names).")
@click.option("--output-name", "output_names", multiple=True, metavar="NAME",
              help="Name the outputs, in order (default: output, or output_0, output_1, ...).")
@click.option("--exporter", type=click.Choice(["auto", "dynamo", "torchscript"]), default="auto",
              show_default=True, help="PyTorch exporter (auto: the one that validates: TorchScript below opset 18, dynamo "
              "at 18 moved down by the adapters when TorchScript fails; else dynamo).")
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Compare the result with the source framework.")
@click.option("--inputs", type=click.Path(exists=True), help="Validation inputs: .npz or a folder of .npy.")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "int8"]), default="fp32", show_default=True,
              help="Tolerance policy; fp16 also writes an fp16 model (fp32 inputs and outputs kept).")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="Seed for random inputs.")
@click.option("--external-data/--no-external-data", default=None,
              help="Store weights in OUTPUT.data (default: only when over 2 GB).")
@click.option("--report", type=click.Path(dir_okay=False), help="Write the JSON report here.")
@click.option("--trust", is_flag=True, help=TRUST_HELP)
@click.option("--optimize", type=click.Choice(["basic", "default"]), is_flag=False, flag_value="default",
              default=None, help="Simplify the graph (onnxscript's optimizer: constant folding, dead and Identity "
              "nodes, shape arithmetic; bare flag = default) and validate it against the graph before, as a hop.")
@report_options
@allow_skipped_option
@localize_option("off")
@plugin_options("frontend")
@plugin_options("backend")
@timeout_option
@click.pass_context
@handle_errors
def convert(ctx, source, output, from_, to, target, opset, input_shapes, dynamic, input_names, output_names, exporter,
            validate, inputs, precision, atol, rtol, samples, latency_runs, fail_on, junit, markdown, html, localize,
            seed, external_data, report, trust, optimize, allow_skipped, **options):
    """Convert SOURCE to ONNX (exactly --opset) and validate it against the source framework.

    SOURCE is a model file or folder (.onnx; PyTorch .pt2, TorchScript .pt; TensorFlow SavedModel
    folder, Keras .keras/.h5, .tflite; Paddle .json/.pdmodel inference model; scikit-learn .joblib/
    .pkl with --trust, .skops) or a factory 'file.py:function' whose function returns the model, or
    (model, sample_inputs).
    """
    from onnxbridge.spine import convert as run_convert

    result = run_convert(source, to=to, output=output, opset=opset, dynamic=list(dynamic), validate=validate,
                         inputs=inputs, input_shapes=list(input_shapes), input_names=list(input_names) or None,
                         output_names=list(output_names) or None, exporter=exporter, from_=from_,
                         trust=trust, precision=precision, atol=list(atol) or None, rtol=list(rtol) or None,
                         samples=samples, latency_runs=latency_runs, seed=seed, external_data=external_data,
                         report=report,
                         progress=_progress(ctx), target=target, renderers=_renderers(junit, markdown, html),
                         localize=localize, optimize=optimize or False, **_plugin_values(options))
    rep = result.report
    console = _console(ctx)
    if console is not None:
        from onnxbridge.renderers.text import console_markup

        art = rep["artifact"]
        built = f"{art['format']}, from ONNX " if "backend" in art else ""
        console.print(console_markup(
            f"wrote {art['path']} ({built}opset {art['opset']}, IR {art['ir_version']}, {art['bytes']:,} bytes"
            + (f", external data {', '.join(art['external_data'])}" if art["external_data"] else "") + ")"))
    _finish(ctx, rep, console, fail_on, allow_skipped)


WARNINGS_SHOWN = 10  # warning lines printed after the table (all of them are in the JSON report)
WARNING_CHARS = 300  # each cut to one line of at most this many characters


def _warning_lines(warnings: list[str]) -> list[str]:
    """The report's warnings as printed: one line each (whitespace folded, cut at ``WARNING_CHARS``), duplicates
    dropped, at most ``WARNINGS_SHOWN`` and a line counting the rest."""
    lines = list(dict.fromkeys(" ".join(str(w).split()) for w in warnings if str(w).strip()))
    cut = [w if len(w) <= WARNING_CHARS else w[:WARNING_CHARS - 3] + "..." for w in lines[:WARNINGS_SHOWN]]
    more = len(lines) - len(cut)
    return cut + ([f"{more} more warning(s) in the JSON report (--report)"] if more > 0 else [])


def _finish(ctx, rep: dict, console, fail_on: str = "error", allow_skipped: bool = False) -> None:
    """Print the report (the spine wrote its files), its notes and warnings (an exporter freezing a traced value,
    ... explain a verdict), and exit 1 on failure (or on warnings with --fail-on warning), ``EXIT_SKIPPED`` when a
    hop did not run (unless ``allow_skipped``)."""
    from onnxbridge import report as reports
    from onnxbridge.renderers.text import console_markup

    if console is not None:
        reports.render(rep, console)
        for line in rep["notes"]:
            console.print(f"[dim]note: {console_markup(line)}[/]")
        for line in _warning_lines(rep["warnings"]):
            console.print(f"[dim yellow]warning: {console_markup(line)}[/]")
        console.print(f"status: [bold]{rep['status']}[/]")
    if rep["status"] == "failed":
        _stderr(f"error: {reports.failure_summary(rep)}")
        ctx.exit(EXIT_FAILED)
    if reports.incomplete(rep) and not allow_skipped:
        _stderr(f"error: {reports.skipped_summary(rep)} (exit {EXIT_SKIPPED}; --allow-skipped accepts it)")
        ctx.exit(EXIT_SKIPPED)
    warned = reports.warnings_of(rep)
    if fail_on == "warning" and warned:
        _stderr(f"error: --fail-on warning: {len(warned)} warning(s), first: {warned[0][:300]}")
        ctx.exit(EXIT_FAILED)


@cli.command()
@click.argument("source")
@click.argument("converted", type=click.Path())
@click.option("--inputs", type=click.Path(exists=True), help="Inputs: .npz or a folder of .npy.")
@click.option("--from", "from_", metavar="FRONTEND", help=FROM_HELP)
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME:D1,D2,...[:DTYPE]")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "int8"]), default="fp32", show_default=True,
              help="Tolerance policy.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True)
@click.option("--report", type=click.Path(dir_okay=False), help="Write the JSON report here.")
@click.option("--trust", is_flag=True, help=TRUST_HELP)
@report_options
@allow_skipped_option
@localize_option("auto")
@plugin_options("frontend")
@timeout_option
@click.pass_context
@handle_errors
def validate(ctx, source, converted, inputs, from_, input_shapes, precision, atol, rtol, samples, latency_runs,
             fail_on, junit, markdown, html, localize, seed, report, trust, allow_skipped, **options):
    """Compare CONVERTED (ONNX) with SOURCE on the same inputs; exit 1 if they differ."""
    from onnxbridge.spine import validate as run_validate

    rep = run_validate(source, converted, inputs, from_=from_, input_shapes=list(input_shapes), trust=trust,
                       precision=precision, atol=list(atol) or None, rtol=list(rtol) or None, samples=samples,
                       latency_runs=latency_runs, seed=seed, report=report, progress=_progress(ctx),
                       renderers=_renderers(junit, markdown, html), localize=localize, **_plugin_values(options))
    _finish(ctx, rep, _console(ctx), fail_on, allow_skipped)


@cli.command()
@click.argument("model", type=click.Path())
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Where to write the adapted model.")
@click.option("--opset", type=click.IntRange(7, 30), required=True, help="Target default-domain opset.")
@click.option("--check", "check_only", is_flag=True, help="List every blocker; write nothing.")
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Compare the adapted model with the original in onnxruntime.")
@click.option("--inputs", type=click.Path(exists=True), help="Validation inputs: .npz or a folder of .npy.")
@click.option("--report", type=click.Path(dir_okay=False), help="Write the JSON report here.")
@report_options
@timeout_option
@click.pass_context
@handle_errors
def adapt(ctx, model, output, opset, check_only, validate, inputs, report, atol, rtol, samples, latency_runs, fail_on,
          junit, markdown, html):
    """Move MODEL (ONNX) to another opset, up or down, with unchanged numbers."""
    from onnxbridge.errors import BadInputError

    if check_only:
        from onnxbridge.spine import check_opset

        from onnxbridge.renderers.text import console_markup, printable

        rep = check_opset(model, opset, report=report, renderers=_renderers(junit, markdown, html))
        for line in rep["blockers"]:  # they quote node names from the model
            click.echo(printable(line))
        console = _console(ctx)
        if not rep["blockers"] and console is not None:
            console.print(f"{console_markup(model)} can move to opset {opset}")
        ctx.exit(EXIT_BAD_INPUT if rep["blockers"] else EXIT_OK)
    if output is None:
        raise BadInputError("adapt needs -o OUTPUT (or --check)")
    from onnxbridge.spine import convert as run_convert

    result = run_convert(model, from_="onnx", output=output, opset=opset, validate=validate, inputs=inputs,
                         atol=list(atol) or None, rtol=list(rtol) or None, samples=samples,
                         latency_runs=latency_runs, report=report, progress=_progress(ctx),
                         renderers=_renderers(junit, markdown, html))
    console = _console(ctx)
    if console is not None:
        from onnxbridge.renderers.text import console_markup

        art = result.report["artifact"]
        console.print(console_markup(f"wrote {art['path']} (opset {art['opset']}, IR {art['ir_version']})"))
    _finish(ctx, result.report, console, fail_on)


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--targets", required=True, metavar="NAME[,NAME...]",
              help=f"Backends to check against: {', '.join(_backend_names()[1:])} (comma-separated or repeated).",
              multiple=True)
@click.option("--opset", type=click.IntRange(7, 30), help="Also check that the model can move to this opset.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME:D1,D2,...",
              help="Shapes the conversion would fix (a DLC needs static shapes).")
@click.option("--target", metavar="TARGET", help="Deployment target to check against (Core ML: iOS15..iOS18).")
@click.option("--report", type=click.Path(dir_okay=False), help="Write the JSON report here.")
@timeout_option
@click.pass_context
@handle_errors
def check(ctx, model, targets, opset, input_shapes, target, report):
    """List every node or setting of MODEL (ONNX) that stops it from reaching each target, without converting.

    Exits 0 when nothing blocks, 2 when something does.
    """
    from onnxbridge.renderers.text import console_markup, printable
    from onnxbridge.spine import check_targets

    names = [t.strip() for item in targets for t in item.split(",") if t.strip()]
    rep = check_targets(model, names, opset=opset, input_shapes=list(input_shapes), target=target, report=report)
    console = _console(ctx)
    for line in rep["blockers"]:  # they quote node names from the model
        click.echo(printable(line))
        target, _, blocker = line.partition(": ")
        advice = rep["targets"].get(target, {}).get("hints", [])
        found = rep["targets"].get(target, {}).get("blockers", [])
        if blocker in found and advice[found.index(blocker)]:
            click.echo(f"  hint: {printable(advice[found.index(blocker)])}")
    if console is not None:
        for name, row in rep["targets"].items():
            state = "[green]can convert[/]" if not row["blockers"] else f"[red]{len(row['blockers'])} blocker(s)[/]"
            tool = "" if row["available"] else f" [dim](toolchain not installed: {console_markup(row['reason'])})[/]"
            rewrites = (f" [dim](rewrites: {console_markup(', '.join(row['rewrites']))})[/]" if row.get("rewrites")
                        else "")
            console.print(f"{name}: {state}{tool}{rewrites}")
    ctx.exit(EXIT_BAD_INPUT if rep["blockers"] else EXIT_OK)


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@timeout_option
@click.pass_context
@handle_errors
def inspect(ctx, model, as_json):
    """What MODEL holds: for ONNX, opsets, IR, I/O, op histogram, parameters and external data; for a backend's
    artifact (.mlpackage, .dlc, .engine), its format, I/O and what built it."""
    import json

    from onnxbridge.spine import inspect_artifact

    info = inspect_artifact(model)
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        from onnxbridge.inspection import render

        console = _console(ctx)
        if console is not None:
            render(info, console)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def doctor(ctx, as_json):
    """Every frontend and backend: available or why not, with versions."""
    import json

    from onnxbridge.plugins import BACKENDS, FRONTENDS
    from onnxbridge.report import environment

    rows = [FRONTENDS.status(n) for n in FRONTENDS.names()] + [BACKENDS.status(n) for n in BACKENDS.names()]
    info = {"environment": environment(), "plugins": rows}
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    from rich.table import Table

    env = info["environment"]
    console = _console(ctx)
    if console is None:
        return
    console.print(f"onnxbridge {env['onnxbridge']}, Python {env['python']}, {env['platform']}, "
                  + ", ".join(f"{k} {v}" for k, v in env["packages"].items()))
    from rich.markup import escape

    table = Table("kind", "name", "status", "versions", "what")
    for r in rows:  # escaped: an install hint's 'onnxbridge[qnn]' is not markup
        status = "[green]available[/]" if r["available"] else f"[red]unavailable[/]: {escape(r['reason'])}"
        versions = ", ".join(f"{k} {v or '-'}" for k, v in r["versions"].items())
        table.add_row(escape(r["kind"]), escape(r["name"]), status, escape(versions), escape(r["description"]))
    console.print(table)


@cli.command()
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "outdir", required=True, type=click.Path(file_okay=False),
              help="Folder for the cells (MODEL/TARGET-PRECISION-opsetN/) and matrix.json/.xml/.md/.html.")
@click.option("--workers", type=click.IntRange(1, 1024), help="Cells run at once (default: the CPU cores).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: a process per cell on this machine; ray: Ray tasks (a local Ray, or --ray-address).")
@click.option("--ray-address", metavar="ADDR", help="Join this Ray cluster instead of starting a local one.")
@click.option("--only", multiple=True, metavar="GLOB", help="Run only the cells whose name (MODEL/TARGET-PRECISION-"
              "opsetN) matches (repeatable).")
@click.option("--baseline", type=click.Path(dir_okay=False),
              help="An earlier matrix.json: cells that passed there and not now are regressions (exit 1).")
@click.option("--no-cache", "no_cache", is_flag=True, help="Run every cell, even those that passed before with the "
              "same inputs.")
@click.option("--timeout", type=click.FloatRange(min=1), metavar="S", help="Seconds a cell may take (then: error).")
@click.option("--allow-skipped", is_flag=True, help="Exit 0, not 5, when cells were skipped (not run or not compared: "
              "a target that does not apply the precision or is not installed, a hop that needs a GPU). They stay "
              "skipped in the summaries, never passed.")
@click.pass_context
@handle_errors
def matrix(ctx, manifest, outdir, workers, executor, ray_address, only, baseline, no_cache, timeout, allow_skipped):
    """Convert and validate every model x target x precision x opset of MANIFEST (TOML), each cell in a process of
    its own; reuses cells that passed with the same inputs. Exit 1 on a failed or error cell or a regression, 5 when
    cells were skipped (unless --allow-skipped)."""
    from onnxbridge.matrix import matrix as run_matrix

    result = run_matrix(manifest, outdir, workers=workers, executor=executor, ray_address=ray_address,
                        only=list(only), baseline=baseline, cache=not no_cache, timeout=timeout,
                        progress=not ctx.find_root().params.get("quiet", False))  # a bar on a terminal, else lines
    console = _console(ctx)
    if console is not None:
        from onnxbridge.renderers.text import console_markup as escape  # names and reasons: shown, never sent

        counts = ", ".join(f"{n} {status}" for status, n in result["counts"].items() if n)
        cached = sum(1 for c in result["cells"] if c.get("cached"))
        console.print(f"{len(result['cells'])} cells: {counts}" + (f" ({cached} reused)" if cached else ""))
        for name in result["regressions"]:
            console.print(f"[red]regression[/]: {escape(name)}")
        for cell in result["cells"]:
            if cell["status"] in ("failed", "error"):
                console.print(f"[red]{cell['status']}[/] {escape(cell['name'])}: {escape(cell.get('reason') or '')}")
            elif cell["status"] == "skipped":
                console.print(f"[dim]skipped {escape(cell['name'])}: {escape(cell.get('reason') or '')}[/]")
        console.print(f"wrote {outdir}/matrix.json, matrix.xml, matrix.md, matrix.html")
    if result["status"] == "skipped" and not allow_skipped:
        skipped = [c for c in result["cells"] if c["status"] == "skipped"]
        first = skipped[0]
        _stderr(f"error: matrix incomplete: {len(skipped)} cell(s) skipped, first {first['name']}: "
                f"{' '.join(str(first.get('reason') or 'not run').split())[:300]} (exit {EXIT_SKIPPED}; "
                "--allow-skipped accepts it)")
        ctx.exit(EXIT_SKIPPED)
    ctx.exit(EXIT_FAILED if result["status"] == "failed" else EXIT_OK)


@cli.command()
@click.argument("source")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the .npz.")
@click.option("--batch", type=click.IntRange(1), metavar="N", help="Axis 0 of every input at N (values drawn afresh).")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True,
              help="0: the very sample validation uses first; another seed: a batch drawn like it (as --samples).")
@click.option("--calibration", type=click.IntRange(1), metavar="N",
              help="N batches stacked along a new axis 0 (for --calibration of int8 builds).")
@click.option("--from", "from_", metavar="FRONTEND", help=FROM_HELP)
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME:D1,D2,...[:DTYPE]",
              help="Shape (and dtype) of an input (sources that record none, e.g. TorchScript).")
@click.option("--dynamic", multiple=True, metavar="NAME:AXIS[:LABEL][:MIN..MAX]",
              help="Open an axis the source fixes (e.g. x:0 for --batch on an ONNX model with batch 1).")
@click.option("--trust", is_flag=True, help=TRUST_HELP)
@plugin_options("frontend")
@timeout_option
@click.pass_context
@handle_errors
def inputs(ctx, source, output, batch, seed, calibration, from_, input_shapes, dynamic, trust, **options):
    """Write sample inputs for SOURCE to an .npz (arrays named after its inputs), drawn by the sampler validation
    uses: for --inputs of convert/validate, or --calibration N batches for int8 builds."""
    from onnxbridge.inputfile import write_inputs

    info = write_inputs(source, output, batch=batch, seed=seed, calibration=calibration, from_=from_,
                        input_shapes=list(input_shapes), dynamic=list(dynamic), trust=trust,
                        **_plugin_values(options))
    console = _console(ctx)
    if console is not None:
        from onnxbridge.renderers.text import console_markup as escape  # input names: shown, never sent

        arrays = ", ".join(f"{k} {'x'.join(map(str, v['shape'])) or 'scalar'} {v['dtype']}"
                           for k, v in info["arrays"].items())
        console.print(escape(f"wrote {info['path']} ({arrays}; {info['origin']})"))


@cli.command()
@click.argument("tool", type=click.Choice(["paddle2onnx"]))
@click.option("--dir", "directory", type=click.Path(file_okay=False), metavar="DIR",
              help="Where to make the environment (default: $ONNXBRIDGE_HOME/paddle2onnx, ~/.cache/onnxbridge).")
@click.pass_context
@handle_errors
def setup(ctx, tool, directory):
    """Make an environment of its own for a converter that cannot share onnxbridge's: paddle2onnx pins onnx<=1.17,
    so onnxbridge[all] installs Paddle but runs paddle2onnx from there (found without configuration)."""
    from onnxbridge.frontends.paddle import environment

    if directory:
        import os

        if os.environ.get(environment.ENV_VAR) is None and environment.default_dir() != environment.Path(directory):
            _stderr(f"note: set {environment.ENV_VAR}={directory}/bin/python for onnxbridge to find it")
    console = _console(ctx)
    if console is not None:
        console.print("installing paddle2onnx and paddlepaddle into an environment of their own ...")
    made = environment.setup(directory)
    if console is not None:
        from rich.markup import escape

        console.print(escape(f"paddle2onnx {made['paddle2onnx']} with paddlepaddle {made['paddlepaddle']}: "
                             f"{made['python']}"))


def _root_flag(name: str):
    """A subcommand's ``--quiet``/``--debug`` sets the group's (they work before or after the subcommand)."""
    def callback(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        if value:
            ctx.find_root().params[name] = True
    return callback


for _command in cli.commands.values():
    _command.params += [
        click.Option(["--quiet", "-q"], is_flag=True, expose_value=False, callback=_root_flag("quiet"),
                     help="Print nothing but errors (also before the command)."),
        click.Option(["--debug"], is_flag=True, expose_value=False, callback=_root_flag("debug"),
                     help="Show tracebacks (also before the command)."),
    ]


def main() -> None:
    """The console script: the command, then a quick exit (``_exit``)."""
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    try:
        cli(prog_name="onnxbridge")
    except SystemExit as exc:
        code = exc.code
    else:
        code = EXIT_OK
    _exit(code)


def _exit(code: "int | str | None") -> None:
    """Leave without the interpreter's teardown. With torch or TensorFlow loaded, freeing every module's objects
    takes over a second (1.3-1.4 s after a GPT-2 export) and changes nothing outside this process. What exit
    must still do is done first: non-daemon threads joined, exit handlers run (the worker's shutdown, temporary
    folders, logging), the standard streams flushed."""
    import atexit
    import os
    import threading

    if isinstance(code, str):  # sys.exit("message"): printed, status 1, as Python does
        _stderr(code)
        code = 1
    try:
        getattr(threading, "_shutdown", lambda: None)()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed, or a pipe whose reader left
                pass
        os._exit(code if isinstance(code, int) else EXIT_OK)


if __name__ == "__main__":
    main()
