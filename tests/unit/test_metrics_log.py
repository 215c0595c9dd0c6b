"""metrics_log: a run's metric history, kept durable, restored where Snakemake removed results/<run>/'s copy,
read as it stands (a resumed session's lines supersede the earlier sessions' after its step)."""
from airetrain.rundir import metrics_log


def session(durable, results, resumed_from: int, steps, extra=None):
    writer = metrics_log.Writer(durable, results)
    writer.begin(resumed_from)
    for step in steps:
        writer.write({"step": step, "loss": float(step) + (extra or 0)})
    writer.close()


def test_a_resumed_session_supersedes_the_earlier_lines_after_its_step_and_a_restore_brings_them_back(tmp_path):
    durable, results = tmp_path / "scratch/run/metrics.jsonl", tmp_path / "results/run/metrics.jsonl"
    session(durable, results, 0, range(1, 9), extra=0.5)   # killed after step 8; its checkpoint was step 5
    results.unlink()                                          # Snakemake removes the declared output
    with open(durable, "a") as f:
        f.write('{"step": 9, "lo')                           # and a line the kill cut
    metrics_log.restore(durable, results)
    session(durable, results, 5, range(6, 11))
    lines = metrics_log.read(results)
    assert [line["step"] for line in lines] == list(range(1, 11))   # every step once
    assert [line["loss"] for line in lines] == [s + 0.5 for s in range(1, 6)] + [float(s) for s in range(6, 11)]
    assert metrics_log.read(durable) == lines


def test_a_restore_keeps_what_a_script_wrote_by_itself_and_a_restart_supersedes_the_history(tmp_path):
    results = tmp_path / "results/metrics.jsonl"
    results.parent.mkdir()
    results.write_text('{"step": 1, "loss": 2.0}\n')   # a script's own line, no history beside it
    metrics_log.restore(tmp_path / "scratch/metrics.jsonl", results)
    assert metrics_log.read(results) == [{"step": 1, "loss": 2.0}]
    session(tmp_path / "scratch/metrics.jsonl", tmp_path / "r2", 0, [1, 2])
    kept = metrics_log.supersede(tmp_path / "scratch")
    assert kept.name.startswith("metrics.superseded-") and len(metrics_log.read(kept)) == 2
    assert not (tmp_path / "scratch/metrics.jsonl").exists() and metrics_log.supersede(tmp_path / "scratch") is None


def test_a_session_that_trains_nothing_and_evaluates_again_adds_no_line_of_its_own_step(tmp_path):
    """A finished run run again resumes at its last step and evaluates there: its figures join that step's line."""
    durable, results = tmp_path / "scratch/metrics.jsonl", tmp_path / "results/metrics.jsonl"
    session(durable, results, 0, [1, 2])
    writer = metrics_log.Writer(durable, results)
    writer.begin(2)
    writer.write({"step": 2, "eval_loss": 0.5})
    writer.close()
    assert metrics_log.read(results) == [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 2.0, "eval_loss": 0.5}]
