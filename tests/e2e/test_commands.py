"""The batch script of `airetrain sbatch` runs exactly the commands the rules run (plan/step_commands.py)."""
from conftest import run, snakemake, write_config

STEPS = ("prepare", "stage", "launch", "promote")


def step_commands(text: str) -> dict[str, str]:
    """Each step's arguments after `-m airetrain`, without the interpreter or the log redirection."""
    out = {}
    for line in text.splitlines():
        for step in STEPS:
            if f" -m airetrain {step} " in line:
                out[step] = line.split(" -m airetrain ", 1)[1].split(" >", 1)[0].strip()
    return out


def test_the_batch_script_runs_the_rules_commands(tmp_path):
    cfg = write_config(tmp_path / "config.yaml", {"roots": {"scratch": str(tmp_path / "scratch")},
                                                  "runs": {"demo": {"device": "cpu"}}})
    dry = snakemake(tmp_path, cfg, "-n", "-p")
    rules = step_commands(dry.stdout + dry.stderr)
    script = run(["airetrain", "sbatch", "demo", "--configfile", str(cfg), "--workdir", str(tmp_path)],
                 cwd=tmp_path).stdout
    assert set(rules) == set(STEPS), rules   # the dry run printed every step's command
    assert step_commands(script) == rules


def test_airetrain_plan_is_what_snakemake_schedules_for_the_same_command_line(tmp_path):
    """In a project from `airetrain init`, `--configfile` and `--config` mean what they mean to Snakemake: merged
    over config/config.yaml. Every run the dry run schedules, its requests and its strategy (the plan step's
    own `airetrain resolve` of the dry run's command) are those `airetrain plan` wrote."""
    import json
    import shlex

    from conftest import BIN, SNAKEMAKE, unactivated_env

    run([str(BIN / "airetrain"), "init", str(tmp_path)])
    (tmp_path / "extra.yaml").write_text("defaults: {time_min: {train: 40}}\n"
                                         "runs: {big: {processes: 3, batch: {global: 96}}}\n")
    line = ["--configfile", "extra.yaml", "--config", "defaults={optim: {lr: 1e-3}}"]
    env = unactivated_env(tmp_path, SCRATCH=str(tmp_path / "scratch"))
    table = run([str(BIN / "airetrain"), "plan", *line, "--write", "planned"], cwd=tmp_path, env=env).stdout
    dry = run([SNAKEMAKE, "-n", "-p", *line], cwd=tmp_path, env=env)
    scheduled = {}
    for text in (dry.stdout + dry.stderr).splitlines():
        if " -m airetrain resolve " in text:
            words = shlex.split(text.split(": ", 1)[1])
            plan = json.loads(words[words.index("--plan-json") + 1])
            out = tmp_path / "resolved" / plan["run"] / "plan.json"
            run([str(BIN / "airetrain"), "resolve", "--plan-json", json.dumps(plan), "--out", str(out)],
                cwd=tmp_path, env=env)
            scheduled[plan["run"]] = json.loads(out.read_text())
    assert sorted(scheduled) == ["big", "first"]   # config/config.yaml's run, and the extra file's
    for name, plan in scheduled.items():
        planned = json.loads((tmp_path / "planned" / name / "plan.json").read_text())
        assert planned == plan, name
        assert plan["config"]["optim"]["lr"] == 1e-3 and plan["time_min"]["train"] == 40   # --config, --configfile
    assert plan["strategy"] == "ddp" and scheduled["big"]["slurm"]["cpus_per_task"] == 3

    def runs(text):   # the table's run column, in its order
        return [row.split()[0] for row in text.splitlines() if row.startswith(("big ", "first "))]
    assert runs(table) == runs(dry.stdout + dry.stderr) == ["big", "first"]
