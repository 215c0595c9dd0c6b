"""Numbers as researchers write them (`lr: 1e-4`, `5E-2`, `1_000`, `.5`), which YAML 1.1 (PyYAML, and
so Snakemake) reads partly as strings: read as the numbers they mean, through `airetrain plan` and
through Snakemake, in a config file and on Snakemake's command line."""
import json

from conftest import BIN, run, snakemake

CONFIG = """\
roots: {{scratch: {scratch}}}
defaults:
  device: cpu
  optim: {{lr: 1e-4, weight_decay: 5E-2}}
  train: {{epochs: 1_000}}
  checkpoint: {{stop_margin_min: .5}}
sweep:
  optim.lr: [1e-4, 3e-4]
runs:
  a: {{}}
"""


def test_numbers_written_as_papers_write_them_are_read_as_numbers(tmp_path):
    from airetrain.plan.config import load_yaml, resolve

    (tmp_path / "config.yaml").write_text(CONFIG.format(scratch=tmp_path / "scratch"))
    raw = load_yaml(tmp_path / "config.yaml")
    assert raw["defaults"]["optim"]["lr"] == "1e-4"   # what YAML 1.1 makes of it
    _, runs = resolve(raw)
    assert sorted(runs) == ["a-lr1e-4", "a-lr3e-4"]
    run_ = runs["a-lr1e-4"]
    assert run_.optim.lr == 1e-4 and isinstance(run_.optim.lr, float) and runs["a-lr3e-4"].optim.lr == 3e-4
    assert run_.optim.weight_decay == 0.05 and run_.train.epochs == 1000 and run_.checkpoint.stop_margin_min == 0.5
    table = run([str(BIN / "airetrain"), "plan", "--configfile", str(tmp_path / "config.yaml")], cwd=tmp_path).stdout
    assert "a-lr1e-4" in table and "a-lr3e-4" in table


def test_a_string_that_is_no_number_is_still_refused_with_the_key(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("runs:\n  a: {optim: {lr: fast}, train: {epochs: 1e-3}}\n")
    proc = run([str(BIN / "airetrain"), "plan", "--configfile", str(cfg)], cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "runs.a.optim.lr: 'fast' is not of type 'number'" in proc.stderr
    assert "runs.a.train.epochs: '1e-3' is not of type 'integer'" in proc.stderr   # not a whole number


def test_snakemake_reads_them_from_the_config_file_and_its_command_line(tmp_path):
    (tmp_path / "config.yaml").write_text(CONFIG.format(scratch=tmp_path / "scratch"))
    dry = snakemake(tmp_path, tmp_path / "config.yaml", "-n", "-p", "--config",
                    "defaults={device: cpu, optim: {weight_decay: 2E-4}}").stdout
    # the plan rule's command carries each run's plan as JSON: the number from the command line is in it
    plans = [json.loads(line.split("--plan-json ", 1)[1].split(" --out", 1)[0].strip("'"))
             for line in dry.splitlines() if "--plan-json" in line]
    assert plans and {plan["config"]["optim"]["lr"] for plan in plans} == {1e-4, 3e-4}   # the sweep's
    assert {plan["config"]["optim"]["weight_decay"] for plan in plans} == {2e-4}
