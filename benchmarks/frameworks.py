"""What airetrain's framework callbacks cost a training: the same script with and without the callback,
under torchrun with 2 processes on CPU (gloo), back to back in a rotating order.

- Hugging Face Trainer (tests/torchrun/frameworks.py's HF_TRAINER: a small Llama on synthetic tokens):
  the Trainer's own train_samples_per_second.
- Lightning (its LIGHTNING: a small network on the digits): samples over fit's seconds. Without the
  callback the script is given --devices=2 (Lightning alone would train two copies of one process).

The callback's work per step: one all-reduce of the stop flag (the deadline, SIGTERM), and a
metrics.jsonl line per log interval. Both arms save the same checkpoints.

    python benchmarks/frameworks.py [--repeats 5] [--hf-steps 200] [--epochs 6]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "torchrun"))
from frameworks import HF_TRAINER, LIGHTNING  # noqa: E402

TRAIN_SAMPLES = 1437   # the digits' train split


def launch(tmp: Path, source: str, args: list[str], data: Path | None = None) -> dict:
    """The script under torchrun (2 processes), with a fresh checkpoint directory; its final.json."""
    for name in ("ck", "durable", "results"):
        subprocess.run(["rm", "-rf", str(tmp / name)], check=True)
        (tmp / name).mkdir()
    (tmp / "train.py").write_text(source)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AIRETRAIN_CHECKPOINT_DIR": str(tmp / "ck"),
           "AIRETRAIN_DURABLE_DIR": str(tmp / "durable"), "AIRETRAIN_RESULTS_DIR": str(tmp / "results"),
           "AIRETRAIN_DATA_DIR": str(data or tmp), "WANDB_DISABLED": "true"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(tmp / "train.py"), *args], check=True, capture_output=True, env=env, cwd=tmp)
    return json.loads((tmp / "results" / "final.json").read_text())


def stats(values: list[float]) -> str:
    spread = f", range {min(values):.3f}-{max(values):.3f}" if len(values) > 1 else ""
    return f"median {statistics.median(values):.3f}{spread}"


def main() -> None:
    from airetrain.stage.prepare import prepare_digits

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hf-steps", type=int, default=200)
    p.add_argument("--epochs", type=int, default=6)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        data = prepare_digits(tmp / "digits")
        arms = {
            "hf": lambda plain: launch(tmp, HF_TRAINER, ["--steps", str(args.hf_steps),
                                                          *(["--no-callback"] if plain else [])])["samples_per_s"],
            "lightning": lambda plain: (lambda f: args.epochs * TRAIN_SAMPLES / f["fit_s"])(launch(
                tmp, LIGHTNING, ["--epochs", str(args.epochs), *(["--no-callback", "--devices=2"] if plain else [])],
                data)),
        }
        for framework, measure in arms.items():
            rates = {True: [], False: []}
            for r in range(args.repeats):
                for plain in ((True, False) if r % 2 == 0 else (False, True)):
                    rates[plain].append(measure(plain))
                print(f"  {framework} repeat {r}: without {rates[True][-1]:.0f}, with the callback "
                      f"{rates[False][-1]:.0f} samples/s", flush=True)
            ratios = [w / wo for w, wo in zip(rates[False], rates[True])]
            print(f"{framework}: ratio with / without the callback: {stats(ratios)}; per repeat "
                  + ", ".join(f"{x:.3f}" for x in ratios), flush=True)


if __name__ == "__main__":
    main()
