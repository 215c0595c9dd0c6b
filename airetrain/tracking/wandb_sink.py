"""Weights & Biases. Offline by default: Aire's compute nodes reach no internet, so each session writes
its files under the run's durable directory on scratch (never the fast root, which dies with the job),
and `airetrain sync` uploads them from the login node as one W&B run.

Every session of a run opens the same run id (identity.py). W&B drops a step lower than its run's
current one, so figures are logged at their training step, and a resumed session first reads what
the earlier sessions' files hold (wandb_files.py) and skips it. Online, the run resumes on the server,
which says where it stands (starting_step).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from ..run_config import WandbTracking
from .identity import Identity, directory
from .opening import Opening
from .wandb_files import await_own_folder, last_steps


def wandb_root(durable_dir: Path) -> Path:
    """WANDB_DIR of a run: W&B writes its wandb/offline-run-* folders here."""
    return directory(durable_dir) / "wandb"


FLUSH_S = 2.0   # W&B writes its offline file this often (its default, 15 s, is what a kill would lose)
_service = {"own": False, "lock": threading.Lock()}


def own_service() -> None:
    """This process starts a W&B service of its own (once, before its first use of W&B). W&B hands its
    service to child processes through WANDB_SERVICE: a session that joined a parent's (a notebook's, a
    shell's that ran W&B, a test's) would leave its run's stream open there when it is killed, and the
    rerun would be refused ("run ID ... is in use")."""
    with _service["lock"]:
        if not _service["own"]:
            os.environ.pop("WANDB_SERVICE", None)
            _service["own"] = True


def settings(wandb, mode: str):
    """W&B's settings for a session of the trainer: its file flushed every FLUSH_S, no console capture
    (the job's log has it), no system sampling (the trainer samples the GPU), no git probing or code
    upload (the opening names the project's commit and the captured code: a remote's URL may carry a
    token)."""
    return wandb.Settings(mode=mode, console="off", x_disable_stats=True, disable_git=True, save_code=False,
                          silent=True, x_disable_machine_info=True, x_transaction_log_flush_interval=FLUSH_S)


class WandbSink:
    name = package = "wandb"

    def __init__(self, cfg: WandbTracking, identity: Identity, durable_dir: Path, opening: Opening,
                 job_type: str = "train"):
        self.cfg, self.identity, self.opening, self.job_type = cfg, identity, opening, job_type
        self.root = wandb_root(durable_dir)
        self.run = None

    @classmethod
    def preload(cls) -> None:
        import wandb

        own_service()
        wandb.setup()   # its service process, started before the first step rather than in it

    @staticmethod
    def label(record: dict) -> str | None:
        return f"W&B {record.get('project')}/{record['id']}" if record.get("id") else None

    @staticmethod
    def checks(where: str, cfg: WandbTracking, site) -> tuple[list[str], list[str]]:
        if cfg.mode == "online" and not site.compute_nodes_online:
            return [], [f"{where}.mode is online, but this site's compute nodes reach no internet "
                        "(site.compute_nodes_online: false): use mode: offline, and `airetrain sync` on the login "
                        "node uploads the runs"]
        return [], []

    @staticmethod
    def across_runs(runs: dict) -> list[str]:
        return []   # each run's offline files are its own

    def open(self) -> dict[str, int]:
        import wandb

        own_service()
        self.root.mkdir(parents=True, exist_ok=True)
        run_id = self.identity.wandb_id
        held = {}
        if self.cfg.mode == "offline":
            held = last_steps(self.root / "wandb", run_id)
            await_own_folder(self.root / "wandb", run_id)
        o = self.opening
        self.run = wandb.init(project=self.cfg.project, entity=self.cfg.entity, id=run_id, name=o.run, group=o.group,
                              job_type=self.job_type, dir=str(self.root), resume="allow", reinit="create_new",
                              config={**o.config, "airetrain": o.tags}, settings=settings(wandb, self.cfg.mode))
        if self.cfg.mode == "online" and self.run.starting_step:
            held = {"*": self.run.starting_step - 1}
        self.identity.set("wandb", id=run_id, project=self.cfg.project, entity=self.cfg.entity, mode=self.cfg.mode)
        self._tag_superseded(wandb)
        return held

    def _tag_superseded(self, wandb) -> None:
        """The runs of this run's earlier trainings, tagged `superseded`: a short offline session of each
        (synced with it), or the server's run where online."""
        for old in self.identity.superseded:
            old_id = (old.get("wandb") or {}).get("id")
            if old_id and not old.get("wandb_tagged"):
                if self.cfg.mode == "offline":
                    await_own_folder(self.root / "wandb", old_id)
                previous = wandb.init(project=self.cfg.project, entity=self.cfg.entity, id=old_id, dir=str(self.root),
                                      resume="allow", reinit="create_new", tags=["superseded"],
                                      config={"airetrain.superseded_by": self.identity.wandb_id},
                                      settings=settings(wandb, self.cfg.mode))
                previous.finish()
        self.identity.mark_tagged("wandb")

    def log(self, step: int, figures: dict[str, float]) -> None:
        self.run.log(figures, step=step)

    def end(self, summary: dict, params: dict, job_ids: list[str], artifacts: list[Path]) -> None:
        """The run's end (the promote step): its summary, the weights' paths and sha256, the job ids."""
        import wandb

        self.run.summary.update(summary)
        self.run.config.update(params, allow_val_change=True)
        self.run.tags = tuple(dict.fromkeys([*(self.run.tags or ()), *(f"slurm:{j}" for j in job_ids)]))
        for path in artifacts:
            artifact = wandb.Artifact(f"{self.identity.wandb_id}-{path.stem}", type="model")
            artifact.add_file(str(path))
            self.run.log_artifact(artifact)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
