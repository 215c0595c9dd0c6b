"""report/seff.py: seff's printed figures, parsed, and any disagreement with ours named."""
from airetrain.report.jobs import parse
from airetrain.report.seff import parse_seff, seff_disagreement

from sacct_captured import CAPTURED, FIXTURES, IDS


SEFF_OUTPUT = """Job ID: {id}
Cluster: lab
State: COMPLETED (exit code 0)
Cores per node: 2
CPU Utilized: 00:00:08
CPU Efficiency: {cpu:.2f}% of 00:00:20 core-walltime
Job Wall-clock time: 00:00:10
Memory Utilized: 1.00 MB
Memory Efficiency: {mem:.2f}% of 500.00 MB (500.00 MB/node)
"""


def test_seffs_printed_figures_are_parsed_and_disagreements_named():
    job = parse(CAPTURED)[IDS["burner"]]
    same = parse_seff(SEFF_OUTPUT.format(id=job.job_id, cpu=job.cpu_eff * 100, mem=job.mem_eff * 100))
    assert same.keys() == {"cpu_eff", "mem_eff"} and seff_disagreement(job, same) == ""
    off = parse_seff(SEFF_OUTPUT.format(id=job.job_id, cpu=job.cpu_eff * 100 + 5, mem=job.mem_eff * 100))
    assert seff_disagreement(job, off).startswith("cpu_eff seff")


def stand_in(folder, name: str, body: str) -> None:
    script = folder / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def test_report_jobs_runs_seff_only_for_the_jobs_asked_and_prints_its_verdict(monkeypatch, tmp_path, capsys):
    """Stand-ins on PATH for a site's sacct (the captured rows) and seff (its output format, with our own
    figures for the burner, 5 points off for the toucher): unit tests run without the test cluster, which
    has no seff (Debian does not package it)."""
    from airetrain.cli import main

    burner, toucher = (parse(CAPTURED)[IDS[name]] for name in ("burner", "toucher"))
    printed = {job.job_id: SEFF_OUTPUT.format(id=job.job_id, cpu=job.cpu_eff * 100 + off, mem=job.mem_eff * 100)
               for job, off in ((burner, 0), (toucher, 5))}
    cases = "\n".join(f"  {job_id}) cat <<'X'\n{text}X\n  ;;" for job_id, text in printed.items())
    stand_in(tmp_path, "sacct", f"cat {FIXTURES / 'sacct_jobs.txt'}")
    stand_in(tmp_path, "seff", f'echo "$1" >> {tmp_path}/asked\ncase "$1" in\n{cases}\nesac')
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    ids = f"{IDS['burner']},{IDS['toucher']},{IDS['percpu']}"

    main(["report", "--jobs", ids])
    assert not (tmp_path / "asked").exists()   # a report of any jobs waits for no seff unless asked
    main(["report", "--jobs", ids, "--seff-check", "2"])
    assert (tmp_path / "asked").read_text().split() == [IDS["burner"], IDS["toucher"]]
    said = capsys.readouterr().out
    assert f"(job {IDS['burner']}): agrees" in said and f"(job {IDS['toucher']}): cpu_eff seff" in said
