"""What a tracker run is told once, when it is created: the run's resolved config under the dotted
keys `airetrain compare` shows, its name and group, the keys its sweep varies, the code it runs and
the versions. Each tracker files them its own way (W&B's config and tags, MLflow's params and tags)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..rundir.provenance import airetrain_state, git_state
from ..records import Plan
from ..rundir.run_log import captured_code
from ..schema import flatten


@dataclass(frozen=True)
class Opening:
    run: str
    group: str
    generation: str
    config: dict          # dotted key -> value, as in `airetrain compare`
    sweep: dict           # the keys this run's sweep point sets, and their values
    code: str | None      # the captured code's fingerprint
    airetrain: str        # airetrain's version
    commit: str | None    # the project's commit

    @property
    def tags(self) -> dict[str, str]:
        """One line each, for a tracker's tags (MLflow) or its config's airetrain section (W&B)."""
        return {"airetrain.run": self.run, "airetrain.group": self.group, "airetrain.generation": self.generation,
                "airetrain.version": self.airetrain, "airetrain.code": self.code or "",
                "project.commit": self.commit or "",
                **{f"airetrain.sweep.{key}": text(value) for key, value in self.sweep.items()}}


def text(value) -> str:
    """A value as a param: strings as they are, the rest as JSON (0.001, true, null, [1, 2])."""
    return value if isinstance(value, str) else json.dumps(value)


def of_plan(plan: Plan, generation: str, project_dir: Path) -> Opening:
    code = captured_code(plan)
    return Opening(run=plan.run, group=plan.group or plan.run, generation=generation,
                   config=flatten(plan.config.to_dict()), sweep=dict(plan.sweep), code=code and code["fingerprint"],
                   airetrain=airetrain_state()["version"], commit=git_state(project_dir)["commit"])
