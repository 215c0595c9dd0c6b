import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")


def descendants(pid: int) -> list[int]:
    """pid's children, grandchildren, ... (torchrun starts each worker in a session of its own, so a
    process group does not hold them all)."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def end_all(proc: subprocess.Popen) -> None:
    """SIGKILL a process, its process group and every process below it, at once; reap it."""
    pids = [proc.pid, *descendants(proc.pid)]
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


_STARTED: list[subprocess.Popen] = []   # every process a test started: ended, with its children, after it


def command_env(env=None, exact_env=False) -> dict:
    """The environment commands run in: this one with the venv first on PATH, plus env; or env alone."""
    return env if exact_env else {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **(env or {})}


def spawn(cmd, log: Path | None = None, cwd=None, env=None, exact_env=False) -> subprocess.Popen:
    """Start cmd in the background, in a process group of its own, its output in log (appended). The test's
    clean-up ends it and everything it started, whether the test passed or not."""
    out = open(log, "a") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, cwd=cwd, env=command_env(env, exact_env), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    _STARTED.append(proc)
    return proc


def run(cmd, cwd=None, env=None, check=True, timeout=600, exact_env=False, input_text=None):
    """Run a command, return the CompletedProcess; on failure show its output. On its timeout, it and
    everything it started are ended (a snakemake's jobs, a launch's torchrun and workers). input_text:
    what it reads on its standard input (a person's answer to a question)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=command_env(env, exact_env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            stdin=subprocess.PIPE if input_text is not None else None)
    try:
        stdout, stderr = proc.communicate(input=input_text, timeout=timeout)
    except BaseException:
        end_all(proc)
        raise
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    if check and done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
    return done


def pytest_xdist_make_scheduler(config, log):
    """How pytest-xdist shares the suite between its workers (`make test`): the tests on each SLURM test
    cluster (tests/slurm/, CLUSTERS below) are one unit of work, run in order by one worker, since they
    share that cluster and several count its jobs or stop its daemons; the rest go a module at a time to
    whichever worker is free (a module's shared fixtures then run once). The clusters' units, the
    largest, are handed out first, one to each worker: they mostly wait on SLURM, side by side."""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.startswith("tests/slurm/"):
                return f"tests/slurm on {cluster_of(Path(path).stem)}"
            return path

        def _assign_work_unit(self, node) -> None:
            # xdist hands out the unit with the most tests first; the clusters' go first whatever their count
            for scope in self.workqueue:
                if scope.startswith("tests/slurm on "):
                    self.workqueue.move_to_end(scope, last=False)
                    break
            super()._assign_work_unit(node)

    return SuiteScheduling(config, log)


def cancel_jobs(cluster: dict) -> None:
    """Cancel every job still queued or running on the SLURM test cluster (cluster: its environment)."""
    env = {**os.environ, **cluster}
    jobs = subprocess.run(["squeue", "-h", "-o", "%A"], env=env, capture_output=True, text=True).stdout.split()
    if jobs:
        subprocess.run(["scancel", *jobs], env=env, capture_output=True)


@pytest.fixture(autouse=True)
def _end_what_the_test_started(request):
    """After every test: the processes it started are ended (with their children), and where it used the
    SLURM test cluster, every job still queued or running there is cancelled."""
    yield
    while _STARTED:
        end_all(_STARTED.pop())
    if "slurm_cluster" in request.fixturenames:
        cancel_jobs(request.getfixturevalue("slurm_cluster"))


@pytest.fixture
def wandb_in_this_process(monkeypatch):
    """For a test that runs W&B in the test's own process: it starts a service here, which W&B hands to
    child processes through WANDB_SERVICE. After the test, the service is ended and the variable is as
    before, so that later tests' sessions never meet it."""
    import wandb

    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    wandb.teardown()   # a service an earlier test left, if any: wandb.setup() starts a fresh one
    yield wandb
    wandb.teardown()


@contextlib.contextmanager
def ending_what_it_starts(cluster: dict | None = None):
    """Around a module fixture's set-up: however it ends (returned, failed, timed out), the processes it
    started end with everything below them, and given the SLURM test cluster's environment, its jobs
    still queued or running are cancelled. A fixture that fails in its set-up never reaches the
    function-level clean-up above, which runs only around a test."""
    mark = len(_STARTED)
    try:
        yield
    finally:
        while len(_STARTED) > mark:
            end_all(_STARTED.pop())
        if cluster is not None:
            cancel_jobs(cluster)


# The environment plan tests plan in: a $HOME to refuse datasets under, and a $SCRATCH.
ENV = {"HOME": "/home/user", "SCRATCH": "/scratch/user"}
ROOT_VARIABLES = ("SCRATCH", "TMP_SHARED", "TMPDIR")


def wait_for(condition, timeout: float = 120, what: str = "condition", every: float = 0.02) -> None:
    """Poll condition until it holds; fail naming what was awaited after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def unactivated_env(tmp_path: Path, **extra) -> dict:
    """The shell of a user who runs `.venv/bin/snakemake` without activating the venv, on a site
    without $SCRATCH: no venv on PATH, no root variables, and a `python` first on PATH that has no
    torch (/usr/bin/python3, Debian's own), as a cron job or a wrapper script would have."""
    decoy = tmp_path / "decoy-bin"
    decoy.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        if not (decoy / name).exists():
            (decoy / name).symlink_to("/usr/bin/python3")
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d and Path(d).resolve() != BIN.resolve()]
    env = {k: v for k, v in os.environ.items() if k not in (*ROOT_VARIABLES, "VIRTUAL_ENV", "PYTHONPATH")}
    return {**env, "PATH": os.pathsep.join([str(decoy), *path]), **extra}


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def read_json(path):
    return json.loads(Path(path).read_text())


# Snakemake for --executor slurm: its status checks every few seconds on the test cluster (tests/slurm/fast_status.py)
SLURM_SNAKEMAKE = [str(BIN / "python"), str(REPO / "tests" / "slurm" / "fast_status.py")]


def snakemake_cmd(workdir: Path, configfile: Path, *args) -> list[str]:
    snakemake = SLURM_SNAKEMAKE if "slurm" in args else [SNAKEMAKE]
    return [*snakemake, "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--configfile", str(configfile), *args]


def snakemake(workdir: Path, configfile: Path, *args, check=True, env=None, timeout=900, exact_env=False):
    return run(snakemake_cmd(workdir, configfile, *args), cwd=workdir, check=check, env=env, timeout=timeout,
               exact_env=exact_env)


def run_config(run_cfg: dict | None = None):
    """One run's complete config (a RunConfig), the schema's defaults under run_cfg."""
    from airetrain.plan.config import resolve

    return resolve({"runs": {"r": run_cfg or {}}})[1]["r"]


def make_plan(run_cfg: dict, tmp_path: Path, name: str = "t"):
    """The plan of one run with its roots under tmp_path (scratch/, and fast/ as the fast root)."""
    from airetrain.plan.planner import plan_all

    config = {"roots": {"scratch": str(tmp_path / "scratch"), "tmp_shared": str(tmp_path / "fast")},
              "runs": {name: run_cfg}}
    return plan_all(config, env={"HOME": "/nonexistent"})[name]


def write_plan(results: Path, tmp_path: Path, name: str, run_cfg: dict | None = None):
    """results/<name>/plan.json as the plan step writes it (make_plan's roots); returns the plan."""
    from airetrain.records import Plan, write_record

    plan = make_plan(run_cfg or {}, tmp_path, name)
    write_record(results / name / "plan.json", Plan, plan)
    return plan


def finished_run(results: Path, scratch: Path, name: str, run_cfg: dict, job_id: str | None):
    """A run planned and finished in results/<name>: its plan.json, a train.json and a promote benchmark."""
    from airetrain.plan.planner import plan_all
    from airetrain.typed import to_dict

    plan = plan_all({"roots": {"scratch": str(scratch)}, "runs": {name: run_cfg}}, env=ENV)[name]
    out = results / name
    (out / "benchmarks").mkdir(parents=True)
    (out / "plan.json").write_text(json.dumps(to_dict(plan)))
    (out / "train.json").write_text(json.dumps({
        "slurm_job_id": job_id, "steps": 220, "steps_this_session": 220, "train_seconds": 110.0,
        "step_time_s": 0.5, "samples_per_s": 128.0, "data_wait_frac": 0.02}))
    (out / "benchmarks" / "promote.tsv").write_text("s\th:m:s\tmax_rss\n3.25\t0:00:03\t120\n")
    return plan


def prepare_training(tmp_path: Path, run_cfg: dict, name: str = "t", env: dict | None = None,
                     cwd: Path | None = None) -> tuple[Path, list[str]]:
    """plan -> stage, as the rules do, in tmp_path; returns (results dir, the `airetrain launch` command).
    env and cwd: the run's environment and working directory; the plan step imports the user's code
    from them (PYTHONPATH, and the workflow's directory), as the plan rule does."""
    from airetrain.catalog import prepared
    from airetrain.commands.resolve import resolve_plan
    from airetrain.fsutil import write_json_atomic
    from airetrain.records import Plan, write_record
    from airetrain.roots import Root
    from airetrain.stage.prepare import prepare
    from airetrain.stage.staging import stage_dataset, stage_record
    from airetrain.workflow import TRAIN_SCRIPT

    for path in reversed([*(env or {}).get("PYTHONPATH", "").split(os.pathsep), str(cwd or "")]):
        if path and path not in sys.path:
            sys.path.insert(0, path)
    plan = resolve_plan(make_plan(run_cfg, tmp_path, name))
    if plan.config.data.name in prepared():
        prepare(plan.config.data.name, plan.dataset)
    out = tmp_path / "results" / name
    write_record(out / "plan.json", Plan, plan)
    target = tmp_path / "fast" / "airetrain" / name / "data"
    staged = stage_dataset(plan.dataset, target, plan.config.data.format) if plan.dataset else None
    write_json_atomic(out / "stage.json", stage_record(staged, Root(tmp_path / "fast", "config"), None))
    cmd = [sys.executable, "-m", "airetrain", "launch", "--plan", str(out / "plan.json"),
           "--stage", str(out / "stage.json"), "--out", str(out), "--script", str(TRAIN_SCRIPT)]
    return out, cmd


DUMP_PARAMS_SCRIPT = REPO / "tests" / "torchrun" / "dump_params.py"


def launch_training(tmp_path: Path, run_cfg: dict, name: str = "t", dump=None, cwd=None, check=True, env=None):
    """prepare_training, then run `airetrain launch` (a real torchrun) to its end.

    With dump, the ranks run tests/torchrun/dump_params.py: the trainer, then each rank saves its
    final parameters to dump/rank<N>.pt (to check that the replicas agree)."""
    out, cmd = prepare_training(tmp_path, run_cfg, name, env, cwd)
    if dump:
        cmd[cmd.index("--script") + 1] = str(DUMP_PARAMS_SCRIPT)
        env = {"AIRETRAIN_TEST_DUMP_DIR": str(dump), **(env or {})}
    proc = run(cmd, cwd=cwd, env=env, check=check)
    return out, proc


def final_state(out: Path, tmp_path: Path) -> dict:
    """Model and optimizer of the run's final durable checkpoint (a file, or a DCP directory)."""
    path = Path(read_json(out / "train.json")["checkpoint"]["path"])
    if path.is_dir():
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        dcp_to_torch_save(path, tmp_path / "converted.pt")
        path = tmp_path / "converted.pt"
    import torch
    state = torch.load(path, weights_only=True)
    return flatten({"model": state["model"], "optimizer": state["optimizer"]})


def flatten(tree, prefix=""):
    """A nested state (dicts, lists) as one dict of dotted keys."""
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, value in enumerate(tree) for k, v in flatten(value, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): tree}


def assert_identical(a: dict, b: dict, at_least: int = 10) -> None:
    """Two flattened states hold the same keys (at least `at_least`) and bit-identical values."""
    import torch

    assert a.keys() == b.keys() and len(a) >= at_least
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def newest_step(directory: Path) -> int:
    """The newest checkpoint step recorded in a checkpoint directory (0: none)."""
    from airetrain.checkpoint import store

    return max((e["step"] for e in store.entries(directory)), default=0)


SLURM_DIR = REPO / "tests" / "slurm"
sys.path.insert(0, str(SLURM_DIR))   # tests/slurm/jobs.py: the report's live jobs, sbatch and wait helpers


# The suite's SLURM test clusters, both Aire-shaped (tests/slurm/up.sh): each test module runs on one, and the
# two run side by side. "lab" is the one `make slurm-up` starts; "twin" has its own state, ports, node names
# (twingpu1, ...: their cgroups apart) and job ids (a run's rendezvous port comes from its job id). The
# modules that name lab's nodes or stop its daemons stay on lab; the rest are spread to even the two out.
CLUSTERS = {"lab": {}, "twin": {"AIRETRAIN_SLURM_NODE_PREFIX": "twin", "AIRETRAIN_SLURM_CLUSTER": "twin",
                                "AIRETRAIN_SLURM_PORT": "7017", "AIRETRAIN_SLURM_FIRST_JOB_ID": "7000"}}
ON_TWIN = {"test_slurm_tune", "test_slurm_submit", "test_slurm_finetune", "test_slurm_forecast",
           "test_slurm_report", "test_slurm_rightsize", "test_slurm_lock", "test_slurm_strings",
           "test_slurm_requeue"}
_in_use = ["lab"]   # the cluster of the module this worker runs now (a worker runs one module at a time)


def cluster_of(module: str) -> str:
    return "twin" if module in ON_TWIN else "lab"


def slurm_state(cluster: str | None = None) -> Path:
    """The state directory of a SLURM test cluster: by default, of the one this worker's tests use now."""
    lab = Path(os.environ.get("AIRETRAIN_SLURM_STATE", SLURM_DIR / "state"))
    name = cluster or _in_use[0]
    return lab if name == "lab" else lab.with_name(f"{lab.name}-{name}")


def _cluster_answers(env) -> bool:
    try:
        out = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "UP" in out


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """airetrain's wheel, built from a clean copy of the package (no build/ or egg-info of another build)."""
    import shutil

    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(REPO / "airetrain", source / "airetrain", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work),
         str(source)], timeout=300)
    (built,) = work.glob("airetrain-*.whl")
    return built


@pytest.fixture(scope="session")
def slurm_clusters():
    """cluster(name): the environment of that real local SLURM test cluster (tests/slurm/up.sh), started
    here if it is not up yet. Clusters this session started are stopped with it; one that was up before is
    left up.

    Skipped with the reason only where it cannot start (no root, no unshare); under CI=true
    a cluster that does not start fails the run.
    """
    started, up = [], {}

    def cluster(name: str) -> dict:
        if name in up:
            return up[name]
        state = slurm_state(name)
        env = {**os.environ, "SLURM_CONF": str(state / "etc" / "slurm.conf")}
        if not _cluster_answers(env):
            problem = None
            if os.geteuid() != 0:
                problem = "the SLURM test cluster needs root (tests/slurm/up.sh)"
            else:
                started.append(name)
                proc = subprocess.run(["bash", str(SLURM_DIR / "up.sh")],
                                      env={**os.environ, **CLUSTERS[name], "AIRETRAIN_SLURM_STATE": str(state)},
                                      capture_output=True, text=True, timeout=600)
                if proc.returncode != 0 or not _cluster_answers(env):
                    problem = f"tests/slurm/up.sh failed:\n{proc.stdout}\n{proc.stderr}"
            if problem:
                if os.environ.get("CI"):
                    pytest.fail(problem)
                pytest.skip(problem)
        up[name] = {"SLURM_CONF": env["SLURM_CONF"]}
        return up[name]

    yield cluster
    for name in started:
        subprocess.run(["bash", str(SLURM_DIR / "down.sh")],
                       env={**os.environ, **CLUSTERS[name], "AIRETRAIN_SLURM_STATE": str(slurm_state(name))},
                       capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def slurm_cluster(request, slurm_clusters):
    """The environment of the SLURM test cluster this module runs on (CLUSTERS), up."""
    name = cluster_of(Path(request.module.__file__).stem)
    env = slurm_clusters(name)
    _in_use[0] = name
    yield env
    _in_use[0] = "lab"


def mount_tmpfs(mount: Path, size: str) -> None:
    """Mount a tmpfs of size (mount's -o size: 1g, 40m) at mount, as root. Without root the test is
    skipped with the reason (a failure under CI=true): a real filesystem, never a stand-in."""
    mount.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "airetrain-test", str(mount)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        problem = f"a filesystem of its own needs root to mount a tmpfs: {proc.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)


def unmount(mount: Path) -> None:
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture(scope="session")
def second_filesystem(tmp_path_factory):
    """A filesystem of its own for the test session: a small tmpfs mounted for it (as root), unmounted at
    its end. Aire's fast root is another filesystem than scratch, so checkpoints are copied there, not
    hard-linked: a test of the copy needs this."""
    mount = tmp_path_factory.mktemp("second-filesystem")
    mount_tmpfs(mount, "1g")
    yield mount
    unmount(mount)


@pytest.fixture
def small_filesystem():
    """small_filesystem(path, size): a tmpfs of that size mounted at path for this test (a disk to
    fill for real: writes there fail with ENOSPC), unmounted after it."""
    mounted = []

    def mount(path: Path, size: str) -> Path:
        mount_tmpfs(path, size)
        mounted.append(path)
        return path
    yield mount
    for path in mounted:
        unmount(path)


@pytest.fixture
def fast_elsewhere(tmp_path, second_filesystem):
    """Make tmp_path/fast, the fast root of prepare_training, a directory on the second filesystem, as
    Aire's fast root is another filesystem than scratch: checkpoints are then copied to scratch."""
    import shutil

    elsewhere = second_filesystem / tmp_path.name
    elsewhere.mkdir()
    (tmp_path / "fast").symlink_to(elsewhere, target_is_directory=True)
    assert os.stat(elsewhere).st_dev != os.stat(tmp_path).st_dev
    yield elsewhere
    shutil.rmtree(elsewhere, ignore_errors=True)


@pytest.fixture(scope="session")
def process_group(tmp_path_factory):
    """A real one-rank gloo process group in this process: the trainer's pieces that reduce across
    ranks (evaluate, progress, summary) run here as rank 0 of 1, without torchrun."""
    import torch.distributed as dist

    store = tmp_path_factory.mktemp("process-group") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def synthetic_history(scratch: Path, plan: dict, job_id: str, seconds_per_step: float, steps: int,
                      startup_s: float = 20.0, stage_s: float = 10.0, promote_s: float = 5.0) -> dict:
    """Write one finished job's history line for a planned run, with measurements the test chooses: for
    what this machine cannot measure (GPU step times at several GPU counts). The line has the shape
    report.history writes, its profile from the plan."""
    from airetrain.rundir.history import HISTORY, profile, profile_id

    prof = profile(plan)
    line = {"run": plan.run, "job_id": job_id, "recorded": time.time(), "epochs": plan.config.train.epochs,
            "profile_id": profile_id(prof), "profile": prof,
            "requested": {"mem_mb_per_node": plan.slurm.mem_mb, "cpus_per_node": plan.cpus_per_node,
                          "time_min": plan.time_min.total},
            "measured": {"source": "synthetic", "mem_peak_mb_per_node": 1000.0, "busy_cores_per_node": 1.0,
                         "seconds_per_step": seconds_per_step, "steps": steps, "steps_this_session": steps,
                         "samples_per_s": None, "train_s": seconds_per_step * steps, "stage_s": stage_s,
                         "promote_s": promote_s, "elapsed_s": None, "startup_s": startup_s, "data_wait_frac": None}}
    directory = scratch / "airetrain" / plan.run
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / HISTORY, "a") as f:
        f.write(json.dumps(line) + "\n")
    return line


def plain_study(suggest, reported: dict, trials: int, epochs: int, sampler, reduction: int):
    """Optuna's own loop over a search's space, sampler and successive halving (min 1 epoch), each trial reporting
    the figures the pipeline's trial with the same parameters reported at each epoch. suggest(trial): the
    parameters, asked as the pipeline's space asks them; reported: {parameters: {epochs: metric}} (a KeyError: the
    plain study proposed parameters the pipeline did not)."""
    import optuna

    halving = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=reduction)
    study = optuna.create_study(direction="minimize", sampler=sampler, pruner=halving)
    for _ in range(trials):
        trial = study.ask()
        curve = reported[suggest(trial)]
        for epoch in range(1, epochs + 1):
            trial.report(curve[epoch], epoch)
            if trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                break
        else:
            study.tell(trial, curve[epochs])
    return study
