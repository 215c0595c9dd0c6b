"""report/query.py: one sacct call for every job asked about, and no answer (not a crash) without sacct."""
from airetrain.report.jobs import FIELDS
from airetrain.report.query import command, query


def test_one_call_asks_for_every_job_with_each_run_of_a_requeued_one():
    cmd = command(["12", "15_3"], since="2026-12-01")
    assert cmd[:4] == ["sacct", "--noheader", "--parsable2", "--duplicates"]   # a requeued job's every run
    assert cmd[cmd.index("--format") + 1] == ",".join(FIELDS) and "JobIDRaw" in FIELDS
    assert cmd[cmd.index("--jobs") + 1] == "12,15_3" and cmd[-2:] == ["--starttime", "2026-12-01"]


def test_without_sacct_or_without_jobs_there_is_no_answer(monkeypatch, tmp_path):
    assert query([]) is None   # nothing asked: nothing run
    monkeypatch.setenv("PATH", str(tmp_path))   # a laptop: no sacct on PATH
    assert query(["12"]) is None
