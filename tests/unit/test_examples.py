"""The example configs plan cleanly, and docs/aire.md's table says what each one requests."""
import re

import pytest

from airetrain.plan.config import load_yaml
from airetrain.plan.planner import plan_all

from conftest import ENV, REPO

EXAMPLES = sorted((REPO / "config/examples").glob("*.yaml"))


def readme_rows() -> dict[str, list[str]]:
    rows = {}
    for line in (REPO / "docs" / "aire.md").read_text().splitlines():
        m = re.match(r"\| `config/examples/([^`]+)`[^|]*\|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_every_example_is_in_the_readme_table():
    assert sorted(readme_rows()) == sorted(p.name for p in EXAMPLES) and len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_readme_table_matches_the_plan(path):
    (plan,) = plan_all(load_yaml(path), env=ENV).values()
    gpus, nodes, gres, ranks, cores, mem, batch = readme_rows()[path.name]
    assert int(gpus) == plan.gpus and int(nodes) == plan.nodes
    assert gres == plan.slurm.gres and int(ranks) == plan.nproc_per_node
    assert int(cores) == plan.cpus_per_node and mem == f"{plan.mem_gb_per_node:g} GB"
    b = plan.batch
    assert batch == f"{b.global_} = {b.per_device} × {plan.world_size} × {b.grad_accum}"
    assert str(plan.dataset).startswith("/scratch/user/")
