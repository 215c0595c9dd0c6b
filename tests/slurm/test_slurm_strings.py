"""Every config string that reaches SLURM, a job script or a shell is checked by the plan: a typo or a
pasted command is refused with its key and what is allowed, before anything is written or submitted."""
import time

import pytest

from airetrain.errors import ConfigError
from airetrain.plan.planner import plan_all

from conftest import ENV, REPO, SNAKEMAKE, run, write_config


# key under slurm -> (a bad value, what the message says is allowed)
BAD = {
    "partition": ("gpu; rm -rf /", "a SLURM name is letters, digits"),
    "account": ("$(reboot)", "a SLURM name is letters, digits"),
    "qos": ("normal`id`", "a SLURM name is letters, digits"),
    "nccl_socket_ifname": ("ib0 && reboot", "an interface name or prefix"),
    "mail_type": ("END,FIAL", "SLURM mail types joined by commas: NONE, BEGIN, END, FAIL, REQUEUE, ALL"),
    "mail_user": ("me@leeds.ac.uk;reboot", "an e-mail address"),
}


@pytest.mark.parametrize("key", BAD)
def test_a_bad_string_is_refused_naming_its_key_and_what_is_allowed(key):
    value, allowed = BAD[key]
    with pytest.raises(ConfigError) as e:
        plan_all({"runs": {"r": {"gpus": 6, "batch": {"global": 192}, "slurm": {key: value}}}}, env=ENV)
    assert f"runs.r.slurm.{key} = {value!r} is not allowed: {allowed}" in str(e.value)


def test_a_bad_string_in_defaults_or_a_sweep_is_refused_where_it_lands():
    with pytest.raises(ConfigError, match=r"defaults\.slurm\.partition = 'gpu;' is not allowed"):
        plan_all({"defaults": {"slurm": {"partition": "gpu;"}}, "runs": {"r": {}}}, env=ENV)
    with pytest.raises(ConfigError, match=r"runs\.r-qos.* = 'a b' is not allowed"):
        plan_all({"sweep": {"slurm.qos": ["normal", "a b"]}, "runs": {"r": {}}}, env=ENV)


def test_an_account_from_the_environment_is_checked_too():
    with pytest.raises(ConfigError, match=r"\$SBATCH_ACCOUNT = 'lab;reboot' is not a SLURM account name"):
        plan_all({"runs": {"r": {}}}, env={**ENV, "SBATCH_ACCOUNT": "lab;reboot"})
    assert plan_all({"runs": {"r": {}}}, env={**ENV, "SBATCH_ACCOUNT": "lab_1"})["r"].slurm.account == "lab_1"


def test_good_values_pass_and_reach_the_job_request():
    p = plan_all({"runs": {"r": {"gpus": 6, "batch": {"global": 192}, "slurm": {
        "partition": "gpu,gpu-debug", "account": "my.project-1", "qos": "high_prio",
        "nccl_socket_ifname": "^docker,lo"}}}}, env=ENV)["r"]
    assert p.slurm.partition == "gpu,gpu-debug" and p.slurm.account == "my.project-1"
    assert p.slurm.qos == "high_prio" and "qos" not in p.slurm.extra
    assert p.env["NCCL_SOCKET_IFNAME"] == "^docker,lo"


@pytest.mark.parametrize("key", BAD)
def test_the_sbatch_export_refuses_them_and_prints_no_script(tmp_path, key):
    value, _ = BAD[key]
    cfg = write_config(tmp_path / "c.yaml", {"runs": {"r": {"gpus": 6, "batch": {"global": 192},
                                                             "slurm": {key: value}}}})
    proc = run(["airetrain", "sbatch", "r", "--configfile", str(cfg)], env=ENV, check=False)
    assert proc.returncode == 2 and f"runs.r.slurm.{key}" in proc.stderr and "#SBATCH" not in proc.stdout


def test_the_sbatch_export_carries_the_qos_and_the_mail_options(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", {"runs": {"r": {"slurm": {
        "qos": "normal", "mail_type": "END,FAIL,REQUEUE", "mail_user": "a.researcher@leeds.ac.uk"}}}})
    script = run(["airetrain", "sbatch", "r", "--configfile", str(cfg)], env=ENV).stdout
    assert "#SBATCH --qos=normal" in script
    assert "#SBATCH --mail-type=END,FAIL,REQUEUE\n#SBATCH --mail-user=a.researcher@leeds.ac.uk\n" in script


def test_a_mail_user_without_a_mail_type_is_refused():
    with pytest.raises(ConfigError, match=r"runs\.r\.slurm\.mail_user is set but slurm\.mail_type is null"):
        plan_all({"runs": {"r": {"slurm": {"mail_user": "a@leeds.ac.uk"}}}}, env=ENV)
    extra = plan_all({"runs": {"r": {"slurm": {"mail_type": "ALL"}}}}, env=ENV)["r"].slurm.extra
    assert extra.endswith(" --mail-type=ALL") and "mail-user" not in extra   # SLURM's default address


@pytest.mark.slurm
def test_the_workflow_refuses_them_before_any_submission(slurm_cluster, tmp_path):
    from test_slurm import SLURM_ARGS, submitted_since

    runs = {f"bad-{key}": {"slurm": {key: value}} for key, (value, _) in BAD.items()}
    cfg = write_config(tmp_path / "bad.yaml", {"roots": {"scratch": str(tmp_path / "s")}, "runs": runs})
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    proc = run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--configfile", str(cfg),
                *SLURM_ARGS], cwd=tmp_path, env=slurm_cluster, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    for key in BAD:
        assert f"runs.bad-{key}.slurm.{key}" in out
    assert submitted_since(slurm_cluster, since, tmp_path) == {} and not (tmp_path / "results").exists()
