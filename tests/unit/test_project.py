"""`airetrain init`: the project it writes plans as it is (validated against the schema), its profiles
equal the built-in ones, the account placeholder is refused before anything is submitted, and nothing
is ever written over an existing file."""
import sys

import pytest
import yaml

from airetrain.errors import ConfigError
from airetrain.plan.planner import plan_all
from airetrain.profiles import NAMES, PLACEHOLDER, account_of, built_in
from airetrain.project import init
from airetrain.workflow import PROFILES, ROOT
from conftest import ENV, REPO, SNAKEMAKE, run


def planned(project, monkeypatch):
    monkeypatch.chdir(project)   # a script's path is the project's
    return plan_all(yaml.safe_load((project / "config/config.yaml").read_text()), env=ENV)


def test_the_default_project_plans_one_cpu_run(tmp_path, monkeypatch):
    init(tmp_path / "p")
    (plan,) = planned(tmp_path / "p", monkeypatch).values()
    assert plan.run == "first" and plan.device == "cpu" and plan.world_size == 2
    assert plan.config.optim.lr == 3e-3   # written as users write it: 3e-3


def test_a_script_project_on_six_gpus_plans_two_nodes_in_script_mode(tmp_path, monkeypatch):
    init(tmp_path / "p", script="train.py", gpus=6, account="lab")
    (tmp_path / "p/train.py").write_text("print('training')\n")
    (plan,) = planned(tmp_path / "p", monkeypatch).values()
    assert str(plan.script.path) == str(tmp_path / "p/train.py") and plan.slurm.nodes == 2 and plan.world_size == 6


def test_init_refuses_to_overwrite_naming_each_file_and_writes_nothing(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text("mine\n")
    (tmp_path / "Snakefile").write_text("mine\n")
    with pytest.raises(ConfigError, match="move these away first") as refused:
        init(tmp_path)
    named = str(refused.value)
    assert str(tmp_path / "Snakefile") in named and str(tmp_path / "config/config.yaml") in named
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["Snakefile", "config", "config.yaml"]
    assert (tmp_path / "config/config.yaml").read_text() == "mine\n"


def test_every_profile_carries_profile_yaml_and_config_yaml_equal(tmp_path):
    init(tmp_path, account="lab")
    for folder in [*PROFILES.iterdir(), tmp_path / "profiles/aire", tmp_path / "profiles/local"]:
        first, second = ((folder / name).read_text() for name in NAMES)
        assert first == second, folder


def test_the_projects_profiles_are_the_built_in_ones_with_the_account(tmp_path):
    init(tmp_path / "named", account="lab")
    init(tmp_path / "unnamed")
    assert (tmp_path / "named/profiles/local/profile.yaml").read_text() == built_in("local")
    for project, account in (("named", "lab"), ("unnamed", PLACEHOLDER)):
        text = (tmp_path / project / "profiles/aire/profile.yaml").read_text()
        extra = [line for line in text.splitlines() if line not in built_in("aire").splitlines()]
        assert extra and extra[0].startswith(f"  slurm_account: {account}") and len(extra) == 1
        assert yaml.safe_load(text)["default-resources"]["slurm_account"] == account
    assert account_of(tmp_path / "named/profiles/aire") == "lab"


def test_the_account_placeholder_is_refused_by_plan_and_by_the_workflow_before_any_job(tmp_path):
    init(tmp_path)
    plan = run([sys.executable, "-m", "airetrain", "plan", "--profile", "profiles/aire"], cwd=tmp_path, check=False)
    assert plan.returncode == 2 and PLACEHOLDER in plan.stderr and "profiles/aire/profile.yaml" in plan.stderr
    dry = run([SNAKEMAKE, "-n", "--profile", "profiles/aire"], cwd=tmp_path, check=False)
    assert dry.returncode != 0 and f"slurm_account is still the placeholder {PLACEHOLDER}" in dry.stdout + dry.stderr
    assert not (tmp_path / "results").exists()


def test_an_account_that_is_no_slurm_name_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not a SLURM account name"):
        init(tmp_path, account="lab; rm -rf ~")
    assert not list(tmp_path.iterdir())


def test_workflow_path_prints_the_installed_workflow():
    out = run([sys.executable, "-m", "airetrain", "workflow-path"]).stdout.strip()
    assert out == str(ROOT) and (ROOT / "Snakefile").is_file() and ROOT == REPO / "airetrain" / "workflow"
