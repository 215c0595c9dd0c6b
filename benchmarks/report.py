"""Summarising N finished jobs: one sacct call for all (airetrain) against one call per job (the seff way).

On a SLURM cluster (the test cluster: `make slurm-up`, then `source tests/slurm/state/env.sh`) it
submits N tiny jobs, waits for them, and times both ways of getting the same figures; both end in
the same folding code, so the difference is the calls. Without SLURM, or with --synthetic, it times
the folding of a synthetic sacct table of 500 jobs (one parse of the whole text) against parsing it
job by job, as a per-job tool would.

With --peer N it submits N finished jobs (arrays included) and times the whole command, start-up
and sacct included, of `airetrain report --jobs` against the peer tool, reportseff 2.10.3, over the
same jobs (the two in turn, 11 rounds: medians and bests), and compares their CPU efficiencies.
reportseff lives in the benchmark's own venv (benchmarks/.peers/, made on first use from PyPI), not among
the project's dependencies.

    python benchmarks/report.py [--jobs 50] [--synthetic 500] [--peer 1995]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from airetrain.report.jobs import parse  # noqa: E402
from airetrain.report.query import query  # noqa: E402
from airetrain.report.collection import jobs_table  # noqa: E402
from sacct_synthetic import synthetic as synthetic_sacct  # noqa: E402


def submit(n: int) -> list[str]:
    ids = []
    for i in range(n):
        out = subprocess.run(["sbatch", "--parsable", "-p", "standard", "-c", "1", "--mem=100M", "-t", "1",
                              f"--job-name=bench{i}", "--output=/dev/null", "--wrap=true"],
                             capture_output=True, text=True, check=True).stdout
        ids.append(out.strip().split(";")[0])
    deadline = time.monotonic() + 600
    while subprocess.run(["squeue", "-h", "-j", ",".join(ids)], capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's jobs did not finish in 10 minutes")
        time.sleep(1)
    return ids


def one_call(ids: list[str]) -> dict:
    return query(ids)


def per_job(ids: list[str]) -> dict:
    jobs = {}
    for job_id in ids:
        jobs.update(query([job_id]))
    return jobs


def timed(fn, *args, repeats: int = 3) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best, result


def live(n: int) -> None:
    ids = submit(n)
    t_one, jobs_one = timed(one_call, ids)
    t_each, jobs_each = timed(per_job, ids)
    assert {j: f.figures() for j, f in jobs_one.items()} == {j: f.figures() for j, f in jobs_each.items()}
    print(f"{n} finished jobs on this cluster, the same figures both ways (best of 3):")
    print(f"  one sacct call:      {t_one * 1000:8.1f} ms")
    print(f"  one call per job:    {t_each * 1000:8.1f} ms")
    print(f"  ratio:               {t_each / t_one:8.1f}x (goal >= 10x)")


def synthetic(n: int) -> None:
    text = synthetic_sacct(n)
    by_job: dict[str, list[str]] = {}
    for line in text.splitlines():
        by_job.setdefault(line.split("|")[0].split(".")[0], []).append(line)
    t_all, table = timed(jobs_table, None, None, text)
    t_each, _ = timed(lambda: [parse("\n".join(lines)) for lines in by_job.values()])
    print(f"{n} synthetic jobs ({len(text.splitlines())} sacct rows), best of 3:")
    print(f"  whole table (parse, fold, advice): {t_all * 1000:8.1f} ms for {len(table)} rows")
    print(f"  parse only, job by job:            {t_each * 1000:8.1f} ms (ratio {t_each / t_all:.2f}; "
          "live, each per-job call also costs a sacct process and a database query)")


PEER = "reportseff==2.10.3"
PEER_VENV = Path(__file__).resolve().parent / ".peers" / "reportseff-2.10.3"


def reportseff() -> str:
    exe = PEER_VENV / "bin" / "reportseff"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(PEER_VENV / "bin" / "pip"), "install", "-q", PEER], check=True)
    return str(exe)


def submit_mix(n: int) -> list[str]:
    """n finished jobs: arrays of 100 tasks for most, single jobs for the rest (ids to ask for)."""
    arrays, singles = divmod(n, 100)
    # a fraction of a second of CPU each: short jobs, whose CPU efficiency tools compute differently
    common = ["-c", "1", "--mem=100M", "-t", "2", "--output=/dev/null",
              "--wrap=i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"]
    ids = []
    for i in range(arrays):
        ids.append(subprocess.run(["sbatch", "--parsable", "-p", "standard,gpu", f"--job-name=arr{i}",
                                   "--array=1-100", *common], capture_output=True, text=True,
                                  check=True).stdout.strip().split(";")[0])
    for i in range(singles):
        ids.append(subprocess.run(["sbatch", "--parsable", "-p", "standard,gpu", f"--job-name=one{i}", *common],
                                  capture_output=True, text=True, check=True).stdout.strip().split(";")[0])
    deadline = time.monotonic() + 1800
    while subprocess.run(["squeue", "-h", "-j", ",".join(ids)], capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's jobs did not finish in 30 minutes")
        time.sleep(2)
    time.sleep(5)   # slurmdbd records the last ends
    return ids


ROUNDS = 11


def run_out(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def side_by_side(ours: list[str], theirs: list[str]) -> list[tuple[float, float]]:
    """(best, median) seconds of each command, run in turn (which goes first alternates), so that a slow
    moment of the machine or of slurmdbd falls on both."""
    times: list[list[float]] = [[], []]
    for i in range(ROUNDS):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            subprocess.run((ours, theirs)[k], stdout=subprocess.DEVNULL, check=True)
            times[k].append(time.perf_counter() - t0)
    return [(min(t), statistics.median(t)) for t in times]


def peer(n: int) -> None:
    ids = submit_mix(n)
    airetrain = [str(Path(sys.executable).parent / "airetrain"), "report", "--jobs", ",".join(ids)]
    theirs = [reportseff(), "--no-color", "--parsable", "--format", "JobID,State,CPUEff,MemEff,TimeEff", *ids]
    ours, peer_out = run_out(airetrain), run_out(theirs)
    times = side_by_side(airetrain, theirs)
    (best_ours, t_ours), (best_peer, t_peer) = times
    rows_ours = [line for line in ours.splitlines()
                 if line.startswith("| ") and not line.startswith(("| run", "| ---"))]
    peer_rows = [line.split("|") for line in peer_out.splitlines()[1:] if line.strip()]
    ours_cpu = {j.job_id: j.cpu_eff for j in query(ids).values()}
    differ = [(r[0], r[2], ours_cpu.get(r[0])) for r in peer_rows
              if r[2] not in ("", "---") and ours_cpu.get(r[0]) is not None
              and abs(float(r[2].rstrip("%")) - 100 * ours_cpu[r[0]]) > 1.0]
    print(f"{len(rows_ours)} finished jobs (arrays included), the whole command each, {ROUNDS} rounds in turn "
          "(median; best):")
    print(f"  airetrain report --jobs: {t_ours:6.3f} s; {best_ours:6.3f} s")
    print(f"  reportseff 2.10.3:       {t_peer:6.3f} s; {best_peer:6.3f} s ({len(peer_rows)} rows)")
    print(f"  ratio:                   {t_peer / t_ours:6.2f}x; {best_peer / best_ours:6.2f}x "
          "(goal >= 1: at least as fast as reportseff)")
    print(f"  CPU efficiency differs by more than 1 point on {len(differ)} jobs; e.g. "
          + ", ".join(f"{j}: reportseff {r} vs seff's formula {100 * o:.1f}%" for j, r, o in differ[:3]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=50, help="live jobs to submit (needs SLURM)")
    ap.add_argument("--synthetic", type=int, default=500)
    ap.add_argument("--peer", type=int, default=0, help="jobs to submit for the side-by-side with reportseff")
    args = ap.parse_args()
    if args.peer:
        peer(args.peer)
        return
    if shutil.which("sbatch") and args.jobs:
        live(args.jobs)
    else:
        print("no SLURM here: live comparison skipped")
    synthetic(args.synthetic)


if __name__ == "__main__":
    main()
