"""Find the two files of a Paddle inference model: the program (.json PIR or .pdmodel) and its weights."""
from __future__ import annotations

import os
from pathlib import Path

from onnxbridge.errors import BadInputError
from onnxbridge.frontends.paddle import PARAMS, PROGRAMS
from onnxbridge.pathchecks import regular


def inference_files(path: Path) -> tuple[Path, Path]:
    """(program, params) for a program file, a .pdiparams file, a path prefix or a folder holding one model."""
    if path.is_dir():
        found = [p for p in sorted(path.iterdir()) if p.suffix in PROGRAMS and p.with_suffix(PARAMS).exists()]
        if not found:
            raise BadInputError(f"folder '{path}' holds no Paddle inference model (.json or .pdmodel with {PARAMS})")
        if len(found) > 1:
            raise BadInputError(f"folder '{path}' holds {len(found)} Paddle models "
                                f"({', '.join(p.name for p in found)}); name the one to convert")
        return found[0], found[0].with_suffix(PARAMS)
    if not path.exists():  # a prefix: 'out/model' for out/model.json + out/model.pdiparams
        programs = [Path(f"{path}{s}") for s in PROGRAMS if Path(f"{path}{s}").is_file()]
        if not programs:
            raise BadInputError(f"'{path}' does not exist, nor does '{path.name}.json' or '{path.name}.pdmodel'")
        path = programs[0]
    if path.suffix == PARAMS:
        programs = [path.with_suffix(s) for s in PROGRAMS if path.with_suffix(s).exists()]
        if not programs:
            raise BadInputError(f"'{path.name}' holds only weights; its program ({path.stem}.json or "
                                f"{path.stem}.pdmodel) is missing beside it")
        return programs[0], path
    regular(path, "the Paddle program")
    params = path.with_suffix(PARAMS)
    if not os.path.lexists(params):
        raise BadInputError(f"the weights of '{path.name}' are missing: expected '{params.name}' beside it")
    return path, regular(params, "the weights file")
