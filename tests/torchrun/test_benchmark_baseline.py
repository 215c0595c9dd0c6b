"""The trainer benchmark's baseline, benchmarks/plain_ddp.py, still runs against the package as it
is: it builds the same model and dataset from airetrain's own builders, so a change to their
signatures would otherwise surface only when someone next measures."""
import importlib.util
import json
import sys
from pathlib import Path

from conftest import run

REPO = Path(__file__).resolve().parents[2]


def benchmark(name: str):
    """A module of benchmarks/, loaded without putting that folder on the path."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plain_ddp_baseline_trains_the_benchmarks_model():
    trainer = benchmark("trainer")   # the model and data the benchmark compares on
    cfg = {"model": trainer.MODEL, "data": {**trainer.DATA, "samples": 64}, "per_device": 32, "epochs": 1}
    proc = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                str(REPO / "benchmarks" / "plain_ddp.py"), json.dumps(cfg)])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["steps"] == 1 and result["samples_per_s"] > 0


def test_every_file_of_the_checkout_a_benchmark_names_exists():
    """A benchmark runs rarely: a file it names by its path in the checkout (an entry point, a script)
    that moved would otherwise surface only when someone next measures."""
    import re

    for script in sorted((REPO / "benchmarks").glob("*.py")):
        for name in re.findall(r'REPO / "([^"]+)"', script.read_text()):
            assert (REPO / name).exists(), f"{script.name}: {name}"
