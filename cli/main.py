"""``onnxbridge`` commands. Only click is imported at start-up; each command imports what it uses.

Exit codes: 0 ok, 1 validation failed, 2 bad input or usage, 3 backend/toolchain unavailable,
4 internal error (a bug: please report it with --debug output), 5 validation incomplete (a hop was skipped:
it did not run here, e.g. TensorRT without a GPU; --allow-skipped accepts it).
"""
from __future__ import annotations

import functools
import sys

import click

from onnxbridge import request
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


def report_options(fn):
    """How the CLI reports, besides the JSON report: the renderers and when to exit 1."""
    for option in reversed([
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


class _Flag(click.Option):
    """A click option whose help text is computed when shown: help that lists what the registry holds (backends,
    suffixes, targets) costs nothing until ``--help``."""

    def __init__(self, *args, text=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.text = text

    def get_help_record(self, ctx: click.Context):
        if self.help is None and self.text is not None:
            self.help = self.text()
        return super().get_help_record(ctx)


def click_option(option, text=None, choices=None):
    """The click flag of a declared ``onnxbridge.options.Option`` (``text``: help to show instead of its own;
    ``choices``: instead of its own, where plugins' declarations are merged)."""
    bounded = option.low is not None or option.high is not None
    types = {"int": click.IntRange(option.low, option.high) if bounded else click.INT, "path": click.Path(exists=True),
             "file": click.Path(dir_okay=False), "output": click.Path(),
             "choice": click.Choice(list(choices or option.choices))}
    if option.kind == "switch":
        no = "--no-" + option.flag[2:]
        decls, extra = [f"{option.flag}/{no}", option.name], {"default": option.default}
    elif option.kind == "flag":
        decls, extra = [*option.flags, option.name] if option.flags else [option.flag, option.name], {"is_flag": True}
    else:
        decls = [*option.flags, option.name] if option.flags else [option.flag, option.name]
        extra = {"type": types.get(option.kind), "multiple": option.multiple, "metavar": option.metavar}
        if option.bare is not None:
            extra.update(is_flag=False, flag_value=option.bare)
        if option.default is not None and option.default is not False and not option.multiple:
            extra["default"] = option.default
    return click.option(*decls, cls=_Flag, text=text or option.text, required=option.required,
                        show_default=option.show_default, **extra)


def request_options(command: str):
    """The flags of every core option ``command`` declares (``onnxbridge.request``), in its table's order."""
    def decorate(fn):
        from onnxbridge import request

        for option in reversed(request.table(command)):
            if option.cli:
                fn = click_option(option)(fn)
        return fn
    return decorate


def request_values(command: str, values: dict) -> dict:
    """The CLI's values of ``command``'s core options as the Python API takes them: repeated flags as lists (none
    given: the option's default)."""
    from onnxbridge import request

    declared = {o.name: o for o in request.table(command)}
    return {k: (list(v) if v else declared[k].default) if declared[k].multiple else v
            for k, v in values.items() if k in declared}


def plugin_options(kind: str, command: str | None = None):
    """Click flags for every option the ``kind`` plugins ("frontend", "backend") declare for ``command``
    (``onnxbridge.options``): one flag per name, its help prefixed with the plugins that take it; the spine refuses
    it for the others."""
    def decorate(fn):
        from onnxbridge.plugins import BACKENDS, FRONTENDS

        registry = FRONTENDS if kind == "frontend" else BACKENDS
        selector = "--from" if kind == "frontend" else "--to"
        for name, by_plugin in reversed(list(registry.options().items())):
            by_plugin = {p: o for p, o in by_plugin.items() if not o.commands or command in (None, *o.commands)}
            if by_plugin:
                fn = _flag(by_plugin, selector)(fn)
        return fn
    return decorate


def _plugin_values(options: dict) -> dict:
    """Plugin option values as the Python API takes them: repeated flags as lists."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}


def _flag(by_plugin: dict, selector: str):
    """One click option from the declarations of one name by several plugins (choices merged; no default: the
    plugin's own applies, and the spine refuses the flag for plugins that do not declare it)."""
    import dataclasses

    first = next(iter(by_plugin.values()))
    takers = ", ".join(by_plugin)
    helps = list(dict.fromkeys(o.text() for o in by_plugin.values()))
    text = f"[{selector} {takers}] " + " ".join(helps if len(helps) == 1 else
                                                 [f"{p}: {o.text()}" for p, o in by_plugin.items()])
    choices = list(dict.fromkeys(c for o in by_plugin.values() for c in o.choices))
    return click_option(dataclasses.replace(first, default=None, show_default=False), text=lambda: text,
                        choices=choices)


@cli.command()
@click.argument("source")
@request_options("convert")
@report_options
@allow_skipped_option
@plugin_options("frontend", "convert")
@plugin_options("backend", "convert")
@timeout_option
@click.pass_context
@handle_errors
def convert(ctx, source, fail_on, junit, markdown, html, allow_skipped, **values):
    """Convert SOURCE to ONNX (exactly --opset) and validate it against the source framework.

    SOURCE is a model file or folder that a frontend reads, or a factory 'file.py:function' whose function returns
    the model, or (model, sample_inputs).
    """
    from onnxbridge.spine import convert as run_convert

    core = request_values("convert", values)
    result = run_convert(source, **core, progress=_progress(ctx), renderers=_renderers(junit, markdown, html),
                         **_plugin_values({k: v for k, v in values.items() if k not in core}))
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
@request_options("validate")
@report_options
@allow_skipped_option
@plugin_options("frontend", "validate")
@timeout_option
@click.pass_context
@handle_errors
def validate(ctx, source, converted, fail_on, junit, markdown, html, allow_skipped, **values):
    """Compare CONVERTED (ONNX or a backend's artifact) with SOURCE on the same inputs; exit 1 if they differ."""
    from onnxbridge.spine import validate as run_validate

    core = request_values("validate", values)
    rep = run_validate(source, converted, **core, progress=_progress(ctx), renderers=_renderers(junit, markdown, html),
                       **_plugin_values({k: v for k, v in values.items() if k not in core}))
    _finish(ctx, rep, _console(ctx), fail_on, allow_skipped)


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--check", "check_only", is_flag=True, help="List every blocker; write nothing.")
@request_options("adapt")
@report_options
@timeout_option
@click.pass_context
@handle_errors
def adapt(ctx, model, check_only, fail_on, junit, markdown, html, **values):
    """Move MODEL (ONNX) to another opset, up or down, with unchanged numbers."""
    from onnxbridge.errors import BadInputError

    core = request_values("adapt", values)
    opset = core["opset"]
    if check_only:
        from onnxbridge.spine import check_opset

        from onnxbridge.renderers.text import console_markup, printable

        rep = check_opset(model, opset, report=core["report"], renderers=_renderers(junit, markdown, html))
        for line in rep["blockers"]:  # they quote node names from the model
            click.echo(printable(line))
        console = _console(ctx)
        if not rep["blockers"] and console is not None:
            console.print(f"{console_markup(model)} can move to opset {opset}")
        ctx.exit(EXIT_BAD_INPUT if rep["blockers"] else EXIT_OK)
    if core["output"] is None:
        raise BadInputError("adapt needs -o OUTPUT (or --check)")
    from onnxbridge.spine import convert as run_convert

    result = run_convert(model, from_="onnx", **core, progress=_progress(ctx),
                         renderers=_renderers(junit, markdown, html))
    console = _console(ctx)
    if console is not None:
        from onnxbridge.renderers.text import console_markup

        art = result.report["artifact"]
        console.print(console_markup(f"wrote {art['path']} (opset {art['opset']}, IR {art['ir_version']})"))
    _finish(ctx, result.report, console, fail_on)


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--targets", required=True, metavar="NAME[,NAME...]", multiple=True, cls=_Flag,
              text=lambda: f"Backends to check against: {request.names('backends')} (comma-separated or repeated).")
@click_option(request.OPSET, text=lambda: "Also check that the model can move to this opset.")
@click_option(request.INPUT_SHAPES, text=lambda: "Shapes the conversion would fix (a DLC needs static shapes).")
@click_option(request.TARGET)
@click_option(request.REPORT)
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
    artifact (a file a backend writes, by its suffix), its format, I/O and what built it."""
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
@click_option(request.FROM)
@click_option(request.INPUT_SHAPES, text=lambda: "Shape (and dtype) of an input (sources that record none, e.g. "
              "TorchScript).")
@click_option(request.DYNAMIC, text=lambda: "Open an axis the source fixes (e.g. x:0 for --batch on an ONNX model "
              "with batch 1).")
@click_option(request.TRUST)
@plugin_options("frontend", "inputs")
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


def _setups() -> dict:
    """What ``setup`` makes: the ``Setup`` each plugin declares (``Plugin.setups``), by name; read from the
    registry's declarations when the command is used, nothing of a plugin imported until one runs."""
    from onnxbridge.plugins import BACKENDS, FRONTENDS

    return {**FRONTENDS.setups(), **BACKENDS.setups()}


class _DeclaredChoice(click.Choice):
    """A choice among names read when the command is used (``find()``), not when the CLI is imported."""

    def __init__(self, find) -> None:
        self._find = find
        super().__init__([])

    @property
    def choices(self):
        return tuple(self._find())

    @choices.setter
    def choices(self, value) -> None:
        pass


class _SetupCommand(click.Command):
    """``setup``, whose help names the setups the plugins declare (read when shown)."""

    def format_help_text(self, ctx: click.Context, formatter) -> None:
        declared = " ".join(f"{name}: {s.help}." for name, s in _setups().items())
        self.help = f"{SETUP_HELP} {declared}"
        super().format_help_text(ctx, formatter)


SETUP_HELP = "Make what a plugin needs beside onnxbridge's own environment (TOOL: what the plugins declare)."


@cli.command(cls=_SetupCommand, help=SETUP_HELP)
@click.argument("tool", type=_DeclaredChoice(_setups))
@click.option("--dir", "directory", type=click.Path(file_okay=False), metavar="DIR", cls=_Flag,
              text=lambda: "Where to make it (default: "
                           + "; ".join(s.dir_help for s in _setups().values() if s.dir_help) + ").")
@click.pass_context
@handle_errors
def setup(ctx, tool, directory):
    from importlib import import_module

    module, _, function = _setups()[tool].run.partition(":")
    console = _console(ctx)

    def say(line: str) -> None:
        if console is not None:
            from rich.markup import escape

            console.print(escape(line))

    getattr(import_module(module), function)(directory, say=say, note=_stderr)


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
