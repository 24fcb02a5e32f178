"""examples/convert_jax.py converts its three models at two opsets and says every one passed."""
from __future__ import annotations

from tests.conftest import check_report


def test_the_example_passes(example, tmp_path, capsys):
    assert example.main(str(tmp_path)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and all(" passed " in line for line in lines), lines
    for report in tmp_path.glob("*.json"):
        assert check_report(report)["source"]["frontend"] == "jax"
