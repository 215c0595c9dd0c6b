"""report/seff.py: seff's printed figures, parsed, and any disagreement with ours named."""
from airetrain.report.jobs import parse
from airetrain.report.seff import parse_seff, seff_disagreement

from sacct_captured import CAPTURED, IDS


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
