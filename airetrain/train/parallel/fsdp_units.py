"""The units of a model that FSDP shards one by one and activation checkpointing wraps, for any model.

Chosen in this order:
1. the classes the user names (model.fsdp_units), outermost first;
2. the repeated blocks: of the ModuleLists and Sequentials that hold two or more submodules of one
   class (a transformer's `blocks`, a Hugging Face decoder's `layers` one level down), the outermost
   one (the one with the most parameters among equals), and its submodules of that class;
3. the model's direct submodules that each hold at least LARGE of its parameters (two or more);
4. none: the whole model is one unit.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from torch import nn

LARGE = 0.1


@dataclass(frozen=True)
class Unit:
    parent: nn.Module   # where the unit is registered: replacing it there wraps it
    name: str
    module: nn.Module


@dataclass
class Units:
    how: str                          # named, repeated blocks of <path>, large submodules, whole model
    units: list[Unit] = field(default_factory=list)

    def __post_init__(self):
        # counted now: fully_shard changes the units' classes (Linear becomes FSDPLinear)
        self.classes = dict(Counter(type(u.module).__name__ for u in self.units))

    def describe(self) -> dict:
        return {"how": self.how, "count": len(self.units), "classes": self.classes}


def _params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _named(model: nn.Module, names: list[str]) -> Units:
    units, taken = [], []
    for path, module in model.named_modules():
        if type(module).__name__ in names and not any(path.startswith(t + ".") for t in taken):
            parent_path, _, name = path.rpartition(".")
            units.append(Unit(model.get_submodule(parent_path), name, module))
            taken.append(path)
    if not units:
        present = sorted({type(m).__name__ for m in model.modules()})
        raise ValueError(f"model.fsdp_units = {names}: the model has no submodule of these classes; "
                         f"its classes are {', '.join(present)}")
    return Units("named", units)


def _repeated(model: nn.Module) -> Units | None:
    best, best_key = None, None
    for path, container in model.named_modules():
        if type(container) not in (nn.ModuleList, nn.Sequential):   # a subclass is a block, not a list of them
            continue
        counts = Counter(type(c) for c in container.children() if _params(c))
        if not counts:
            continue
        cls, n = counts.most_common(1)[0]
        params = sum(_params(c) for c in container.children() if type(c) is cls)
        key = (-path.count(".") - bool(path), params)   # outermost first, then the most parameters
        if n >= 2 and (best_key is None or key > best_key):
            units = [Unit(container, name, c) for name, c in container.named_children() if type(c) is cls]
            best, best_key = Units(f"repeated blocks of {path or 'the model'}", units), key
    return best


def find_units(model: nn.Module, names: list[str] | None = None) -> Units:
    if names:
        return _named(model, names)
    repeated = _repeated(model)
    if repeated:
        return repeated
    total = _params(model)
    large = [Unit(model, name, c) for name, c in model.named_children() if total and _params(c) >= LARGE * total]
    if len(large) >= 2:
        return Units("large submodules", large)
    return Units("whole model")
