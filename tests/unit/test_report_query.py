"""report/query.py: one sacct call for every job asked about, folded as sacct prints it; no answer (not a crash)
without sacct; a failing or stalled sacct named, never waited on past the timeout.

sacct here is a stand-in program on PATH (a shell script printing rows captured on the SLURM test cluster):
unit tests run without the cluster. tests/slurm/test_slurm_accounting.py asks the real one, stalled included."""
import stat

import pytest

from airetrain.report.jobs import FIELDS, parse
from airetrain.report.query import AccountingUnavailable, Started, command, query
from sacct_captured import CAPTURED, FIXTURES, IDS


def test_one_call_asks_for_every_job_with_each_run_of_a_requeued_one():
    cmd = command(["12", "15_3"], since="2026-12-01")
    assert cmd[:4] == ["sacct", "--noheader", "--parsable2", "--duplicates"]   # a requeued job's every run
    assert cmd[cmd.index("--format") + 1] == ",".join(FIELDS) and "JobIDRaw" in FIELDS
    assert cmd[cmd.index("--jobs") + 1] == "12,15_3" and cmd[-2:] == ["--starttime", "2026-12-01"]


def test_without_sacct_or_without_jobs_there_is_no_answer(monkeypatch, tmp_path):
    assert query([]) is None   # nothing asked: nothing run
    monkeypatch.setenv("PATH", str(tmp_path))   # a laptop: no sacct on PATH
    assert query(["12"]) is None


def stand_in_sacct(folder, body: str) -> None:
    """A program named sacct on PATH: body is its shell script."""
    script = folder / "sacct"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_the_answer_read_from_sacct_as_it_prints_is_the_answer_folded_whole(monkeypatch, tmp_path):
    # the rows printed in two parts, the last line without its newline
    stand_in_sacct(tmp_path, f"head -n 9 {FIXTURES / 'sacct_jobs.txt'}; sleep 0.2; "
                             f"tail -n +10 {FIXTURES / 'sacct_jobs.txt'} | head -c -1")
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    ids = list(IDS.values())
    streamed, whole = query(ids), parse(CAPTURED, ids)
    assert {j: job.figures() for j, job in streamed.items()} == {j: job.figures() for j, job in whole.items()}
    assert streamed[IDS["requeued"]].runs == 2 and streamed[IDS["multinode"]].nodes == 2   # the last row read


def test_a_failing_sacct_is_named_by_its_own_last_words(monkeypatch, tmp_path):
    stand_in_sacct(tmp_path, "echo 'sacct: error: Problem talking to the database: Connection refused' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with pytest.raises(AccountingUnavailable, match=r"^sacct: error: Problem talking to the database"):
        query(["12"])


def test_a_sacct_that_prints_part_and_stalls_is_cut_at_the_timeout(monkeypatch, tmp_path):
    stand_in_sacct(tmp_path, f"head -n 3 {FIXTURES / 'sacct_jobs.txt'}; exec sleep 600")
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    started = Started(["12"], timeout=1)
    with pytest.raises(AccountingUnavailable, match=r"^sacct gave no answer within 1 s$"):
        started.result()
    assert started.proc.returncode is not None   # killed, not left behind
