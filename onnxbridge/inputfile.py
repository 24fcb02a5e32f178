"""Sample input files for any source (``onnxbridge inputs``): the arrays validation would feed, saved as .npz, for
``--inputs`` (one batch) and ``--calibration`` (several batches along a leading axis)."""
from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Sequence

from onnxbridge.errors import BadInputError, OnnxBridgeError, TooLargeError, first_line
from onnxbridge.pathchecks import regular
from onnxbridge.specs import DynamicAxis, Sample, reseed, vary_dynamic

if TYPE_CHECKING:
    import numpy as np

    from onnxbridge.plugins import SourceModel


def sample_for(src: "SourceModel", *, batch: int | None = None, seed: int = 0) -> Sample:
    """The sample validation uses for ``src`` (seed 0: exactly its first sample; another seed: a batch drawn like it,
    as ``--samples`` draws them), with axis 0 of every input resized to ``batch`` when given (values redrawn, so the
    rows differ). An input whose axis 0 the model declares fixed at another size is refused (a source that declares
    no shapes, ``SourceModel.declares_shapes``, fixes none: its specs are the sample's shapes)."""
    sample = src.sample
    if sample is None:
        raise BadInputError(f"{src.description or 'the source'} gives no sample inputs; pass --input-shape")
    if batch is not None:
        opened = {d.name for d in src.dynamic if d.name in sample.feeds and sample.feeds[d.name].ndim
                  and d.axis % sample.feeds[d.name].ndim == 0}
        fixed = {} if not src.declares_shapes else {s.name: s.shape[0] for s in src.input_specs
                                                     if s.shape and isinstance(s.shape[0], int) and s.name not in opened}
        for name, arr in sample.feeds.items():
            if arr.ndim == 0:
                raise BadInputError(f"--batch {batch}: input '{name}' is a scalar (it has no batch axis)")
            if name in fixed and fixed[name] != batch and fixed[name] > 0:
                raise BadInputError(f"--batch {batch}: the model fixes axis 0 of input '{name}' to {fixed[name]} "
                                    f"(open it with --dynamic {name}:0, or leave out --batch)")
        axes = [DynamicAxis(name, 0, "batch") for name in sample.feeds]
        resized = vary_dynamic(sample, axes, lambda d, n: batch, f"axis 0 at {batch}")
        if resized is not None:
            return reseed(resized, seed + 1)  # vary_dynamic repeats rows; fresh values make each row its own
    return reseed(sample, seed) if seed else sample


def calibration_for(src: "SourceModel", batches: int, *, batch: int | None = None, seed: int = 0) \
        -> dict[str, "np.ndarray"]:
    """``batches`` batches like ``sample_for``'s (seeds ``seed``, ``seed + 1``, ...), stacked along a new axis 0 per
    input: the layout ``--calibration`` reads as one batch per index."""
    import numpy as np

    drawn = [sample_for(src, batch=batch, seed=seed + i) for i in range(batches)]
    return {name: np.stack([s.feeds[name] for s in drawn]) for name in drawn[0].feeds}


_HEADER_ROOM = 2**14  # an .npy member's bytes beyond its data: magic, version, header (numpy reads up to 10,000)


def load_npz(path: str | Path) -> dict[str, "np.ndarray"]:
    """Named arrays from a .npz file or a folder of .npy files (``--inputs``, ``--calibration``). Sizes are checked
    before data is read: an archive's declared member sizes against the tensor limit and their sum against the
    memory limit, then each array's declared shape against the tensor limit (``onnxbridge.budget``); an array's data
    is read only up to the size its header declares. A small file cannot unpack to gigabytes."""
    import zipfile

    p = regular(path, "the inputs file", folder=True)
    try:
        arrays = _read_folder(p) if p.is_dir() else _read_archive(p)
    except zipfile.BadZipFile:
        raise _not_an_archive(p) from None
    except OnnxBridgeError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy's, zipfile's and zlib's errors on a damaged file: one line
        raise BadInputError(f"cannot read inputs '{p}': {first_line(exc)}") from None
    if not arrays:
        raise BadInputError(f"inputs '{p}' holds no arrays")
    return arrays


def _read_folder(folder: Path) -> dict[str, "np.ndarray"]:
    """The .npy files of ``folder``, by name without the suffix."""
    arrays = {}
    for f in sorted(folder.glob("*.npy")):
        with open(regular(f, "the inputs file"), "rb") as stream:
            arrays[f.stem] = _read_npy(stream, f"'{f}'")
    return arrays


def _read_archive(path: Path) -> dict[str, "np.ndarray"]:
    """The .npy members of a zip archive (what np.savez writes), by name without the suffix."""
    import zipfile

    arrays = {}
    with zipfile.ZipFile(path) as archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        _check_declared(path, members)
        for m in members:
            name = m.filename[:-4] if m.filename.endswith(".npy") else m.filename  # np.load's names
            with archive.open(m) as stream:
                arrays[name] = _read_npy(stream, f"'{path.name}': array '{name}'")
    return arrays


def _check_declared(path: Path, members: list) -> None:
    """Refuse an archive whose zip directory declares a member over the tensor limit, or members that together
    exceed the memory limit (the sizes a zip bomb declares; the bytes are not read)."""
    from onnxbridge.budget import MEMORY_ENV, TENSOR_ENV, _size, memory_limit, tensor_limit

    limit, hint = tensor_limit(), f"set {TENSOR_ENV} to raise it if this is intended"
    for m in members:
        if m.file_size > limit + _HEADER_ROOM:
            raise TooLargeError(f"'{path.name}': member '{m.filename}' would unpack to {_size(m.file_size)}, over the "
                                f"{_size(limit)} tensor limit", hint=hint)
    total, memory = sum(m.file_size for m in members), memory_limit()
    if memory is not None and total > memory:
        raise TooLargeError(f"'{path.name}': its {len(members):,} members would unpack to {_size(total)}, over the "
                            f"{_size(memory)} memory limit", hint=f"set {MEMORY_ENV} to raise it if this is intended")


def _read_npy(stream: BinaryIO, what: str) -> "np.ndarray":
    """The array in the .npy ``stream`` (named ``what`` in errors): its header first, checked against the tensor
    limit, then, read again from the start, exactly the data the header declares."""
    from numpy.lib import format as npy

    from onnxbridge.budget import check_tensor

    try:
        version = npy.read_magic(stream)
    except ValueError:
        raise BadInputError(f"{what} is not an .npy array") from None
    header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0  # 3.0: 2.0's layout
    shape, _, dtype = header(stream)
    check_tensor(what, shape, dtype.itemsize)
    stream.seek(0)
    return npy.read_array(stream, allow_pickle=False)


def _not_an_archive(path: Path) -> BadInputError:
    """The error for a file that is no zip archive: a single .npy array named .npz is the common case."""
    with open(path, "rb") as f:
        npy = f.read(6) == b"\x93NUMPY"
    what = "a single .npy array" if npy else "not a zip archive"
    return BadInputError(f"inputs '{path}' is {what}, not an .npz archive",
                         hint="save the arrays with np.savez(path, NAME=array, ...), named after the model's inputs, "
                              "or give a folder of NAME.npy files")


RANDOM_MARK = "onnxbridge inputs, random: "  # the .npz's ZIP comment when its batches were drawn at random


def save_npz(arrays: dict[str, "np.ndarray"], path: str | Path, random: str | None = None) -> Path:
    """Write ``arrays`` to ``path`` (.npz, written atomically; the name must end in .npz). ``random``: what was drawn
    at random, kept as the file's ZIP comment (numpy ignores it) so int8 builds can warn that they were calibrated
    on random data (``random_origin``)."""
    import zipfile

    import numpy as np

    from onnxbridge.atomic import atomic_write_bytes

    path = Path(path)
    if path.suffix.lower() != ".npz":
        raise BadInputError(f"-o '{path}': an inputs file ends in .npz")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    if random:
        with zipfile.ZipFile(buffer, "a") as archive:
            archive.comment = (RANDOM_MARK + random).encode("utf-8")[:65535]
    return atomic_write_bytes(path, buffer.getvalue())


def random_origin(path: str | Path) -> str | None:
    """What was drawn at random in an .npz ``onnxbridge inputs`` wrote (its ZIP comment), or None (not marked, a
    folder of .npy, unreadable)."""
    import zipfile

    if not Path(path).is_file():
        return None  # a folder of .npy, or no regular file (a FIFO would block the read)
    try:
        with zipfile.ZipFile(path) as archive:
            comment = archive.comment.decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, RuntimeError, NotImplementedError):
        return None  # not an archive onnxbridge wrote, or a damaged one: no mark
    return comment[len(RANDOM_MARK):] if comment.startswith(RANDOM_MARK) else None


def write_inputs(source: Any, output: str | Path, *, batch: int | None = None, seed: int = 0,
                 calibration: int | None = None, from_: str | None = None, input_shapes: Sequence[str] = (),
                 dynamic: Any = None, trust: bool = False, **options: Any) -> dict:
    """Load ``source`` as ``convert`` would and write its sample inputs to ``output`` (.npz, arrays named after the
    model's inputs). ``calibration``: that many batches along a new axis 0. Returns what was written: path, origin,
    and each array's shape and dtype."""
    from onnxbridge import arguments
    from onnxbridge.spine import load_source

    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise BadInputError(f"--batch {batch!r}: give a positive integer")
    if calibration is not None and (isinstance(calibration, bool) or not isinstance(calibration, int)
                                    or calibration < 1):
        raise BadInputError(f"--calibration {calibration!r}: give a positive number of batches")
    arguments.check_paths({"the source model": source}, {"-o": output})
    src = load_source(source, from_=from_, input_shapes=list(input_shapes), dynamic=dynamic, trust=trust, seed=seed,
                      command="inputs", **options)
    if calibration is None:
        sample = sample_for(src, batch=batch, seed=seed)
        arrays, origin = sample.feeds, sample.origin
    else:
        arrays = calibration_for(src, calibration, batch=batch, seed=seed)
        origin = f"{calibration} batch(es) from seed {seed}"
    # only seed 0 at the sample's own batch is the source's sample (real data where the factory gives it)
    drawn = calibration if (seed or batch is not None or "random" in (src.sample.origin or "")) else \
        (calibration or 1) - 1
    random = None if calibration is None or not drawn else \
        f"{drawn} of {calibration} calibration batch(es) drawn at random ({origin})"
    path = save_npz(arrays, output, random)
    return {"path": str(path), "origin": origin, "calibration": calibration,
            "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in arrays.items()}}
