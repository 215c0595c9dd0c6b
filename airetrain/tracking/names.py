"""What each figure is called in a tracker and in TensorBoard, and the checks on what a user names.

The trackers and TensorBoard share the names, so that a curve is found under the same name in each:
train/... for the training's figures at each log line, eval/<name> for each evaluation's.
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit

TAGS = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm", "samples_per_s": "train/samples_per_s",
        "data_wait_frac": "train/data_wait_frac", "epoch": "train/epoch", "gpu_util": "gpu/util_percent",
        "gpu_mem_gb": "gpu/mem_gb"}

# Variables whose values are credentials: never written into a record, a log or a tracker.
SECRET_SUFFIXES = ("_TOKEN", "_KEY", "_PASSWORD", "_SECRET")


def tag(key: str) -> str | None:
    """A figure's name in a tracker: train/loss, eval/accuracy; None for what is not a curve."""
    return TAGS.get(key) or (f"eval/{key[5:]}" if key.startswith("eval_") else None)


def is_secret(variable: str) -> bool:
    """Whether an environment variable holds a credential (by its name)."""
    return variable.upper().endswith(SECRET_SUFFIXES)


def uri_problem(uri: str) -> str | None:
    """Why an MLflow tracking URI is refused, or None: http(s)://host[:port][/path] or sqlite:///path,
    without a password in it (MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN carry it) and
    without whitespace, quotes or a query."""
    if re.search(r"[\s'\"`$;|&<>\\]", uri):
        return "it holds whitespace, a quote or shell syntax"
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https"):
        if parts.password is not None or parts.username is not None:
            return ("it holds a user or password: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD "
                    "(or MLFLOW_TRACKING_TOKEN) in your environment instead; they never reach a file")
        if not re.fullmatch(r"[A-Za-z0-9.-]+(:\d{1,5})?", parts.netloc or ""):
            return "its host is not a host name or address with an optional :port"
        if parts.query or parts.fragment:
            return "it has a query or fragment"
        return None
    if parts.scheme == "sqlite":
        if not uri.startswith("sqlite:///") or len(uri) <= len("sqlite:///"):
            return "a SQLite store is sqlite:///path/mlflow.db (relative to the workflow) or sqlite:////absolute/path"
        return None
    return f"its scheme {parts.scheme or '(none)'!r} is not http, https or sqlite"


def web_url(uri: str, experiment_id: str, run_id: str) -> str | None:
    """The page of an MLflow run on its server; None for a store (no server shows it)."""
    if not uri.startswith(("http://", "https://")):
        return None
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
