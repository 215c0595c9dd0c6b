"""The batch script of `airetrain sbatch` runs exactly the commands the rules run (plan/commands.py)."""
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
