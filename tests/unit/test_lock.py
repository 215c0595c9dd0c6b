"""One trainer per run: the lock in the run directory, with real processes standing in for trainers."""
import json
import subprocess
import sys
import threading
import time

from airetrain.train.launcher.lock import LOCK, LOG, RunLock

from conftest import spawn, wait_for


def events(run_dir):
    return [json.loads(line)["event"] for line in (run_dir / LOG).read_text().splitlines()]


def an_airetrain_process():
    """A live process whose command line names airetrain, as a launch's does."""
    return spawn([sys.executable, "-c", "import time; time.sleep(60)", "airetrain", "launch"])


def test_a_live_trainer_is_waited_for_and_the_lock_taken_when_it_ends(tmp_path):
    other = an_airetrain_process()
    (tmp_path / LOCK).write_text(json.dumps({"slurm_job_id": None, "host": __import__("socket").gethostname(),
                                             "pid": other.pid, "since": time.time()}))
    said = []
    lock = RunLock(tmp_path, None, say=said.append, poll_s=0.05)
    waiter = threading.Thread(target=lock.acquire)
    waiter.start()
    wait_for(lambda: any("waiting for it to end" in s for s in said), what="the wait")
    wait_for(lambda: lock.polls >= 5, what="the waiter to look at the live owner's lock five times")
    assert waiter.is_alive() and json.loads((tmp_path / LOCK).read_text())["pid"] == other.pid   # still waiting
    (tmp_path / LOCK).unlink()   # the other trainer ends and releases its lock
    other.kill()
    other.wait()
    waiter.join(timeout=30)
    assert not waiter.is_alive() and json.loads((tmp_path / LOCK).read_text())["pid"] == lock.me["pid"]
    assert f"is being trained by pid {other.pid} on" in said[0] and "has finished training" in said[-1]
    assert events(tmp_path) == [f"waits for pid {other.pid} on {lock.me['host']}",
                                f"took the lock after pid {other.pid} on {lock.me['host']} ended"]
    lock.release()
    assert not (tmp_path / LOCK).exists() and events(tmp_path)[-1] == "released the lock"


def test_a_stale_lock_is_taken_over_with_a_message(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK).write_text(json.dumps({"slurm_job_id": None, "host": __import__("socket").gethostname(),
                                             "pid": dead.pid, "since": 0}))
    said = []
    RunLock(tmp_path, None, say=said.append).acquire()
    assert said == [f"took over the lock of run {tmp_path.name} from pid {dead.pid} on "
                    f"{__import__('socket').gethostname()}, which is gone"]
    assert events(tmp_path)[0].startswith("took over a stale lock") and events(tmp_path)[1] == "took the lock"
    assert not list(tmp_path.glob(f"{LOCK}.stale*"))


def test_a_requeued_job_takes_back_its_own_lock_and_a_gone_job_loses_it(tmp_path, monkeypatch):
    (tmp_path / LOCK).write_text(json.dumps({"slurm_job_id": "41", "host": "n1", "pid": 1, "since": 0}))
    RunLock(tmp_path, "41", say=print).acquire()   # the same job, run again after a requeue
    assert "from an earlier run of this job" in events(tmp_path)[0]
    # a job squeue no longer knows (here: no squeue at all on PATH) is gone
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    said = []
    RunLock(tmp_path, "42", say=said.append).acquire()
    assert "no squeue here" in said[0] and "from SLURM job 41, which is gone" in said[1]
    assert json.loads((tmp_path / LOCK).read_text())["slurm_job_id"] == "42"


def test_release_leaves_a_lock_that_is_not_ours(tmp_path):
    mine = RunLock(tmp_path, "7", say=print)
    mine.acquire()
    (tmp_path / LOCK).write_text(json.dumps({"slurm_job_id": "8", "host": "n", "pid": 1, "since": 0}))
    mine.release()
    assert json.loads((tmp_path / LOCK).read_text())["slurm_job_id"] == "8"
