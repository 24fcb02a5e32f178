"""Tell torch files apart and refuse the ones that would unpickle untrusted data."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

from onnxbridge.errors import TRUST_HINT, BadInputError, UnsafeInputError
from onnxbridge.pathchecks import regular



def kind(path: Path) -> str:
    """'pt2' (torch.export), 'torchscript', or 'pickle' (torch.save of arbitrary objects)."""
    regular(path, "the torch file")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            head = f.read(2)
        if head[:1] == b"\x80":  # legacy torch.save: a raw pickle stream
            return "pickle"
        raise BadInputError(f"'{path}' is not a torch archive (not a zip file; truncated or another format?)")
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise BadInputError(f"'{path}' is a damaged archive: {exc}") from None
    if any(n.endswith("archive_format") for n in names) or any("/models/" in n and n.endswith(".json") for n in names):
        return "pt2"
    if any("/code/" in n for n in names) or any(n.endswith("constants.pkl") for n in names):
        return "torchscript"
    if any(n.endswith("data.pkl") for n in names):
        return "pickle"
    raise BadInputError(f"'{path}' is a zip archive but not a torch file")


def require_trust(path: Path, what: str, trust: bool) -> None:
    if not trust:
        raise UnsafeInputError(f"'{path}' {what}; loading it can run arbitrary code", hint=TRUST_HINT)


def pt2_pickled_entries(path: Path) -> list[str]:
    """Entries of a .pt2 archive that torch.export.load would unpickle without restrictions."""
    import io

    import torch

    found: list[str] = []
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            parts = name.split("/")
            if "weights" in parts or "constants" in parts:
                if name.endswith(".pt"):  # legacy pickled weights/constants
                    found.append(name)
                elif name.endswith("_config.json"):
                    config = json.loads(z.read(name)).get("config", {})
                    for fqn, meta in config.items():
                        pname = str(meta.get("path_name", ""))
                        if meta.get("use_pickle") or pname.startswith(("custom_obj", "opaque_obj")):
                            found.append(f"{name}:{fqn}")
            elif "sample_inputs" in parts and not name.endswith("/"):
                try:  # torch retries unsafe loading when this fails: check it ourselves first
                    torch.load(io.BytesIO(z.read(name)), weights_only=True)
                except Exception:
                    found.append(name)
    return found
