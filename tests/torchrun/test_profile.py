"""train.profile on a real torchrun: the demo's model and data, 2 ranks of DDP over gloo, a 5-step window.
The traces are torch.profiler's own files; the test reads them, not profile.md, for what was recorded."""
import json

from conftest import BIN, launch_training, read_json, run

WINDOW = {"start_step": 4, "steps": 5, "ranks": [0, 1]}


def test_a_five_step_window_is_traced_on_the_ranks_named_and_summarised(tmp_path):
    out, _ = launch_training(tmp_path, {"strategy": "ddp", "precision": "fp32",
                                        "batch": {"global": 64, "per_device": 32},
                                        "train": {"epochs": 1, "log_every_steps": 5, "profile": WINDOW}})
    assert read_json(out / "train.json")["steps"] == 1437 // 64   # the run trained to its end
    traces = sorted((out / "profile").glob("*.pt.trace.json"))
    assert [t.name.rsplit("_rank", 1)[1] for t in traces] == ["0.pt.trace.json", "1.pt.trace.json"]
    for trace in traces:
        names = [e.get("name", "") for e in json.loads(trace.read_text())["traceEvents"]]
        assert any(n.startswith("aten::") for n in names) and "gloo:all_reduce" in names
        # the window and nothing else: its five steps, numbered by the profiler
        assert len({n for n in names if n.startswith("ProfilerStep#")}) == 5
    summary = (out / "profile" / "profile.md").read_text()
    assert "steps 4-8, rank 0" in summary and "| operator | ms a step | share of a step | calls a step |" in summary
    assert any(line.startswith(("Compute bounds", "Communication bounds", "The data loader bounds"))
               for line in summary.splitlines())
    top = next(line for line in summary.splitlines() if line.startswith("| aten::"))
    assert top.split(" | ")[0].removeprefix("| ") in {n for n in names}   # the table's operator is the trace's
    shown = run([str(BIN / "airetrain"), "profile", "t", "--results", str(out.parent)]).stdout
    assert shown.startswith(summary) and str(traces[0]) in shown
