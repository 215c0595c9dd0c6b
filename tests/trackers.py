"""The trackers as the tests meet them: a real MLflow server on 127.0.0.1 (SQLite backend, a local
artifact root), started and stopped by the tests, and readers of what each tracker holds."""
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from conftest import BIN, end_all

# Credentials as a user's environment holds them; no file a run writes may contain one of these values.
SECRETS = {"WANDB_API_KEY": "wandbkey0123456789abcdef0123456789abcdef", "MLFLOW_TRACKING_TOKEN": "mlflowtoken-5f1e2d",
           "MLFLOW_TRACKING_PASSWORD": "mlflowpassword-9a8b7c", "LAB_STORAGE_SECRET": "labsecret-4d3c2b",
           "HF_TOKEN": "hf_tokenvalue_7e6f5a"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with a SQLite backend and a local artifact root, under root."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
             "--default-artifact-root", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1"], stdout=open(root / "server.log", "a"), stderr=subprocess.STDOUT, start_new_session=True,
            # tracking only: without this MLflow 3 starts a job queue of its own beside the server (about seven
            # more processes, each importing mlflow: most of a server's CPU in the suite)
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        deadline = time.monotonic() + 180
        while not self.answers():
            assert self.proc.poll() is None, (root / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the MLflow server did not start"
            time.sleep(0.2)

    def answers(self) -> bool:
        try:
            return urllib.request.urlopen(f"{self.url}/health", timeout=2).status == 200
        except OSError:
            return False

    def stop(self) -> None:
        end_all(self.proc)

    def client(self):
        from mlflow.tracking import MlflowClient
        return MlflowClient(tracking_uri=self.url)


def histories(client, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Each metric's history in an MLflow run: [(step, value)], in step order."""
    keys = client.get_run(run_id).data.metrics
    return {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in keys}


def wandb_sessions(scratch: Path, run: str) -> dict[str, list[list[dict]]]:
    """{W&B run id: each offline session's history rows, oldest first} of an airetrain run."""
    from airetrain.tracking import wandb_files

    folder = scratch / "airetrain" / run / "tracking" / "wandb" / "wandb"
    ids = sorted({wandb_files.run_id_of(p) for p in folder.glob("offline-run-*")} - {None})
    return {i: [wandb_files.history(p) for p in wandb_files.sessions(folder, i)] for i in ids}


def each_step_once(rows: list[dict]) -> dict[str, list[int]]:
    """{name: its steps} over the rows of every session, asserting that no step of a name repeats."""
    steps: dict[str, list[int]] = {}
    for row in rows:
        for name in row:
            if not name.startswith("_"):
                steps.setdefault(name, []).append(int(row["_step"]))
    for name, found in steps.items():
        assert len(found) == len(set(found)), f"{name}: a step logged twice: {found}"
    return steps


def files_holding(root: Path, values) -> list[str]:
    """Every file under root whose bytes contain one of values."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{path}: {v[:6]}…" for v in values if v.encode() in data]
    return hits

