"""The user's code, tried once at plan time (`airetrain resolve`), before anything is submitted.

On Aire a run waits in the GPU queue before it starts: a model module that does not import, or a
dataset builder that raises, would otherwise fail only then, on the node. So the plan step imports
every module a run names (model, dataset, loss, forward, metrics, optimizer, schedule), builds the model on the meta
device (no memory) and one batch of a user dataset from its copy on scratch, and checks that a
script exists and compiles. An error there fails the plan step of that run alone, naming the
config key and the exception; the other runs go on.

The memory estimate (train/estimate.py) runs the model on the meta device too, where some
operations cannot run: only such a limit of the meta device, never an error in the user's code,
lets it fall back to DDP.
"""
from __future__ import annotations

import traceback
from pathlib import Path

from ..errors import ConfigError
from ..records import Plan
from ..run_config import RunConfig
from .user_code import import_callable


class UserCodeError(ConfigError):
    """The user's code failed at plan time: the message names the key, the import path and the error."""


def named_code(run: RunConfig) -> dict[str, str]:
    """{config key: 'package.module:function'} of the user code a run names (built-in names have no colon)."""
    keys = {"model.name": run.model.name, "data.name": run.data.name, "train.loss": run.train.loss,
            "train.forward": run.train.forward, "train.metrics": run.train.metrics,
            "optim.name": run.optim.name, "optim.schedule": run.optim.schedule}
    return {key: path for key, path in keys.items() if path and ":" in path}


def needs_check(plan: Plan) -> bool:
    """Whether the run names code of the user's: a run of built-in parts imports nothing at plan time."""
    return bool(plan.config.train.script or named_code(plan.config))


def meta_device_limit(error: BaseException) -> bool:
    """Whether an error is the meta device's own (an operation without a meta kernel, data read off a
    meta tensor), rather than one in the code that ran."""
    text = f"{type(error).__name__}: {error}".lower()
    return isinstance(error, NotImplementedError) or "meta" in text


def failed(run: str, key: str, path: str, error: BaseException, what: str) -> UserCodeError:
    """The error the plan step ends with; the traceback goes to its log first."""
    traceback.print_exception(error)
    last = traceback.format_exception_only(error)[-1].strip()
    return UserCodeError(f"runs.{run}.{key}: {path} {what} at plan time: {last} (the traceback is above); "
                         "nothing of this run was submitted")


def check(plan: Plan) -> list[str]:
    """Try the user code plan names; raise UserCodeError on the first failure. Returns what was
    tried, as config keys (empty for a run of built-in parts only: then nothing is imported)."""
    run = plan.config
    tried = []
    if run.train.script:
        script = Path(run.train.script)
        try:
            compile(script.read_bytes(), str(script), "exec")   # no .pyc written: the project may be read-only
        except (SyntaxError, ValueError, OSError) as e:
            raise failed(plan.run, "train.script", str(script), e, "does not compile") from None
        tried.append("train.script")
    code = named_code(run)
    if not code:
        return tried
    from .models import build_model

    for key, path in code.items():
        try:
            import_callable(path)
        except Exception as e:
            raise failed(plan.run, key, path, e, "does not import") from None
        tried.append(key)
    meta = _dataset_meta(plan, code)
    if "model.name" in code and meta is not None:
        import torch
        try:
            with torch.device("meta"):
                build_model(run.model, meta)
        except Exception as e:
            if not meta_device_limit(e):
                raise failed(plan.run, "model.name", run.model.name, e, "raised while building the model") from None
    return tried


def _dataset_meta(plan: Plan, code: dict[str, str]) -> dict | None:
    """The dataset's meta for the model builder; for a user dataset, from its builder and one batch
    of it (read from scratch, before staging), so that a builder that raises fails here."""
    from .datasets import dataset_meta

    if "data.name" not in code:
        return dataset_meta(plan.config.data, plan.dataset)
    from torch.utils.data import DataLoader

    from .datasets import build_datasets
    try:
        train, _, meta = build_datasets(plan.config.data, plan.dataset)
        next(iter(DataLoader(train, batch_size=min(plan.batch.per_device, max(len(train), 1)))))
    except Exception as e:
        raise failed(plan.run, "data.name", plan.config.data.name, e, "raised while building one batch") from None
    return meta


def check_evaluation(plan: Plan) -> None:
    """An evaluation run's weights fit its data: the source's model, built on the meta device (no memory)
    for this run's data and for its source's, has the same parameters and shapes. Refused naming the
    first that differs. A user dataset whose meta is known only by reading it is checked when the
    weights load (exactly, as init_strict)."""
    import torch

    from ..run_config import Data
    from .datasets import dataset_meta
    from .models import build_model

    source = plan.evaluates
    mine = dataset_meta(plan.config.data, plan.dataset)
    theirs = dataset_meta(Data.from_dict(source["data"], f"runs.{source['run']}.data"), source["dataset"])
    if mine is None or theirs is None:
        return
    try:
        with torch.device("meta"):
            fits = build_model(plan.config.model, mine).state_dict()
            trained = build_model(plan.config.model, theirs).state_dict()
    except Exception as e:
        if meta_device_limit(e):
            return
        raise
    there_shapes = {k: tuple(v.shape) for k, v in trained.items()}
    here_shapes = {k: tuple(v.shape) for k, v in fits.items()}
    differ = [k for k in {**there_shapes, **here_shapes} if there_shapes.get(k) != here_shapes.get(k)]
    if differ:
        key = differ[0]
        there, here = there_shapes.get(key), here_shapes.get(key)
        raise ConfigError(
            f"runs.{plan.run}.evaluate: run {source['run']}'s weights do not fit this run's data: {key} is "
            f"{there or 'absent'} in the model trained on {source['run']}'s data ({theirs}) but {here or 'absent'} "
            f"for this run's ({mine}); evaluate on data of the same shape and classes, before anything is submitted")
