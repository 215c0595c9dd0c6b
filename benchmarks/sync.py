"""`airetrain sync --dry-run` on N runs' offline W&B sessions, against W&B's own `wandb sync --dry-run`
over the same session folders (the peer: what a user would run by hand on the login node).

Each run gets two real offline sessions (written once by W&B, copied under each run's id), as a
requeued run has. airetrain's command plans the config's N runs (a seeds list), finds each run's
sessions not uploaded yet and lists them; W&B's lists the folders it is given. Both end to end, as
commands, the same number of times, alternating.

    python benchmarks/sync.py [--runs 100] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SESSION = """
import sys, wandb
run = wandb.init(project="bench", id="template-0000", dir=sys.argv[1], mode="offline", resume="allow",
                 settings=wandb.Settings(console="off", x_disable_stats=True, silent=True))
for step in range(int(sys.argv[2]), int(sys.argv[3])):
    run.log({"train/loss": 1.0 / step, "train/lr": 0.001}, step=step)
run.finish()
"""


def template(tmp: Path) -> list[Path]:
    """Two real offline sessions of one W&B run (steps 1-500, 501-1000)."""
    (tmp / "session.py").write_text(SESSION)
    for first, last in ((1, 501), (501, 1001)):
        subprocess.run([sys.executable, str(tmp / "session.py"), str(tmp / "template"), str(first), str(last)],
                       check=True, capture_output=True)
    return sorted((tmp / "template" / "wandb").glob("offline-run-*"))


def runs(tmp: Path, n: int, sessions: list[Path]) -> tuple[Path, list[Path]]:
    """A config of n runs, each run's durable directory holding the two sessions under its own id."""
    from airetrain.fsutil import write_json_atomic

    config = tmp / "config.yaml"
    config.write_text(json.dumps({"roots": {"scratch": str(tmp / "scratch")},
                                  "defaults": {"device": "cpu", "data": {"name": "synthetic"},
                                               "tracking": {"wandb": {"project": "bench"}}},
                                  "runs": {"r": {"seeds": list(range(n))}}}))
    folders = []
    for seed in range(n):
        name = f"r-seed{seed}"
        run_id = f"{name}-0000abcd"
        durable = tmp / "scratch" / "airetrain" / name
        write_json_atomic(durable / "tracking" / "run.json", {"generation": "0000abcd", "wandb": {
            "id": run_id, "project": "bench", "entity": None, "mode": "offline"}})
        for session in sessions:
            target = durable / "tracking" / "wandb" / "wandb" / session.name.replace("template-0000", run_id)
            shutil.copytree(session, target)
            for f in target.glob("*.wandb"):
                f.rename(f.with_name(f"run-{run_id}.wandb"))
            folders.append(target)
    return config, folders


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start, done.stdout + done.stderr


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        config, folders = runs(tmp, args.runs, template(tmp))
        ours_s, peer_s = [], []
        for _ in range(args.repeats):
            seconds, out = timed([sys.executable, "-m", "airetrain", "sync", "--dry-run", "--configfile", str(config)],
                                 tmp)
            assert out.count("W&B run r-seed") == args.runs, out[-2000:]
            ours_s.append(seconds)
            seconds, out = timed([str(BIN / "wandb"), "sync", "--dry-run", *map(str, folders)], tmp)
            peer_s.append(seconds)
    print(f"{args.runs} runs, {len(folders)} offline sessions (1000 steps a run), {args.repeats} repeats")
    print(f"airetrain sync --dry-run (plans the config, then lists): median {statistics.median(ours_s):.2f} s "
          f"({min(ours_s):.2f}-{max(ours_s):.2f})")
    print(f"wandb sync --dry-run over the same folders:             median {statistics.median(peer_s):.2f} s "
          f"({min(peer_s):.2f}-{max(peer_s):.2f})")
    print(f"ratio airetrain / wandb: {statistics.median(ours_s) / statistics.median(peer_s):.2f}")


if __name__ == "__main__":
    main()
