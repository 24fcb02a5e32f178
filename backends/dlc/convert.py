"""The DLC build: prepare the ONNX model, make it fp16 or QDQ int8, serialize it (QAIRT SDK tools, or
onnxruntime-qnn's QnnIr backend), check the file with our reader, move it into place, prove by structure that it is
the graph the HTP simulator runs, and describe the simulator runner for the dlc hop.

No pip-installable runtime executes a .dlc on x86: the hop runs the prepared ONNX model on onnxruntime-qnn's HTP
simulator (named ``qnn-htp-simulator``) and ``structure.compare`` proves the .dlc holds exactly that graph. A DLC
from the QAIRT SDK's converter cannot be proven so: its hop is skipped."""
from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.backends.dlc import container, structure
from onnxbridge.backends.dlc.prepare import Prepared, graph_inputs, prepare
from onnxbridge.errors import ArtifactMismatch, BadInputError, HopSkipped, UnavailableError, UnsupportedError

if TYPE_CHECKING:
    from onnxbridge.plugins import BuildResult

FLAVOURS = ("qairt", "qnn-ir")
PRECISIONS = ("fp32", "fp16", "int8")


def _flavour(flavour: str | None):
    from onnxbridge.backends.dlc import sdk

    if flavour not in (None, *FLAVOURS):
        raise BadInputError(f"--flavour {flavour} does not apply to --to dlc; use qairt or qnn-ir")
    found = sdk.find() if flavour != "qnn-ir" else None
    if flavour == "qairt" and found is None:
        raise UnavailableError("--flavour qairt needs the QAIRT SDK: qairt-converter or snpe-onnx-to-dlc on PATH, "
                               f"or under $QAIRT_SDK_ROOT/$SNPE_ROOT/{sdk.HOST_BIN}",
                               hint="install the SDK from Qualcomm, or use --flavour qnn-ir (onnxruntime-qnn)")
    return found


def _place(dlc: Path, output: Path) -> None:
    """Copy ``dlc`` to ``output`` atomically (staged beside it, then renamed over it)."""
    from onnxbridge.atomic import placing

    with placing(output) as staged:
        shutil.copyfile(dlc, staged)


def _sanitized(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def io_mismatches(dlc: container.Dlc, model_path: Path) -> tuple[list[str], dict[str, str]]:
    """How the DLC's inputs and outputs differ from the ONNX model's (names, static shapes), and the ones the
    QNN EP renamed (matched by position among the unmatched, at the same shape: a QDQ output behind a layout
    Transpose becomes ``QuantizeLinear_token_N_out0``)."""
    import onnx

    model = onnx.load(model_path, load_external_data=False)
    graph_io = {"input": graph_inputs(model), "output": list(model.graph.output)}
    problems, renamed = [], {}
    for kind, values in graph_io.items():
        want = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}
        have = {t.name: t.shape for g in dlc.graphs for t in g.io(kind)}
        by_name = {n: n if n in have else _sanitized(n) for n in want if n in have or _sanitized(n) in have}
        spare = [n for n in have if n not in by_name.values()]
        for name, shape in want.items():
            got_name = by_name.get(name)
            if got_name is None and spare and (not shape or not all(shape) or have[spare[0]] == shape):
                got_name = renamed[name] = spare.pop(0)
            if got_name is None:
                problems.append(f"ONNX {kind} '{name}' {shape} is not a DLC {kind} "
                                f"(DLC {kind}s: {', '.join(f'{k} {v}' for k, v in have.items()) or 'none'})")
            elif shape and all(shape) and have[got_name] != shape:
                problems.append(f"{kind} '{name}' is {have[got_name]} in the DLC, {shape} in the ONNX model")
        if spare:
            problems.append(f"DLC {kind}(s) {', '.join(spare)} are not ONNX {kind}s")
    return problems, renamed


def fell_out(dlcs: list[container.Dlc], model_path: Path) -> list[str]:
    """ONNX nodes no DLC holds: neither the node nor its outputs are produced in a DLC (by name, allowing the
    suffixes the QNN EP adds; Q/DQ nodes become tensor encodings and are not listed)."""
    import onnx

    names = [n.name for d in dlcs for g in d.graphs for n in g.nodes]
    names += [o for d in dlcs for g in d.graphs for n in g.nodes for o in n.outputs]  # produced, not fed in
    held = set(names)

    def kept(prefix: str) -> bool:
        return prefix in held or any(n.startswith(prefix + "_") for n in names)

    model = onnx.load(model_path, load_external_data=False)
    out = []
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        if not (kept(node.name) or any(kept(o) or kept(_sanitized(o)) for o in node.output if o)):
            out.append(f"'{node.name}' ({node.op_type})")
    return out


def dump_one_graph(model_path: Path, folder: Path) -> tuple[Path, container.Dlc]:
    """The one DLC onnxruntime-qnn writes for the whole graph; UnsupportedError naming what fell out otherwise."""
    from onnxbridge.backends.dlc import qnn

    paths = qnn.dump_dlc(model_path, folder)
    dlcs = [container.read(p) for p in paths]
    if not dlcs:
        raise UnsupportedError("the QNN execution provider took no node of the model, so no DLC was written; "
                               f"nodes: {', '.join(fell_out([], model_path))}",
                               hint="a DLC needs ops the QNN HTP backend takes, at these dtypes and attributes")
    mismatch = io_mismatches(dlcs[0], model_path)[0] if len(dlcs) == 1 else []
    if len(dlcs) > 1 or mismatch:
        out = fell_out(dlcs, model_path)
        where = f"the graph split into {len(dlcs)} QNN partitions" if len(dlcs) > 1 else \
            f"the QNN graph is not the whole model ({mismatch[0]})"
        raise UnsupportedError(f"{where}; node(s) that fell out to the CPU: {', '.join(out) or 'not identified'}",
                               hint="replace or remove those nodes (a DLC holds one whole graph)")
    return paths[0], dlcs[0]


def _sdk_build(found, prepared: Prepared, model_path: Path, folder: Path, precision: str,
               calibration: list | None) -> tuple[Path, list[str]]:
    from onnxbridge.backends.dlc import sdk

    float_dlc = folder / "sdk_float.dlc"
    args = sdk.converter_args(found, model_path, float_dlc, prepared.input_shapes,
                              "fp16" if precision == "fp16" else "fp32")
    sdk.run(args, float_dlc)
    commands = [" ".join(Path(a).name if i == 0 else a for i, a in enumerate(args))]
    if precision != "int8":
        return float_dlc, commands
    listing = sdk.write_input_list(calibration, folder / "calibration")
    quant_dlc = folder / "sdk_int8.dlc"
    qargs = sdk.quantizer_args(found, float_dlc, listing, quant_dlc)
    sdk.run(qargs, quant_dlc)
    return quant_dlc, commands + [" ".join(Path(a).name if i == 0 else a for i, a in enumerate(qargs))]


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32", context=None,
          flavour: str | None = None) -> "BuildResult":
    """Write ``output`` (.dlc) from ``onnx_path``; what was built, with the dlc hop's ``runner``
    (``context.calibration``: the loaded ``--calibration`` arrays, for int8).

    The runner is a ``RunnerSpec`` (made in the worker by ``htp_runner``) or a ``HopSkipped``; the model it runs
    stays in a folder under ``context.workdir`` (the run's scratch folder, removed when the run ends)."""
    from onnxbridge.plugins import BuildContext

    context = context or BuildContext()
    output = Path(output)
    calibration = context.calibration
    if target is not None:
        raise BadInputError("--target does not apply to --to dlc (a DLC is built for QNN/SNPE runtimes in general)")
    if precision not in PRECISIONS:
        raise BadInputError(f"--precision {precision} does not apply to --to dlc; use {', '.join(PRECISIONS)}")
    if precision == "int8" and calibration is None:
        raise BadInputError("--precision int8 needs calibration data",
                            hint="give --calibration DATA.npz with arrays named after the inputs")
    if precision != "int8" and calibration is not None:
        raise BadInputError("--calibration applies to --precision int8 only")
    found = _flavour(flavour)
    if found is None:  # the QnnIr path needs onnxruntime-qnn: say so before any work
        from onnxbridge.backends.dlc import qnn

        qnn.qnn_module()
    workdir = context.workdir
    folder = Path(tempfile.mkdtemp(prefix="dlc-", dir=workdir))
    if workdir is None:  # called without the spine: nothing else removes it
        atexit.register(shutil.rmtree, folder, True)
    try:
        built, keep = _build(Path(onnx_path), output, folder, precision, calibration, found, context)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if keep is None:  # no runner: nothing of the build is needed any more
        shutil.rmtree(folder, ignore_errors=True)
        return built
    for item in folder.iterdir():  # only the model the runner runs is kept
        if item != keep:
            shutil.rmtree(item, ignore_errors=True) if item.is_dir() else item.unlink(missing_ok=True)
    return built


def _build(onnx_path: Path, output: Path, folder: Path, precision: str, calibration: dict | None, found,
           context) -> tuple["BuildResult", Path | None]:
    """The build in ``folder``: what was built, and the file in ``folder`` the runner needs (None: no runner)."""
    from onnxbridge.backends.dlc import qnn
    from onnxbridge.backends.dlc.quantize import batches, qdq
    from onnxbridge.plugins import BuildResult
    from onnxbridge.worker import RunnerSpec

    shapes, from_sample = _static_shapes(onnx_path, context)
    # the SDK's converter has its own op coverage: only the QnnIr path is held to the QNN EP's op table
    prepared = prepare(onnx_path, folder, shapes, check_ops=found is None)
    notes = list(prepared.notes)
    if from_sample:
        notes.append("a DLC has static shapes: dynamic inputs fixed at the sample's shapes ("
                     + ", ".join(f"{n} {shapes[n]}" for n in from_sample) + "; --input-shape chooses others)")
    model_path = prepared.path
    feeds = batches(calibration, prepared.input_shapes) if precision == "int8" else None
    if precision == "fp16":
        import onnx

        from onnxbridge.precision import to_fp16

        model_path = folder / "prepared_fp16.onnx"
        onnx.save(to_fp16(onnx.load(prepared.path)), model_path)
        notes.append("fp16: weights and compute in fp16, inputs and outputs fp32 (Casts at the edges)")
    elif precision == "int8":
        model_path = folder / "prepared_qdq.onnx"
        notes += qdq(prepared.path, model_path, feeds)

    commands: list[str] = []
    if found is not None:
        dlc_path, commands = _sdk_build(found, prepared, prepared.path, folder, precision, feeds)
        dlc = container.read(dlc_path)
    else:
        dlc_path, dlc = dump_one_graph(model_path, folder / "dump")
    mismatch, renamed = io_mismatches(dlc, prepared.path)
    problems = container.problems(dlc) + mismatch
    if problems:
        raise UnsupportedError(f"the DLC written by {dlc.converter.get('tool') or 'the converter'} fails our "
                               f"reader's checks: {'; '.join(problems)}")
    _place(dlc_path, output)
    placed = container.read(output)
    facts = {"flavour": "sdk" if found is not None else "qnn-ir"}
    if found is None:  # the artifact must be the graph the simulator runs: the placed file against the dump
        differences = structure.compare(placed, dlc, mine=f"the placed {output.name}", theirs="the graph simulated")
        if differences:
            output.unlink(missing_ok=True)
            raise UnsupportedError(f"the DLC placed at {output} is not the graph serialized from the model the "
                                   f"HTP simulator runs: {'; '.join(differences)}")
        check = structure.facts(placed)
        facts.update(artifact_checked="structure", structure_check=check)
        runner = RunnerSpec(f"{__name__}:htp_runner",
                            {"model_path": str(model_path), "dlc_path": str(output),
                             "artifact_check": {**check, "files": [str(output), f"{dlc_path.name} (QnnIr, "
                                                                   f"from {model_path.name})"]}},
                            library=f"onnxruntime-qnn {qnn.version()}")
    else:  # another converter wrote it: the simulator's numbers would not be this file's
        facts["artifact_checked"] = "not run"
        runner = HopSkipped(f"the DLC written by the QAIRT SDK's {found.kind} cannot be executed or proven "
                            "identical to the simulated graph here (the HTP simulator runs onnxruntime-qnn's "
                            "graph, a different converter's); run it on a Qualcomm device (snpe-net-run)")
    info = container.summary(placed)
    facts.update({
        "converter_tool": info["converter_tool"], "converter_version": info["converter_version"],
        "precision": precision, "prepared_opset": prepared.opset,
        "input_shapes": prepared.input_shapes, "input_shapes_fixed": prepared.fixed,
        "partitions": 1, "ops": info["ops"], "dtypes": info["dtypes"],
        "quantized_tensors": info["quantized_tensors"], "dlc_version": info["dlc_version"],
        "inputs": info["inputs"], "outputs": info["outputs"],
    })
    if found is None:
        facts.update(htp_check="the prepared model on onnxruntime-qnn's x86 HTP simulator (fp16 compute, CPU "
                               f"fallback disabled, soc_model {qnn.SOC_MODEL}) vs onnxruntime CPU; the .dlc "
                               "checked by structure to hold exactly that graph",
                     htp_compute_precision=qnn.COMPUTE_PRECISION)
    else:
        facts.update(sdk_converter=str(found.converter), sdk_root=found.root, sdk_commands=commands,
                     htp_skipped=runner.one_line())
    warnings = []
    if renamed:
        facts["renamed"] = renamed
        warnings.append("the QNN EP renamed DLC I/O: " + ", ".join(f"{k} -> {v}" for k, v in renamed.items()))
    built = BuildResult(facts, notes=notes, warnings=warnings, precision=applied_precision(precision, info["dtypes"]),
                        runner=runner)
    return built, (model_path if found is None else None)


def applied_precision(precision: str, dtypes: dict) -> dict:
    """What the DLC holds (its tensors' dtypes, as our reader sees them) and what the HTP computes it in."""
    stored = ", ".join(f"{k} x{v}" for k, v in sorted(dtypes.items())) if isinstance(dtypes, dict) else str(dtypes)
    if precision == "int8":
        return {"weights": "8-bit fixed point (QDQ, calibrated)", "compute": "fixed point on the HTP",
                "tensors": stored}
    return {"weights": precision, "compute": "fp16 on the HTP (it computes float models in fp16); fp32 elsewhere"
            if precision == "fp32" else "fp16", "tensors": stored}


def htp_runner(model_path: str, dlc_path: str, artifact_check: dict | None = None):
    """The dlc hop's runner, made in the worker from plain values: ``model_path`` (the model the build serialized)
    on the HTP simulator. The DLC at ``dlc_path`` must still be the one the build checked (``graph_sha256``)."""
    from onnxbridge.backends.dlc import qnn

    if artifact_check and artifact_check.get("graph_sha256"):
        now = structure.graph_sha256(container.read(Path(dlc_path)))
        if now != artifact_check["graph_sha256"]:
            raise ArtifactMismatch(f"'{dlc_path}' changed after it was built and checked (graph sha256 "
                                   f"{now[:12]}.., built {artifact_check['graph_sha256'][:12]}..)")
    try:
        return qnn.HtpRunner(Path(model_path), artifact_check=artifact_check)
    except UnavailableError as exc:
        raise HopSkipped(exc.one_line()) from None


def runner(path: Path, *, onnx_path: Path | None = None):
    """The HTP-simulator check of a saved DLC: its ONNX model prepared at the DLC's input shapes (fp16 when the
    DLC is) and serialized here with QnnIr; ArtifactMismatch when the DLC is not exactly that graph, else that
    model on the simulator. HopSkipped where it cannot be rebuilt or run here; BadInputError for a file our
    reader cannot read."""
    from onnxbridge.backends.dlc import qnn

    path = Path(path)
    dlc = container.read(path)
    if any(t.quantized for g in dlc.graphs for t in g.tensors.values()):
        raise HopSkipped("a quantized DLC is checked on the HTP simulator when it is built (the check needs the "
                         "QDQ model made from the calibration data); convert again with --calibration")
    if onnx_path is None:
        raise HopSkipped("a DLC runs only on Qualcomm runtimes; its HTP-simulator check needs the ONNX model it was "
                         "made from")
    onnx_path = Path(onnx_path)
    folder = tempfile.TemporaryDirectory(prefix="onnxbridge-dlc-")
    try:
        model_path, ref_path, ref = _reserialize(dlc, onnx_path, Path(folder.name))
        differences = structure.compare(dlc, ref, mine=f"'{path.name}'", theirs=f"'{onnx_path.name}'")
        if differences:
            raise ArtifactMismatch(f"'{path.name}' does not hold the graph of '{onnx_path.name}' (prepared at its "
                                   f"input shapes and serialized here with QnnIr): {'; '.join(differences)}",
                                   hint="validate a DLC against the ONNX model it was converted from, or convert "
                                        "that model again")
        check = {**structure.facts(dlc), "files": [str(path), f"{ref_path.name} (QnnIr {qnn.version()}, "
                                                               f"from {onnx_path.name})"]}
        return qnn.HtpRunner(model_path, artifact_check=check, keep=folder)
    except BaseException:
        folder.cleanup()
        raise


def _reserialize(dlc: container.Dlc, onnx_path: Path, folder: Path) -> tuple[Path, Path, container.Dlc]:
    """``onnx_path`` prepared at the DLC's input shapes (fp16 when the DLC is) and serialized with QnnIr: the
    model the simulator will run, and the DLC of it. HopSkipped where that cannot be done here."""
    shapes = _input_shapes(dlc, onnx_path)
    try:
        prepared = prepare(onnx_path, folder, shapes)
        model_path = prepared.path
        if "float16" in {t.dtype for g in dlc.graphs for t in g.tensors.values()}:
            import onnx

            from onnxbridge.precision import to_fp16

            model_path = folder / "prepared_fp16.onnx"
            onnx.save(to_fp16(onnx.load(prepared.path)), model_path)
        ref_path, ref = dump_one_graph(model_path, folder / "dump")
    except (BadInputError, UnsupportedError, UnavailableError) as exc:
        raise HopSkipped(f"the DLC's ONNX model cannot be prepared and serialized again here: "
                         f"{exc.one_line()}") from None
    return model_path, ref_path, ref


def _static_shapes(onnx_path: Path, context) -> tuple[dict[str, list[int]], list[str]]:
    """Each input's static shape: ``--input-shape`` where given, else the sample's for an input with dynamic dims
    (whose names are the second item); inputs with static dims are left to the model."""
    from onnxbridge.backends.dlc.prepare import graph_inputs, input_dims
    from onnxbridge.onnxio import load_onnx
    from onnxbridge.plugins import BuildContext

    context = context or BuildContext()
    shapes = {k: list(v) for k, v in (context.input_shapes or {}).items()}
    sample = context.sample_shapes or {}
    dynamic = [i.name for i in graph_inputs(load_onnx(onnx_path))
               if any(not isinstance(d, int) or d <= 0 for d in input_dims(i))]
    from_sample = [n for n in dynamic if n not in shapes and n in sample]
    shapes.update({n: list(sample[n]) for n in from_sample})
    return shapes, from_sample


def _input_shapes(dlc: container.Dlc, onnx_path: Path) -> dict[str, list[int]]:
    """The DLC's input shapes by the ONNX model's input names (the QNN EP may have sanitized them);
    ArtifactMismatch when the DLC's inputs cannot be the model's (names, ranks, fixed dims)."""
    from onnxbridge.backends.dlc.prepare import empty, input_dims
    from onnxbridge.onnxio import load_onnx

    try:
        model = load_onnx(onnx_path, load_external_data=False)
    except (BadInputError, OSError) as exc:
        raise HopSkipped(f"the DLC's ONNX model cannot be read: {' '.join(str(exc).split())[:300]}") from None
    # inputs that hold no element are constants in the prepared model, not DLC inputs
    want = {v.name: input_dims(v) for v in graph_inputs(model) if not empty(input_dims(v))}
    have = {t.name: t.shape for g in dlc.graphs for t in g.io("input")}
    shapes, problems = {}, container.Lines()
    for name, dims in want.items():
        got = name if name in have else _sanitized(name) if _sanitized(name) in have else None
        if got is None:
            problems.add(f"the model's input '{name}' is not a DLC input (DLC inputs: "
                         f"{container.names(have) or 'none'})")
            continue
        shape = shapes[name] = have.pop(got)
        if len(shape) != len(dims) or any(isinstance(d, int) and d > 0 and d != s for d, s in zip(dims, shape)):
            problems.add(f"input '{name}' is {container.clip(str(shape))} in the DLC, {dims} in the ONNX model")
    for k, v in have.items():
        problems.add(f"DLC input '{container.clip(k)}' {container.clip(str(v))} is not an input of the ONNX model")
    if problems:
        raise ArtifactMismatch(f"'{dlc.path.name}' does not hold the graph of '{onnx_path.name}': "
                               f"{'; '.join(problems.listed())}",
                               hint="validate a DLC against the ONNX model it was converted from")
    return shapes
