"""The sacct text of jobs whose behaviour is known, captured on the SLURM test cluster (tests/slurm/jobs.py;
tests/fixtures/README.md describes each job), and its rows by job."""
from pathlib import Path

from airetrain.report.jobs import FIELDS

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURED = (FIXTURES / "sacct_jobs.txt").read_text()
IDS = dict(line.split("=") for line in (FIXTURES / "sacct_jobs.ids").read_text().split())


def rows_of(job_id: str) -> list[dict]:
    """The captured rows of one job, as dicts of sacct's fields."""
    return [dict(zip(FIELDS, line.split("|"))) for line in CAPTURED.splitlines()
            if line.split("|")[0].split(".")[0] == job_id]
