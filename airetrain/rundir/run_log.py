"""A run's durable logs and its record, under <scratch>/airetrain/<run>/ (they outlive results/ and every
job): every start of its training (sessions.jsonl), every early stop and what followed (stops.jsonl),
the hangs among them; and the run record (results/<run>/run.json) made from them.

The run record makes a run reproducible: resolved config and its hash, the seed, the workflow's git
commit and dirty flag, the versions that matter, the hosts, and every session of the run (each
SLURM job id, requeues included).
"""
import hashlib
import json
import time
from pathlib import Path

from ..fsutil import read_json
from .provenance import airetrain_state, git_state
from ..records import Plan, RunRecord

SESSIONS = "sessions.jsonl"


def _append(run_dir: str | Path, log: str, line: dict) -> None:
    """One line more in one of the run's durable logs (made where it is the first)."""
    path = Path(run_dir) / log
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def _lines(run_dir: str | Path, log: str) -> list[dict]:
    """Every line of one of the run's durable logs ([] before its first)."""
    path = Path(run_dir) / log
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def versions() -> dict:
    import platform
    from importlib import metadata   # here, not at import: the report and status import this module

    import torch

    def dist_version(name: str):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    nccl = None
    if torch.cuda.is_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "snakemake": dist_version("snakemake"),
        "snakemake-executor-plugin-slurm": dist_version("snakemake-executor-plugin-slurm"),
        "airetrain": dist_version("airetrain"),
    }


def record_session(run_dir: str | Path, job_id: str | None, resumed_from_step: int | None, hosts: list[str],
                   checkpoint: str | None = None) -> None:
    """Append this start of the run to its durable session log (survives requeues and reruns);
    checkpoint: the one it resumed from, where it resumed. resumed_from_step: None for a user's script,
    which alone knows its step."""
    _append(run_dir, SESSIONS, {"slurm_job_id": job_id, "started": time.time(), "resumed_from_step": resumed_from_step,
                                "hostnames": hosts, "checkpoint": checkpoint})


STARTS = "starts.jsonl"   # a script's sessions: the step each started from, as airetrain.job saw it


def record_start(run_dir: str | Path, start: dict) -> None:
    """Append where a script's session started ({step, checkpoint, started_over, newest, slurm_job_id}): the
    script alone knows whether it resumed."""
    _append(run_dir, STARTS, {**start, "time": time.time()})


def starts(run_dir: str | Path) -> list[dict]:
    return _lines(run_dir, STARTS)


STOPS = "stops.jsonl"


def record_stop(run_dir: str | Path, stopped: dict, job_id: str | None, action: str,
                details: dict | None = None) -> None:
    """Append an early stop (deadline, signal, hang) and what followed (requeued, exit code, restart) to
    the durable run directory: Snakemake deletes the rule's log when the requeued job runs the rule again.
    details: what else there is to say (a hang's launch and the folder of its stack dumps)."""
    _append(run_dir, STOPS, {"slurm_job_id": job_id, "reason": stopped["reason"], "step": stopped["step"],
                             "time": time.time(), "action": action, **(details or {})})


def stops(run_dir: str | Path) -> list[dict]:
    return _lines(run_dir, STOPS)


HEALTH = "health.jsonl"


def record_health(run_dir: str | Path, job_id: str | None, node: str, kind: str, reason: str, action: str,
                  step: int | None = None) -> None:
    """Append a node found sick (kind: the check that failed, or straggler) and what followed (excluded, the
    run failed, named only) to the durable run directory, where every later job of the run reads it.
    step: where training was when a straggler was named."""
    _append(run_dir, HEALTH, {"slurm_job_id": job_id, "node": node, "kind": kind, "reason": reason,
                              "action": action, "step": step, "time": time.time()})


def health_events(run_dir: str | Path) -> list[dict]:
    return _lines(run_dir, HEALTH)


def straggler_text(straggler: dict) -> str:
    """How the log, `airetrain status` and the report name a straggler."""
    return f"straggler: rank {straggler['rank']} on {straggler['host']}, {straggler['ratio']:.1f}× the median step"


def left_out(run_dir: str | Path) -> dict[str, str]:
    """{node: why} of the nodes the run's jobs left out (the newest reason of each)."""
    try:
        events = health_events(run_dir)
    except ValueError:   # a line being written this instant
        return {}
    # a straggler's reason names itself ("straggler: rank 4 on ..."); a check's is prefixed with the check
    return {e["node"]: e["reason"] if e["reason"].startswith(e["kind"]) else f"{e['kind']}: {e['reason']}"
            for e in events if e["action"] == "excluded"}


LAUNCH_ID = "AIRETRAIN_LAUNCH_ID"   # set by the launch for its ranks: the watchdog counts hangs per launch
TRAINED = "train.json"              # the finished run's record, kept on scratch beside its checkpoints
LOCK = "trainer.lock"               # in the durable run directory: who trains the run (train/launcher/lock.py)
LOCK_LOG = "lock.log"               # beside it: every launch that took it, and what it waited for


def hangs(run_dir: str | Path, launch: str | None = None) -> list[dict]:
    """The hangs the watchdog recorded in stops.jsonl: all of them, or those of one launch."""
    return [s for s in stops(run_dir) if s["reason"] == "hang" and (launch is None or s.get("launch") == launch)]


def sessions(run_dir: str | Path) -> list[dict]:
    return _lines(run_dir, SESSIONS)


def run_record(plan: Plan, train: dict, project_dir: str | Path) -> RunRecord:
    runs = sessions(plan.durable_dir)
    job_ids = list(dict.fromkeys(s["slurm_job_id"] for s in runs if s["slurm_job_id"]))
    config = plan.config.to_dict()
    return {
        "run": plan.run,
        "config": config,
        "config_sha256": config_hash(config),
        "seed": plan.config.train.seed,
        "project": git_state(project_dir),
        "airetrain": airetrain_state(),
        "versions": versions(),
        "hostnames": sorted({h for s in runs for h in s["hostnames"]} | set(train.get("hostnames", []))),
        "slurm_job_ids": job_ids,
        "sessions": runs,
        "stops": stops(plan.durable_dir),
        "checkpoint": train.get("checkpoint"),
        "code": captured_code(plan),
    }


def captured_code(plan: Plan) -> dict | None:
    """What the run's capture holds (train/launcher/capture.py): fingerprint, files and sha256s, airetrain."""
    from .capture import MANIFEST, capture_dir

    path = capture_dir(plan) / MANIFEST
    if not path.exists():
        return None
    manifest = read_json(path)
    return {"fingerprint": manifest["fingerprint"], "path": str(path.parent), "files": manifest["files"],
            "bytes": manifest["bytes"], "airetrain": manifest["airetrain"]}



def trained_record_path(plan) -> Path:
    """Where a finished training keeps a copy of its train.json: the durable run directory."""
    return plan.durable_dir / TRAINED
