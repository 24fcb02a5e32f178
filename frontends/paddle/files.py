"""Find the two files of a Paddle inference model: the program (.json PIR or .pdmodel) and its weights."""
from __future__ import annotations

from pathlib import Path

from onnxbridge.errors import BadInputError

PROGRAMS = (".json", ".pdmodel")


def inference_files(path: Path) -> tuple[Path, Path]:
    """(program, params) for a program file, a .pdiparams file or a folder holding one model."""
    if path.is_dir():
        found = [p for p in sorted(path.iterdir()) if p.suffix in PROGRAMS and p.with_suffix(".pdiparams").exists()]
        if not found:
            raise BadInputError(f"folder '{path}' holds no Paddle inference model (.json or .pdmodel with .pdiparams)")
        if len(found) > 1:
            raise BadInputError(f"folder '{path}' holds {len(found)} Paddle models "
                                f"({', '.join(p.name for p in found)}); name the one to convert")
        return found[0], found[0].with_suffix(".pdiparams")
    if path.suffix == ".pdiparams":
        programs = [path.with_suffix(s) for s in PROGRAMS if path.with_suffix(s).exists()]
        if not programs:
            raise BadInputError(f"'{path.name}' holds only weights; its program ({path.stem}.json or "
                                f"{path.stem}.pdmodel) is missing beside it")
        return programs[0], path
    if not path.is_file():
        raise BadInputError(f"'{path}' does not exist")
    params = path.with_suffix(".pdiparams")
    if not params.is_file():
        raise BadInputError(f"the weights of '{path.name}' are missing: expected '{params.name}' beside it")
    return path, params
