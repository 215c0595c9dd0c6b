"""Jobs whose efficiency is known, for the report's tests on the SLURM test cluster.

    python tests/slurm/jobs.py --capture tests/fixtures/sacct_jobs.txt

submits them all, waits for them to end, and writes the one sacct call's output (the fixture the
offline tests read; its README says what each job was).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/, also when run as a script
from conftest import wait_for  # noqa: E402

PY = sys.executable
BURN = "import time\nt=time.process_time()\nwhile time.process_time()-t<8: pass"
TOUCH = "import time\nb=bytearray(500*2**20)\nfor i in range(0,len(b),4096): b[i]=1\ntime.sleep(6)"
TOUCH_200 = "import time\nb=bytearray(200*2**20)\nfor i in range(0,len(b),4096): b[i]=1\ntime.sleep(6)"
TOUCH_300 = TOUCH.replace("500*", "300*")
HOG = "b=bytearray(400*2**20)\nfor i in range(0,len(b),4096): b[i]=1\nimport time; time.sleep(5)"

# name -> sbatch arguments (the script is given with --wrap)
JOBS = {
    # one core of two kept busy for 8 s of CPU: CPU efficiency ~0.5 minus start-up
    "burner": ["-p", "standard", "-c", "2", "--mem=500M", "-t", "5", f"--wrap={PY} -c '{BURN}'"],
    # 500 MB touched and held, of 1000 MB: memory efficiency ~0.5
    "toucher": ["-p", "standard", "-c", "1", "--mem=1000M", "-t", "5", f"--wrap={PY} -c '{TOUCH}'"],
    # one task per node, 200 MB each: seff sums them (~400 MB for the step)
    "multinode": ["-p", "gpu", "-N", "2", "--ntasks-per-node=1", "-c", "1", "--mem=1000M", "-t", "5",
                  f"--wrap=srun {PY} -c '{TOUCH_200}'"],
    # memory asked per core: 2 x 300 MB, 300 MB touched -> memory efficiency ~0.5
    "percpu": ["-p", "standard", "-c", "2", "--mem-per-cpu=300M", "-t", "5", f"--wrap={PY} -c '{TOUCH_300}'"],
    "requeued": ["-p", "standard", "-c", "1", "--mem=200M", "-t", "5", "--requeue", "--wrap=sleep 15"],
    "cancelled": ["-p", "standard", "-c", "1", "--mem=200M", "-t", "5", "--wrap=sleep 120"],
    "timeout": ["-p", "standard", "-c", "1", "--mem=200M", "-t", "1", "--wrap=sleep 300"],
    "oom": ["-p", "standard", "-c", "1", "--mem=100M", "-t", "5", f"--wrap={PY} -c '{HOG}'"],
    "array": ["-p", "standard", "-c", "1", "--mem=200M", "-t", "5", "--array=1-2", "--wrap=sleep 2"],
}


def sbatch(name: str, args: list[str], env=None) -> str:
    out = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", "--output=/dev/null", *args],
                         capture_output=True, text=True, check=True, env=env).stdout
    return out.strip().split(";")[0]


def state(job_id: str, env=None) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, env=env).stdout
    return out.strip().splitlines()[0] if out.strip() else ""


def batch_step_accounted(job_id: str, env=None) -> bool:
    """slurmdbd lists the job's batch step as running: its first run is in accounting."""
    out = subprocess.run(["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,State"], capture_output=True, text=True,
                         env=env).stdout
    return f"{job_id}.batch|RUNNING" in out.splitlines()


def run_all(env=None) -> dict[str, str]:
    """Submit every job, requeue one and cancel one once they run, wait for all to end: {name: id}."""
    ids = {name: sbatch(name, args, env) for name, args in JOBS.items()}
    wait_for(lambda: state(ids["requeued"], env) == "RUNNING" and state(ids["cancelled"], env) == "RUNNING",
             120, "the jobs to start", every=0.5)
    wait_for(lambda: batch_step_accounted(ids["requeued"], env), 60, "the first run of the requeued job in accounting",
             every=0.5)
    subprocess.run(["scontrol", "requeue", ids["requeued"]], check=True, env=env)
    subprocess.run(["scancel", ids["cancelled"]], check=True, env=env)
    active = ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "REQUEUE_HOLD", "REQUEUE_FED")
    wait_for(lambda: not any(state(i, env) in active for i in ids.values()), 400, "the jobs to end", every=0.5)
    return ids


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--capture", required=True, help="write the sacct output here")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from airetrain.report.query import command

    ids = run_all()
    text = subprocess.run(command(list(ids.values())), capture_output=True, text=True, check=True).stdout
    Path(args.capture).write_text(text)
    print(" ".join(f"{name}={job}" for name, job in ids.items()))
