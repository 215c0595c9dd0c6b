"""The efficiency table: sacct rows folded per job (seff's formulas), and the table's files."""
from pathlib import Path

import pytest

from airetrain.sacct import megabytes, parse, seconds

FIXTURE = Path(__file__).parent / "fixtures" / "sacct_lab.txt"


@pytest.mark.parametrize("text,value", [("00:00:35", 35), ("00:44.048", 44.048), ("1-02:03:04", 93784),
                                        ("12:00.5", 720.5), ("", 0)])
def test_sacct_durations(text, value):
    assert seconds(text) == pytest.approx(value)


@pytest.mark.parametrize("text,mb", [("1232988K", 1204.09), ("4G", 4096), ("4000M", 4000), ("0", 0), ("", 0)])
def test_sacct_memory(text, mb):
    assert megabytes(text) == pytest.approx(mb, abs=0.01)


def test_captured_sacct_rows_fold_into_seffs_figures():
    jobs = parse(FIXTURE.read_text())
    assert sorted(jobs) == ["29", "30", "31", "33"]
    two_nodes = jobs["30"]
    assert two_nodes["state"] == "COMPLETED" and two_nodes["nodes"] == 2 and two_nodes["cpus"] == 6
    assert two_nodes["cpu_eff"] == pytest.approx(44.048 / (35 * 6))        # TotalCPU / (Elapsed x cores)
    assert two_nodes["max_rss_mb"] == pytest.approx(1232988 / 1024)        # the largest step, torchrun's
    assert two_nodes["mem_eff"] == pytest.approx(1232988 / 1024 / 6144)    # per node: 12G over 2 nodes
    demo = jobs["33"]
    assert demo["cpu_eff"] == pytest.approx(31.099 / (28 * 2))
    assert demo["mem_eff"] == pytest.approx(822096 / 1024 / 4096)
    assert jobs["29"]["state"] == "FAILED"
