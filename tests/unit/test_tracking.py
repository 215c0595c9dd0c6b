"""Trackers without training: the config's checks, the sending thread's rules, the tracker run's
identity, W&B's offline files read back, and what `airetrain sync` would upload. The trackers with
real training are tests/torchrun/test_tracking_resume.py's and the SLURM requeue test's."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airetrain.errors import ConfigError
from airetrain.plan.planner import plan_all
from airetrain.tracking import identity, sender, sync, wandb_files
from airetrain.tracking.names import is_secret, uri_problem, web_url
from airetrain.tracking.registry import label

from conftest import BIN, run
from trackers import SECRETS


def plan(tracking: dict, tmp_path: Path, site: dict | None = None, **run_cfg):
    config = {"roots": {"scratch": str(tmp_path / "scratch")}, "site": site or {},
              "runs": {"r": {"device": "cpu", "data": {"name": "synthetic"}, "tracking": tracking, **run_cfg}}}
    return plan_all(config, env={"HOME": "/nonexistent"})["r"]


def refusal(tracking: dict, tmp_path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        plan(tracking, tmp_path)
    return str(e.value)


def test_the_plan_refuses_unknown_keys_names_and_uris_with_the_fix(tmp_path):
    assert "unknown key 'projct' (did you mean 'project'?) in runs.r.tracking.wandb; allowed keys: entity, mode, " \
           "project" in refusal({"wandb": {"projct": "x"}}, tmp_path)
    assert "unknown key 'wanb' (did you mean 'wandb'?) in runs.r.tracking" in refusal({"wanb": {}}, tmp_path)
    assert "runs.r.tracking.wandb.project = 'my project;rm' is not allowed: letters, digits" in \
        refusal({"wandb": {"project": "my project;rm"}}, tmp_path)
    assert "runs.r.tracking.wandb.mode = 'offlin' is not allowed (did you mean 'offline'?)" in \
        refusal({"wandb": {"project": "p", "mode": "offlin"}}, tmp_path)
    password = refusal({"mlflow": {"tracking_uri": "http://me:hunter2@login1:5000"}}, tmp_path)
    assert "tracking_uri" in password and "MLFLOW_TRACKING_PASSWORD" in password
    assert "hunter2" not in password.split("is refused")[1]   # the fix does not repeat it
    assert "scheme 'ftp'" in refusal({"mlflow": {"tracking_uri": "ftp://login1/x"}}, tmp_path)


def test_mlflow_uris_are_servers_or_sqlite_stores_and_carry_no_secret_or_shell():
    assert uri_problem("http://login1:5000") is None and uri_problem("https://mlflow.leeds.ac.uk/lab") is None
    assert uri_problem("sqlite:///mlflow.db") is None and uri_problem("sqlite:////scratch/me/mlflow.db") is None
    for bad in ("http://login1:5000/$(id)", "http://a b", "http://u:p@h", "http://h?token=1", "sqlite:///", "file:/x",
                "login1:5000"):
        assert uri_problem(bad), bad
    assert web_url("http://login1:5000/", "3", "abc") == "http://login1:5000/#/experiments/3/runs/abc"
    assert web_url("sqlite:///m.db", "3", "abc") is None
    assert label({"wandb": {"id": "r-1a2b", "project": "p"}, "mlflow": {"run_id": "9f", "url": None}}) == \
        "W&B p/r-1a2b; MLflow 9f"
    assert all(is_secret(name) for name in SECRETS) and not is_secret("WANDB_PROJECT")


def test_a_tracker_not_installed_is_refused_with_its_pip_command(tmp_path, monkeypatch):
    """This machine has both packages; the plan is asked as on one without wandb."""
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else found(name, *a))
    message = refusal({"wandb": {"project": "p"}}, tmp_path)
    assert "runs.r.tracking.wandb needs the wandb package" in message and "pip install 'airetrain[wandb]'" in message


def test_online_wandb_where_compute_nodes_have_no_internet_plans_with_a_warning(tmp_path):
    offline_site = plan({"wandb": {"project": "p", "mode": "online"}}, tmp_path)
    assert any("use mode: offline, and `airetrain sync`" in w for w in offline_site.warnings)
    online_site = plan({"wandb": {"project": "p", "mode": "online"}}, tmp_path, site={"compute_nodes_online": True})
    assert not any("airetrain sync" in w for w in online_site.warnings)
    assert plan({"wandb": {"project": "p"}}, tmp_path).config.tracking.wandb.mode == "offline"   # the default


class Collecting:
    """A tracker that keeps what it is sent; it holds steps up to 10 already, as after a killed session."""
    name = "collecting"

    def __init__(self, held=None, fail_at=()):
        self.sent, self.held, self.fail_at, self.closed = [], held or {"train/loss": 10}, set(fail_at), False

    def open(self):
        return self.held

    def log(self, step, figures):
        if step in self.fail_at:
            raise ConnectionError("the server did not answer")
        self.sent.append((step, figures))

    def close(self):
        self.closed = True


def test_the_sender_skips_what_the_tracker_holds_and_counts_what_a_failure_loses(monkeypatch):
    monkeypatch.setattr(sender, "COOL_DOWN_S", 3600.0)   # after the failure, the rest is lost
    good, failing = Collecting(), Collecting(fail_at={20})
    failing.name = "failing"
    s = sender.Sender([good, failing])
    for step in (5, 10, 15, 20, 25):
        s.log(step, {"loss": 1.0 / step, "of_steps": 30, "eta_s": 3.0, "eval_loss": None})
    counts = s.close()
    assert [step for step, _ in good.sent] == [15, 20, 25] and good.sent[0][1] == {"train/loss": 1 / 15}
    assert counts["collecting"] == {"logged": 3, "skipped": 2, "lost": 0, "error": None}
    assert [step for step, _ in failing.sent] == [15]
    assert counts["failing"] == {"logged": 1, "skipped": 2, "lost": 2,
                                 "error": "ConnectionError: the server did not answer"}
    assert good.closed and failing.closed


def test_a_tracker_that_hangs_never_holds_a_step_and_loses_only_what_it_could_not_send():
    release = threading.Event()

    class Hanging(Collecting):
        def log(self, step, figures):
            release.wait()
            super().log(step, figures)

    hanging = Hanging(held={})
    s = sender.Sender([hanging], capacity=4)
    started = time.perf_counter()
    for step in range(1, 101):   # a hundred log lines into a queue of four: none waits
        s.log(step, {"loss": 1.0})
    assert time.perf_counter() - started < 5   # a bound to fail a blocking call, not a speed claim
    counts = s.close(timeout_s=0.5)
    release.set()
    assert counts["collecting"]["lost"] >= 95 and counts["collecting"]["logged"] == 0


def test_one_generation_per_training_and_a_restart_supersedes_it(tmp_path):
    first = identity.Identity(tmp_path, "cnn-lr3e-4")
    again = identity.Identity(tmp_path, "cnn-lr3e-4")
    assert first.generation == again.generation and first.wandb_id == f"cnn-lr3e-4-{first.generation}"
    first.set("mlflow", run_id="abc")
    assert identity.supersede(tmp_path)
    retrained = identity.Identity(tmp_path, "cnn-lr3e-4")
    assert retrained.generation != first.generation and retrained.of("mlflow") == {}
    assert [s["mlflow"]["run_id"] for s in retrained.superseded] == ["abc"]
    retrained.mark_tagged("mlflow")
    assert identity.Identity(tmp_path, "cnn-lr3e-4").superseded[0]["mlflow_tagged"] is True


def test_a_training_with_another_fingerprint_is_a_new_tracker_run(tmp_path):
    """Another config (or other start weights) trains from step 0 beside the old checkpoints: a new
    tracker run, the old one superseded; the same fingerprint (a kill before the first checkpoint,
    a resume) and the promote step (no fingerprint) continue the recorded one."""
    first = identity.Identity(tmp_path, "r", "fp-a")
    assert identity.Identity(tmp_path, "r", "fp-a").generation == first.generation
    assert identity.Identity(tmp_path, "r").generation == first.generation
    changed = identity.Identity(tmp_path, "r", "fp-b")
    assert changed.generation != first.generation
    assert [s["generation"] for s in changed.superseded] == [first.generation]
    assert identity.Identity(tmp_path, "r").generation == changed.generation


SESSION = """
import sys, wandb
run = wandb.init(project="p", id="r-0001", dir=sys.argv[1], mode="offline", resume="allow",
                 config={"optim.lr": 0.001}, settings=wandb.Settings(console="off", x_disable_stats=True))
for step in range(int(sys.argv[2]), int(sys.argv[3]) + 1):
    run.log({"train/loss": 1.0 / step}, step=step)
run.finish()
"""


def test_w_and_b_offline_files_are_read_back_and_a_torn_one_up_to_its_last_whole_record(tmp_path):
    script = tmp_path / "session.py"
    script.write_text(SESSION)
    for first, last in ((1, 40), (41, 60)):
        # W&B names a session's folder by the second it started: two sessions of a run start in two seconds,
        # as a job's requeued sessions do (two in one second would share a folder). This script is W&B alone,
        # without the sink's wait: the next session starts in a second after this one ended.
        run([sys.executable, str(script), str(tmp_path), str(first), str(last)], env={"WANDB_SILENT": "true"})
        ended = int(time.time())
        while int(time.time()) == ended:
            time.sleep(0.05)
    folder = tmp_path / "wandb"
    files = wandb_files.sessions(folder, "r-0001")
    assert len(files) == 2 and [wandb_files.run_id_of(f.parent) for f in files] == ["r-0001", "r-0001"]
    # a session that started in the second of another of its run gets W&B's folder name with -1 after it
    again = folder / f"{files[0].parent.name}-1"
    shutil.copytree(files[1].parent, again)
    assert wandb_files.sessions(folder, "r-0001") == [files[0], again / files[0].name, files[1]]
    shutil.rmtree(again)
    rows = [wandb_files.history(f) for f in files]
    assert [r["_step"] for r in rows[0]] == list(range(1, 41)) and rows[1][-1] == {**rows[1][-1], "_step": 60}
    assert rows[0][9]["train/loss"] == 1 / 10
    assert wandb_files.last_steps(folder, "r-0001") == {"train/loss": 60}
    assert wandb_files.config(files[0])["optim.lr"] == 0.001
    torn = tmp_path / "torn.wandb"
    data = files[0].read_bytes()
    torn.write_bytes(data[:len(data) * 2 // 3])   # a kill mid-write
    kept = wandb_files.history(torn)
    assert 0 < len(kept) < 40 and [r["_step"] for r in kept] == list(range(1, len(kept) + 1))


def test_two_sessions_of_a_w_and_b_run_in_one_second_keep_both_histories(tmp_path, wandb_in_this_process):
    """W&B names an offline session's folder by the second it starts: a session whose second already
    has a folder of its run would write over that folder's file. The sink waits for a free second.
    Folders for this second and the next two are made first, as a session that just ended leaves."""
    from airetrain.tracking.trackers import sinks

    p = plan({"wandb": {"project": "p", "mode": "offline"}}, tmp_path)
    folder = p.durable_dir / "tracking" / "wandb" / "wandb"
    run_id = identity.Identity(p.durable_dir, p.run, "fp").wandb_id
    now = time.time()
    taken = [folder / f"offline-run-{time.strftime('%Y%m%d_%H%M%S', time.localtime(now + s))}-{run_id}"
             for s in range(3)]
    earlier = b":W&B" + bytes(3)   # a session's file: W&B's header, no record yet
    for path in taken:
        path.mkdir(parents=True)
        (path / f"run-{run_id}.wandb").write_bytes(earlier)
    for step in (1, 2):
        (sink,) = sinks(p, tmp_path, fingerprint="fp")
        sink.open()
        sink.log(step, {"train/loss": 1.0 / step})
        sink.close()
    wandb_in_this_process.teardown()   # W&B's service ended: every file it writes is whole
    assert all((path / f"run-{run_id}.wandb").read_bytes() == earlier for path in taken)
    ours = [f for f in wandb_files.sessions(folder, run_id) if f.parent not in taken]
    assert [[row["_step"] for row in wandb_files.history(f)] for f in ours] == [[1], [2]]


SINK_SESSION = """
import os, signal, sys
from pathlib import Path
from airetrain.plan.planner import plan_all
from airetrain.tracking.trackers import sinks
tmp, step, killed = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "killed"
config = {"roots": {"scratch": str(tmp / "scratch")},
          "runs": {"r": {"device": "cpu", "data": {"name": "synthetic"},
                         "tracking": {"wandb": {"project": "p", "mode": "offline"}}}}}
(sink,) = sinks(plan_all(config, env={"HOME": "/nonexistent"})["r"], tmp, fingerprint="fp")
sink.open()
sink.log(step, {"train/loss": 1.0 / step})
if killed:
    os.kill(os.getpid(), signal.SIGKILL)
sink.close()
"""


def test_a_session_started_from_a_process_that_ran_w_and_b_runs_and_reruns_on_its_own_service(
        tmp_path, wandb_in_this_process):
    """W&B hands its service to child processes (WANDB_SERVICE). A training session started from a process
    that ran W&B (a notebook; here, this test) starts a service of its own: killed, it leaves no stream of
    its run open in the parent's, and its rerun opens the same run id again."""
    wandb_in_this_process.setup()
    assert os.environ.get("WANDB_SERVICE")   # what the sessions below inherit
    script = tmp_path / "session.py"
    script.write_text(SINK_SESSION)
    killed = subprocess.run([sys.executable, str(script), str(tmp_path), "1", "killed"], env=os.environ.copy())
    assert killed.returncode == -9
    run([sys.executable, str(script), str(tmp_path), "2", "rerun"], env=os.environ.copy())
    p = plan({"wandb": {"project": "p", "mode": "offline"}}, tmp_path)
    folder = p.durable_dir / "tracking" / "wandb" / "wandb"
    run_id = identity.Identity(p.durable_dir, p.run, "fp").wandb_id
    rerun = wandb_files.sessions(folder, run_id)[-1]
    assert [row["_step"] for row in wandb_files.history(rerun)] == [2]
    # W&B's own log of each session: it started a service rather than joining this test's
    for log in folder.glob(f"offline-run-*-{run_id}/logs/debug.log"):
        assert "existing wandb-core service" not in log.read_text()


def test_sync_lists_what_is_not_uploaded_and_refuses_without_credentials_or_network(tmp_path, monkeypatch):
    durable = tmp_path / "scratch" / "airetrain" / "r"
    ident = identity.Identity(durable, "r")
    ident.set("wandb", id="r-0001", project="p", entity=None, mode="offline")
    root = durable / "tracking" / "wandb"
    root.mkdir(parents=True)
    (tmp_path / "session.py").write_text(SESSION)
    run([sys.executable, str(tmp_path / "session.py"), str(root), "1", "5"], env={"WANDB_SILENT": "true"})
    [item] = sync.pending("r", durable)
    assert item.run_id == "r-0001" and len(item.sessions) == 1
    plans = {"r": type("P", (), {"durable_dir": durable})()}
    lines = []
    assert sync.sync(plans, [], dry_run=True, out=lines.append) == 1 and "r: W&B run r-0001 in p, 1 session" in lines[0]
    before = sorted(p for p in durable.rglob("*"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))   # no ~/.netrc
    with pytest.raises(ConfigError, match="no W&B credentials for api.wandb.ai: run `wandb login`"):
        sync.sync(plans, ["r"])
    monkeypatch.setenv("WANDB_API_KEY", SECRETS["WANDB_API_KEY"])
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")   # nothing listens: as a compute node's view
    with pytest.raises(ConfigError, match="cannot be reached from here .* every offline file is kept"):
        sync.sync(plans, ["r"])
    assert sorted(p for p in durable.rglob("*")) == before   # nothing removed, nothing recorded as uploaded
    sync.record_uploaded(item)   # what a successful upload records
    assert sync.pending("r", durable) == []
    run([sys.executable, str(tmp_path / "session.py"), str(root), "6", "9"], env={"WANDB_SILENT": "true"})
    [grown] = sync.pending("r", durable)   # a later session: only it is uploaded next
    assert [s.name for s in grown.sessions] != [s.name for s in item.sessions] and len(grown.sessions) == 1
    with pytest.raises(ConfigError, match="unknown run 'q'"):
        sync.sync(plans, ["q"])
    assert shutil.which("wandb", path=str(BIN))   # the command sync runs is the environment's own
    assert subprocess.run([str(BIN / "wandb"), "sync", "--help"], capture_output=True).returncode == 0


def test_sync_in_a_project_without_offline_wandb_says_so(tmp_path):
    from airetrain.plan.planner import plan_all

    plans = plan_all({"roots": {"scratch": str(tmp_path)}, "runs": {"r": {}}}, env={"HOME": "/nonexistent"})
    lines = []
    assert sync.sync(plans, [], out=lines.append) == 0
    assert lines == ["nothing to upload: none of these runs logs to W&B offline (tracking: wandb: {mode: offline})"]
    plans = plan_all({"roots": {"scratch": str(tmp_path)}, "runs": {"r": {"tracking": {"wandb": {"project": "p"}}}}},
                     env={"HOME": "/nonexistent"})
    lines.clear()
    sync.sync(plans, [], out=lines.append)
    assert lines == ["nothing to upload: every offline W&B session of these runs is uploaded"]


class StandIn:
    """A third tracker, written to the Sink protocol alone: its history is a JSON file of its own, {metric:
    {step: value}}, which it reads back as what it holds when a session resumes."""
    name = "mlflow"     # the row of the table it is put in (a config key the schema has)
    package = "json"    # what the plan checks is installed: this class's word, not the row's
    calls: list = []

    def __init__(self, cfg, identity, durable_dir, opening, job_type="train"):
        self.identity, self.store = identity, durable_dir / "stand-in.json"

    @classmethod
    def preload(cls):
        cls.calls.append("preload")

    @staticmethod
    def label(record):
        return f"stand-in {record['run']}" if record.get("run") else None

    @staticmethod
    def checks(where, cfg, site):
        return [], [f"{where}: the stand-in says hello"]

    @staticmethod
    def across_runs(runs):
        return []

    def _history(self):
        return json.loads(self.store.read_text()) if self.store.exists() else {}

    def open(self):
        self.identity.set(self.name, run="s-1")
        return {k: max(map(int, steps)) for k, steps in self._history().items()}

    def log(self, step, figures):
        history = self._history()
        for k, v in figures.items():
            assert str(step) not in history.setdefault(k, {}), f"{k} at step {step} logged twice"
            history[k][str(step)] = v
        self.store.write_text(json.dumps(history))

    def end(self, summary, params, job_ids, artifacts):
        self.calls.append(("end", summary["steps"], job_ids))

    def close(self):
        self.calls.append("close")


def test_a_tracker_written_to_the_protocol_runs_through_the_registry_alone(tmp_path, monkeypatch, caplog):
    """Put in a row of the table, a new sink class is what the plan checks, what the trainer preloads, opens,
    sends to and resumes, what the promote step ends, and what the results table names: nothing else knows it."""
    from airetrain.tracking import ending, registry, trackers
    from conftest import make_plan, wait_for

    monkeypatch.setitem(registry.TRACKERS, "mlflow", StandIn)
    StandIn.calls.clear()
    plan = make_plan({"tracking": {"mlflow": {"tracking_uri": "sqlite:///unused.db"}}}, tmp_path)
    assert plan.warnings == ["run t: runs.t.tracking.mlflow: the stand-in says hello"]
    plan.durable_dir.mkdir(parents=True)
    trackers.preload(plan)
    wait_for(lambda: "preload" in StandIn.calls, timeout=30, what="the stand-in preloaded")
    metrics = tmp_path / "metrics.jsonl"
    sender = trackers.start(plan, tmp_path, metrics, 0, "f1")
    for step in range(1, 6):
        sender.log(step, {"loss": 1.0 / step})
    first = trackers.closed(sender)
    assert first["mlflow"]["logged"] == 5 and registry.label(first) == "stand-in s-1"
    # a session killed after step 7 wrote its lines to metrics.jsonl, not to the tracker: the next sends them
    metrics.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(1, 8)))
    sender = trackers.start(plan, tmp_path, metrics, 7, "f1")
    for step in range(8, 11):
        sender.log(step, {"loss": 1.0 / step})
    second = trackers.closed(sender)
    assert second["mlflow"] == {**second["mlflow"], "logged": 5, "skipped": 5, "lost": 0, "error": None}
    (loss,) = json.loads((plan.durable_dir / "stand-in.json").read_text()).values()   # under its tracker's name
    assert sorted(map(int, loss)) == list(range(1, 11))   # every step once
    assert ending.end(plan, {"steps": 10}, {"path": "x", "sha256": "0"}, ["42"], tmp_path) == \
        {"mlflow": {"ended": True, "error": None}}
    assert ("end", 10, ["42"]) in StandIn.calls and StandIn.calls.count("close") == 3
