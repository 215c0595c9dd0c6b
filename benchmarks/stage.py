"""Stage 20,000 small files (1-64 KiB) against `rsync -a` of the same tree, then re-stage unchanged.

Prints both times and the ratios. Goals: first stage >= 1.5x faster than rsync;
re-staging an unchanged tree <= 5% of the first stage's time.

    python benchmarks/stage.py [--files 20000] [--dir /path/on/the/filesystem/to/test]
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from airetrain.stage.transfer import copy_dataset


def make_tree(root: Path, files: int, seed: int = 0, name=lambda i: f"d{i // 1000:03d}/f{i:06d}.bin") -> int:
    """`files` files of 1-64 KiB below root, the i-th at name(i); returns their bytes."""
    rng = random.Random(seed)
    blob = os.urandom(64 * 1024)
    total = 0
    for i in range(files):
        size = rng.randint(1024, 64 * 1024)
        path = root / name(i)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob[:size])
        total += size
    return total


def drop_target(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    os.sync()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--files", type=int, default=20_000)
    p.add_argument("--dir", default=None, help="where to build the trees (default: a temp dir)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if not shutil.which("rsync"):
        raise SystemExit("rsync is not installed: apt-get install rsync")

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        tmp = Path(tmp)
        src = tmp / "src"
        nbytes = make_tree(src, args.files)
        os.sync()
        print(f"tree: {args.files} files, {nbytes / 1e6:.1f} MB in {src}")
        rsync_t, stage_t, restage_t = [], [], []
        for r in range(args.repeats):  # alternate, so drift in the machine hits both alike
            drop_target(tmp / "rsync")
            t = time.perf_counter()
            subprocess.run(["rsync", "-a", f"{src}/", f"{tmp / 'rsync'}/"], check=True)
            rsync_t.append(time.perf_counter() - t)

            drop_target(tmp / "stage")
            t = time.perf_counter()
            first = copy_dataset(src, tmp / "stage")
            stage_t.append(time.perf_counter() - t)
            assert first["copied_files"] == args.files

            t = time.perf_counter()
            again = copy_dataset(src, tmp / "stage")
            restage_t.append(time.perf_counter() - t)
            assert again["mode"] == "unchanged"
            print(f"  repeat {r}: rsync {rsync_t[-1]:.2f} s, stage {stage_t[-1]:.2f} s, "
                  f"re-stage {restage_t[-1]:.3f} s")

        rsync_s, stage_s, restage_s = min(rsync_t), min(stage_t), min(restage_t)
        print(f"rsync -a        : {rsync_s:.2f} s (best of {args.repeats})")
        print(f"airetrain stage : {stage_s:.2f} s (best of {args.repeats})")
        print(f"re-stage        : {restage_s:.3f} s (best of {args.repeats})")
        print(f"speed-up vs rsync       : {rsync_s / stage_s:.2f}x  (goal >= 1.5x)")
        print(f"re-stage / first stage  : {100 * restage_s / stage_s:.1f}%  (goal <= 5%)")


if __name__ == "__main__":
    main()
