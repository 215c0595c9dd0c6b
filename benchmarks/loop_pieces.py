"""What each piece of airetrain's training loop costs a step, measured two ways on the benchmark of trainer.py
(small_cnn w64, 2 ranks, gloo, bf16, `optim.fused: false`: like for like with the plain loop):

- timed: every call of each piece the loop makes after a step (the stragglers' count and gather, the log line,
  the watchdog's beat, the evaluation's schedule, the deadline's stop check, the checkpointer's schedule and
  saves, the profiler's window) is timed on rank 0, and its seconds are divided by the steps;
- off and on: the same run with one piece replaced by a no-op, against the run with all of them, back to back
  in a rotating order; the ratio of the steady samples/s per repeat (above 1: the piece costs that much).

The pieces are switched off from outside, by this file (a torchrun entry point that patches the trainer's
classes before it runs), so the package carries no switch for a benchmark. Three pieces cannot be switched
off without changing what a run is: the deadline's stop check (a collective every few steps that every rank
must make), the log lines (the run's record) and the checkpointer (its saves): for those, the timings alone.
The GPU sampler is a no-op on CPU (it samples NVML in a thread on a GPU node) and the tracker hand-off
costs nothing without a tracker (trainer.py --tracking measures it); they are listed as such.

    python benchmarks/loop_pieces.py [--repeats 6] [--epochs 2]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

# piece -> the (module, class, method) calls the loop makes for it, timed in every arm
TIMED = {
    "stragglers (count, gather at log lines)": [("stragglers", "Stragglers", "step_done"),
                                               ("stragglers", "Stragglers", "interval")],
    "log line and metrics (Progress)": [("progress", "Progress", "step_done")],
    "watchdog beat": [("watchdog", "Watchdog", "beat")],
    "evaluation schedule": [("evaluate", "Evaluator", "after_step")],
    "deadline stop check": [("deadline", "Stopper", "poll")],
    "checkpointer (schedule, saves' stalls)": [("checkpoint.manager", "Checkpointer", "save_if_due")],
    "profiler window (off)": [("profiler", "NotProfiled", "before"), ("profiler", "NotProfiled", "after")],
}
# the pieces switched off in turn (patch() says what replaces each)
OFF = ("stragglers", "links", "watchdog")


def patch(off: set[str], timings: dict[str, float]) -> None:
    """Inside the trainer's process: time the pieces' calls, and replace those in `off` with no-ops."""
    import importlib

    for piece, calls in TIMED.items():
        for module, cls, method in calls:
            owner = getattr(importlib.import_module(("airetrain." if "." in module else "airetrain.train.") + module),
                            cls)
            plain = getattr(owner, method)

            def timed(*args, _plain=plain, _piece=piece, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _plain(*args, **kwargs)
                finally:
                    timings[_piece] = timings.get(_piece, 0.0) + time.perf_counter() - t0
            setattr(owner, method, timed)
    from airetrain.train import loop, stragglers, watchdog

    if "stragglers" in off:   # no timer around each forward pass, no count, no gather at the log lines
        stragglers.Stragglers.timer = lambda self: contextlib.nullcontext()
        stragglers.Stragglers.step_done = lambda self: None
        stragglers.Stragglers.interval = lambda self, step: None
    if "links" in off:        # no all-reduce of the links' bandwidth as training starts
        loop.allreduce_bandwidth = lambda d, floor: None
    if "watchdog" in off:     # no heartbeat, no watching thread
        loop.watchdog.start = lambda d, plan: watchdog.Off()


def entry() -> None:
    """torchrun's entry point for one arm: patch, then the trainer as airetrain's train.py runs it."""
    off = set(filter(None, os.environ["PIECES_OFF"].split(",")))
    timings: dict[str, float] = {}
    patch(off, timings)
    from airetrain.train.loop import main

    main()
    if os.environ.get("RANK") == "0":
        Path(os.environ["PIECES_TIMINGS"]).write_text(json.dumps(timings))
    sys.stdout.flush()
    os._exit(0)


def arm(tmp: Path, epochs: int, off: str) -> tuple[dict, dict]:
    """(train.json, rank 0's seconds in each piece) of one run with the pieces in `off` switched off."""
    import trainer

    os.environ.update(PIECES_OFF=off, PIECES_TIMINGS=str(tmp / "timings.json"))
    plain_script = trainer.TRAIN_SCRIPT
    trainer.TRAIN_SCRIPT = Path(__file__)   # the launch runs this file under torchrun
    try:
        trainer.ours(tmp, epochs, {"fused": False}, log_every=10)
    finally:
        trainer.TRAIN_SCRIPT = plain_script
    return trainer.last_record(tmp), json.loads((tmp / "timings.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    arms = ["", *OFF]
    steady = {a: [] for a in arms}
    per_step = {a: {} for a in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for a in arms[r % len(arms):] + arms[:r % len(arms)]:
                record, timings = arm(Path(tmp), args.epochs, a)
                steady[a].append(record["steady_samples_per_s"])
                for piece, seconds in timings.items():
                    per_step[a].setdefault(piece, []).append(1e6 * seconds / record["steps"])
                step_ms = 1000 * record["train_seconds"] / record["steps"]
            print(f"  repeat {r}: " + ", ".join(f"{a or 'all on'} {steady[a][-1]:.0f}" for a in arms)
                  + f" steady samples/s; a step {step_ms:.1f} ms", flush=True)
    print(f"{args.repeats} repeats of {args.epochs} epochs, {record['steps']} steps a run")
    print("timed on rank 0, all pieces on (µs a step, median over repeats):")
    for piece, values in per_step[""].items():
        print(f"  {piece:42s} {statistics.median(values):8.1f}")
    print("  GPU sampler: a thread on a GPU node only (a no-op on CPU); tracker hand-off: none without a tracker")
    for a in OFF:
        ratios = [x / y for x, y in zip(steady[a], steady[""])]
        print(f"{a} off / all on, steady samples/s: median {statistics.median(ratios):.3f}, "
              f"mean {statistics.mean(ratios):.3f} +- {statistics.stdev(ratios) / len(ratios) ** 0.5:.3f}; "
              "per repeat " + ", ".join(f"{x:.3f}" for x in ratios))


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        entry()
    else:
        main()
