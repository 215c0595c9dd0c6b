"""MLflow: a tracking server (http://login1:5000), or a store (sqlite:///...).

MLflow chooses its run ids, so the run's first session creates the MLflow run, tagged with the run's
generation, and records its id in the run's durable directory; a session that finds no id there
(its predecessor died in between) finds the run by that tag. A resumed session asks the server
where each metric's history ends and skips what it holds, so each step is in it once.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from ..run_config import MlflowTracking
from .identity import Identity
from .names import uri_problem, web_url
from .opening import Opening, text

MAX_PARAM = 6000       # MLflow's longest param value
BATCH = 100            # params per request (MLflow takes at most 100 in one log_batch)


class MlflowSink:
    name = package = "mlflow"

    def __init__(self, cfg: MlflowTracking, identity: Identity, durable_dir: Path, opening: Opening,
                 job_type: str = "train"):
        self.cfg, self.identity, self.opening = cfg, identity, opening   # one MLflow run for every job type
        self.client = self.run_id = None

    @classmethod
    def preload(cls) -> None:
        import mlflow.tracking   # noqa: F401 - seconds of imports, before the first step rather than in it

    @staticmethod
    def label(record: dict) -> str | None:
        return f"MLflow {record.get('url') or record['run_id']}" if record.get("run_id") else None

    @staticmethod
    def checks(where: str, cfg: MlflowTracking, site) -> tuple[list[str], list[str]]:
        why = uri_problem(cfg.tracking_uri)
        return ([f"{where}.tracking_uri = {cfg.tracking_uri!r} is refused: {why}"] if why else []), []

    @staticmethod
    def across_runs(runs: dict) -> list[str]:
        """A warning for each SQLite store that several runs (seeds, sweep points, a search's trials at once) would
        write: SQLite takes one writer at a time, and jobs writing one file on a shared filesystem corrupt it."""
        stores: dict[str, list[str]] = {}
        for name, run in runs.items():
            if run.tracking.mlflow is not None and run.tracking.mlflow.tracking_uri.startswith("sqlite:"):
                stores.setdefault(run.tracking.mlflow.tracking_uri, []).append(name)
        warnings = []
        for uri, names in stores.items():
            tunes = [n for n in names if runs[n].tune and runs[n].tune.parallel != 1]
            if len(names) > 1 or tunes:
                who = f"runs {', '.join(names)}" if len(names) > 1 else f"the trials of {names[0]} (tune.parallel)"
                warnings.append(f"{who} would write one SQLite MLflow store, {uri}, at once: SQLite takes one writer, "
                                "and a store on a shared filesystem gets corrupted. Use an MLflow server "
                                "(tracking_uri: http://host:port, docs/tracking.md), or a store of each run's own")
        return warnings

    def open(self) -> dict[str, int]:
        # a server that does not answer costs a few seconds of the sending thread, not minutes of
        # retries (MLflow's defaults); the user's own settings win
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.cfg.tracking_uri)
        known = self.identity.of("mlflow")
        experiment_id = known.get("experiment_id") or self._experiment()
        self.run_id = known.get("run_id") or self._find(experiment_id) or self._create(experiment_id)
        self.identity.set("mlflow", run_id=self.run_id, experiment_id=experiment_id, experiment=self.cfg.experiment,
                          url=web_url(self.cfg.tracking_uri, experiment_id, self.run_id))
        if not self.identity.of("mlflow").get("opened"):
            self._send_opening()
            self.identity.set("mlflow", opened=True)
        self._tag_superseded()
        return self._held()

    def _experiment(self) -> str:
        found = self.client.get_experiment_by_name(self.cfg.experiment)
        if found:
            return found.experiment_id
        try:
            return self.client.create_experiment(self.cfg.experiment)
        except Exception:   # another run created it meanwhile
            return self.client.get_experiment_by_name(self.cfg.experiment).experiment_id

    def _find(self, experiment_id: str) -> str | None:
        runs = self.client.search_runs([experiment_id], f"tags.`airetrain.generation` = '{self.identity.generation}'",
                                       max_results=1)
        return runs[0].info.run_id if runs else None

    def _create(self, experiment_id: str) -> str:
        o = self.opening
        run = self.client.create_run(experiment_id, run_name=o.run, tags={"airetrain.generation": o.generation})
        return run.info.run_id

    def _send_opening(self) -> None:
        from mlflow.entities import Param, RunTag

        params = [Param(k, text(v)[:MAX_PARAM]) for k, v in self.opening.config.items()]
        for i in range(0, len(params), BATCH):
            self.client.log_batch(self.run_id, params=params[i:i + BATCH])
        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in self.opening.tags.items()])

    def _tag_superseded(self) -> None:
        for old in self.identity.superseded:
            old_id = (old.get("mlflow") or {}).get("run_id")
            if old_id and not old.get("mlflow_tagged"):
                self.client.set_tag(old_id, "airetrain.superseded_by", self.run_id)
                self.client.set_tag(old_id, "airetrain.superseded", "true")
        self.identity.mark_tagged("mlflow")

    def _held(self) -> dict[str, int]:
        """{metric: the last step its history holds}: what a resumed session skips."""
        metrics = self.client.get_run(self.run_id).data.metrics
        return {key: max(m.step for m in self.client.get_metric_history(self.run_id, key)) for key in metrics}

    def log(self, step: int, figures: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in figures.items()])

    def end(self, summary: dict, params: dict, job_ids: list[str], artifacts: list[Path]) -> None:
        """The run's end (the promote step): its summary (numbers as metrics at the last step, the rest as
        tags), the weights' paths and sha256 as params, the job ids as a tag; the run marked finished."""
        from mlflow.entities import Metric, Param, RunTag

        step, now = int(summary.get("steps") or 0), int(time.time() * 1000)
        numbers = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        metrics = [Metric(f"final/{k}", float(v), now, step) for k, v in numbers.items()]
        # a param never changes in MLflow: a run trained further (more epochs) ends with other weights,
        # which go into tags of the same names instead
        logged = self.client.get_run(self.run_id).data.params
        changed = {k: text(v) for k, v in params.items() if k in logged and logged[k] != text(v)}
        self.client.log_batch(self.run_id, metrics=metrics,
                              params=[Param(k, text(v)[:MAX_PARAM]) for k, v in params.items() if k not in changed],
                              tags=[RunTag(f"final.{k}", text(v)) for k, v in summary.items() if k not in numbers]
                              + [RunTag(k, v) for k, v in changed.items()]
                              + [RunTag("slurm.job_ids", ",".join(job_ids))])
        for path in artifacts:
            self.client.log_artifact(self.run_id, str(path), artifact_path="weights")
        self.client.set_terminated(self.run_id, "FINISHED")

    def close(self) -> None:
        pass   # the run stays open between sessions; the promote step ends it
