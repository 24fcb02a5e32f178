"""Hints for PyTorch files (issue 21): TorchScript inputs' rank and dtype read from the program, ``:int64`` where an
input feeds an embedding, and ``--trust`` pickles whose class is defined in a .py beside them."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.helpers.extras import require

torch = require("torch")


class Embedder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(20, 8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids))


class Convs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(5, 4, 3)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.conv(image)


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scripted")
    torch.manual_seed(0)
    for name, module in (("emb.pt", Embedder()), ("conv.pt", Convs())):
        torch.jit.save(torch.jit.script(module.eval()), str(folder / name))
    return folder


def test_the_missing_shape_hint_reads_rank_and_dtype_from_the_program(cli, scripted, tmp_path):
    res = cli("convert", scripted / "emb.pt", "-o", tmp_path / "m.onnx")
    assert res.exit_code == 2 and "(e.g. --input-shape ids:1,8:int64)" in res.output, res.output
    res = cli("convert", scripted / "conv.pt", "-o", tmp_path / "m.onnx")
    assert res.exit_code == 2 and "(e.g. --input-shape image:1,5,224,224)" in res.output, res.output


@pytest.mark.slow
def test_float_ids_say_add_int64_and_the_suggestion_works(cli, scripted, tmp_path):
    res = cli("convert", scripted / "emb.pt", "-o", tmp_path / "m.onnx", "--input-shape", "ids:2,9", "--trust")
    assert res.exit_code == 2 and "\n" not in res.stderr.strip(), res.output
    assert "TorchScript interpreter" not in res.output and "'indices'" in res.output  # the real error, not its header
    assert "input 'ids' feeds aten::embedding, which takes integers: add :int64 (e.g. --input-shape ids:2,9:int64)" \
        in res.output
    res = cli("convert", scripted / "emb.pt", "-o", tmp_path / "m.onnx", "--input-shape", "ids:2,9:int64", "--trust")
    assert res.exit_code == 0 and "status: passed" in res.output, res.output


@pytest.mark.slow
def test_a_trusted_pickle_finds_its_class_beside_it(tmp_path):
    """The class lives in a .py next to the pickle, in a folder that is not the working directory nor installed."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "mynet_issue21.py").write_text(textwrap.dedent("""
        import torch

        class MyNet(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 2)

            def forward(self, x):
                return self.fc(x)
    """))
    make = f"import sys, torch; sys.path.insert(0, {str(folder)!r}); import mynet_issue21 as m; " \
           f"torch.save(m.MyNet(), {str(folder / 'net.pt')!r})"
    subprocess.run([sys.executable, "-c", make], check=True, timeout=120)
    run = [sys.executable, "-m", "onnxbridge.cli.main", "convert", str(folder / "net.pt"), "-o", str(tmp_path / "n.onnx"),
           "--trust", "--input-shape", "x:2,4"]
    proc = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0 and "status: passed" in proc.stdout, proc.stdout + proc.stderr
    (folder / "mynet_issue21.py").rename(folder / "elsewhere.py")  # gone: the error says where it must be
    proc = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and "No module named 'mynet_issue21'" in proc.stderr, proc.stderr
    assert "put their .py file beside 'net.pt' or on PYTHONPATH" in proc.stderr


def test_the_import_path_is_restored(tmp_path):
    from onnxbridge.sources import importable_beside

    before = list(sys.path)
    with importable_beside(tmp_path / "net.pt"):
        assert sys.path[0] == str(tmp_path)
    assert sys.path == before
