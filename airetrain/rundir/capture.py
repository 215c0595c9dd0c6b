"""The code a run runs, captured when it first trains and imported by every later session.

A run that waits in the queue, is requeued at its time limit or resumes after a crash would
otherwise load its checkpoint into whatever the working tree holds by then. So the first launch
of a run (of its config's fingerprint) copies the user's code to
<scratch>/airetrain/<run>/code/<fingerprint>/: the top-level packages of the modules the config
names by import path (model, dataset, loss, forward, metrics, optimizer, schedule; a module outside
any package as its one file), and in script mode the script's directory's .py files. Every launch
of that fingerprint puts the capture first on the import path (AIRETRAIN_CODE for the trainer's
imports, PYTHONPATH for the rest) and runs a script from it. manifest.json, written last, lists each
file's sha256 and airetrain's version and commit.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .fingerprints import fingerprint
from ..fsutil import read_json, sha256_file, write_json_atomic
from .provenance import airetrain_state
from ..records import Plan

MANIFEST = "manifest.json"
CODE_ENV = "AIRETRAIN_CODE"
SCRIPT_DIR = "script"
IMPORT_KEYS = ("model.name", "data.name", "train.loss", "train.forward", "train.metrics", "optim.name",
               "optim.schedule")


@dataclass(frozen=True)
class Capture:
    directory: Path
    manifest: dict

    def script(self, original: str) -> str:
        """The captured copy of a script-mode script."""
        return str(self.directory / SCRIPT_DIR / Path(original).name)

    def env(self, env: dict) -> dict:
        python_path = os.pathsep.join(filter(None, [str(self.directory), env.get("PYTHONPATH")]))
        return {CODE_ENV: str(self.directory), "PYTHONPATH": python_path}


def capture_dir(plan: Plan) -> Path:
    return plan.durable_dir / "code" / fingerprint(plan.config)


def _search_path(env) -> list[str]:
    """Where the user's code is imported from: the working directory, then PYTHONPATH (never
    site-packages: installed libraries are the environment's, recorded by their versions)."""
    return [str(Path.cwd()), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]


def sources(plan: Plan, env) -> dict[str, Path]:
    """{path in the capture: file in the working tree} of the run's own code."""
    cfg = plan.config.to_dict()
    found: dict[str, Path] = {}
    for key in IMPORT_KEYS:
        section, name = key.split(".")
        value = cfg[section].get(name)
        if not isinstance(value, str) or ":" not in value:
            continue
        top = value.partition(":")[0].split(".")[0]
        spec = importlib.machinery.PathFinder.find_spec(top, _search_path(env))
        if spec is None or spec.origin in (None, "built-in", "frozen"):
            continue
        if spec.submodule_search_locations:   # a package: every .py file under it
            root = Path(list(spec.submodule_search_locations)[0])
            for path in sorted(root.rglob("*.py")):
                if "__pycache__" not in path.parts:
                    found[str(Path(top) / path.relative_to(root))] = path
        else:
            found[f"{top}.py"] = Path(spec.origin)
    if plan.script:
        script = Path(plan.script.path)
        for path in sorted(script.parent.glob("*.py")):
            found[f"{SCRIPT_DIR}/{path.name}"] = path
    return found


def ensure(plan: Plan, env=None) -> Capture:
    """This fingerprint's capture: the one made at the run's first launch, else made now."""
    env = os.environ if env is None else env
    directory = capture_dir(plan)
    if (directory / MANIFEST).exists():
        return Capture(directory, read_json(directory / MANIFEST))
    files = sources(plan, env)
    size = sum(p.stat().st_size for p in files.values())
    limit = plan.config.code.max_mb * 1e6
    if size > limit:
        raise ConfigError(f"runs.{plan.run}: the code to capture is {size / 1e6:.1f} MB, over code.max_mb = "
                          f"{plan.config.code.max_mb:g} (a package that size holds data, not code: move the data "
                          "out of it, or raise code.max_mb)")
    partial = directory.with_name(f".{directory.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    for rel, path in files.items():
        (partial / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, partial / rel)
    partial.mkdir(parents=True, exist_ok=True)
    manifest = {"fingerprint": directory.name, "files": {rel: sha256_file(partial / rel) for rel in files},
                "sources": {rel: str(path) for rel, path in files.items()}, "bytes": size,
                "airetrain": airetrain_state()}
    write_json_atomic(partial / MANIFEST, manifest)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(partial, directory)
    return Capture(directory, manifest)


def changed(plan: Plan) -> list[str]:
    """The captured files whose working-tree source now differs (or is gone); [] without a capture."""
    path = capture_dir(plan) / MANIFEST
    if not path.exists():
        return []
    manifest = read_json(path)
    out = []
    for rel, source in manifest["sources"].items():
        source = Path(source)
        if not source.exists() or hashlib.sha256(source.read_bytes()).hexdigest() != manifest["files"][rel]:
            out.append(rel)
    return out
