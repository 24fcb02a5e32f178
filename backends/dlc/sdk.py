"""The QAIRT / SNPE SDK's own tools, when the user has them: found on PATH or under ``QAIRT_SDK_ROOT`` /
``SNPE_ROOT`` (``bin/x86_64-linux-clang``). We build their command lines and run them; nothing of the SDK ships
with onnxbridge."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from onnxbridge import lifeline
from onnxbridge.errors import UnavailableError, UnsupportedError

CONVERTERS = ("qairt-converter", "snpe-onnx-to-dlc")
QUANTIZERS = {"qairt-converter": ("qairt-quantizer",), "snpe-onnx-to-dlc": ("snpe-dlc-quant", "snpe-dlc-quantize")}
ROOTS = ("QAIRT_SDK_ROOT", "SNPE_ROOT")
HOST_BIN = "bin/x86_64-linux-clang"
TIMEOUT_S = 3600


@dataclass(frozen=True)
class Sdk:
    converter: Path
    quantizer: Path | None
    root: str | None  # the SDK root it was found under, or None (PATH)

    @property
    def kind(self) -> str:
        return self.converter.name


def _search_path() -> list[tuple[str, str | None]]:
    """Folders to look in, with the root variable each came from: PATH first, then the SDK roots."""
    dirs: list[tuple[str, str | None]] = [(d, None) for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    for var in ROOTS:
        root = os.environ.get(var)
        if root:
            dirs.append((str(Path(root) / HOST_BIN), var))
    return dirs


def find() -> Sdk | None:
    """The SDK's converter (and quantizer) if installed, else None."""
    for folder, var in _search_path():
        for name in CONVERTERS:
            exe = shutil.which(name, path=folder)
            if exe:
                quantizer = next((shutil.which(q, path=folder) or shutil.which(q) for q in QUANTIZERS[name]
                                  if shutil.which(q, path=folder) or shutil.which(q)), None)
                return Sdk(Path(exe), Path(quantizer) if quantizer else None,
                           f"{var}={os.environ[var]}" if var else None)
    return None


def converter_args(sdk: Sdk, onnx_path: Path, output: Path, input_shapes: dict[str, list[int]],
                   precision: str) -> list[str]:
    """The converter's command line (``--input_network``, ``--output_path``, shapes, float bitwidth)."""
    args = [str(sdk.converter), "--input_network", str(onnx_path), "--output_path", str(output)]
    flag = "--source_model_input_shape" if sdk.kind == "qairt-converter" else "--input_dim"
    for name, dims in input_shapes.items():
        args += [flag, name, ",".join(str(d) for d in dims)]
    if precision == "fp16":
        args += ["--float_bitwidth", "16"]
        if sdk.kind == "qairt-converter":
            args += ["--float_bias_bitwidth", "16"]
    return args


def write_input_list(feeds: list[dict], folder: Path) -> Path:
    """Raw float32 files per calibration batch and the ``name:=path`` input list the quantizers read."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, batch in enumerate(feeds):
        parts = []
        for name, array in batch.items():
            raw = folder / f"{i:04d}_{''.join(c if c.isalnum() else '_' for c in name)}.raw"
            np.ascontiguousarray(array, np.float32).tofile(raw)
            parts.append(f"{name}:={raw}")
        lines.append(" ".join(parts))
    listing = folder / "input_list.txt"
    listing.write_text("\n".join(lines) + "\n")
    return listing


def quantizer_args(sdk: Sdk, float_dlc: Path, input_list: Path, output: Path) -> list[str]:
    if sdk.quantizer is None:
        raise UnavailableError(f"--precision int8 with the SDK needs {' or '.join(QUANTIZERS[sdk.kind])} beside "
                               f"{sdk.converter}", hint="install the full QAIRT SDK, or use --flavour qnn-ir")
    return [str(sdk.quantizer), "--input_dlc", str(float_dlc), "--input_list", str(input_list),
            "--output_dlc", str(output)]


def run(args: list[str], expect: Path) -> str:
    """Run one SDK tool; its combined output, or UnsupportedError with the tool's last words."""
    try:
        done = lifeline.run(args, step=f"running {Path(args[0]).name}", capture_output=True, text=True,
                            timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnavailableError(f"{Path(args[0]).name} could not run: {exc}") from None
    text = (done.stdout or "") + (done.stderr or "")
    if done.returncode != 0 or not expect.is_file():
        last = [ln.strip() for ln in text.splitlines() if ln.strip()][-3:]
        why = f"exit {done.returncode}" if done.returncode else f"no {expect.name} written"
        raise UnsupportedError(f"{Path(args[0]).name} failed ({why}): {' | '.join(last)[:400]}")
    return text
