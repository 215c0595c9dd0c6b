"""site_facts.py's fast root: told inside a job from its environment, and never claimed on a login node
(the facts read from SLURM itself are tested on both test-cluster shapes: tests/slurm/test_slurm_site.py and
test_slurm_other_site.py)."""
from airetrain.cluster.site_facts import fast_root_note


def test_the_fast_root_is_told_inside_a_job_and_how_its_nodes_share_it():
    aire = fast_root_note({"SLURM_JOB_ID": "7", "TMP_SHARED": "/mnt/flash/tmp/job.7", "TMPDIR": "/tmp/job.7"})
    assert aire.startswith("$TMP_SHARED in this job (/mnt/flash/tmp/job.7)") and "stages once" in aire
    elsewhere = fast_root_note({"SLURM_JOB_ID": "7", "TMPDIR": "/tmp/job.7"})
    assert elsewhere.startswith("$TMPDIR in this job (/tmp/job.7)") and "each node stages its own copy" in elsewhere
    assert fast_root_note({"TMPDIR": "/tmp"}) is None   # a login node's $TMPDIR is no job's
