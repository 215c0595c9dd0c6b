"""The training data as the loop sees it: the staged datasets, split across ranks, resumable mid-epoch."""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ..records import Plan
from . import datasets

log = logging.getLogger("airetrain.train")


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can begin an epoch part-way: after a mid-epoch resume it skips the
    samples already trained on, without loading them. With keyed, it yields epoch * len + index
    (what datasets.PerSampleSeeds takes)."""
    start = 0
    keyed = False

    def __iter__(self):
        indices = itertools.islice(super().__iter__(), self.start, None)
        if self.keyed:
            return (self.epoch * len(self.dataset) + i for i in indices)
        return indices

    def __len__(self):
        return super().__len__() - self.start


@dataclass
class TrainData:
    train_set: Dataset
    test_set: Dataset | None
    meta: dict
    loader: DataLoader
    sampler: ResumableSampler
    rng: torch.Generator
    seed: int
    rank: int
    steps_per_epoch: int
    eval_set: Dataset | None = None   # what the evaluations run on: the validation split, else the test split

    def epoch(self, epoch: int, step_in_epoch: int, accum: int, per_device: int):
        """The batches of one epoch, from optimizer step `step_in_epoch` on.

        The loader's own generator (the workers' seeds) is reseeded from (seed, epoch, rank), so the
        position (epoch, step in epoch) is all a resume needs to continue exactly."""
        self.sampler.set_epoch(epoch)
        self.sampler.start = step_in_epoch * accum * per_device
        self.rng.manual_seed(self.seed + 7919 * epoch + self.rank)
        return iter(self.loader)


def training_data(plan: Plan, target: str | None, d) -> TrainData:
    """The run's datasets from the staged copy at `target`, and the loader of this rank's share."""
    data = plan.config.data
    seed = plan.config.train.seed
    train_set, test_set, meta = datasets.build_datasets(data, target)
    if datasets.draws_random_numbers(data):   # its augmentations replay exactly after a resume
        train_set = datasets.PerSampleSeeds(train_set, seed)
    per_device, accum = plan.batch.per_device, plan.batch.grad_accum
    sampler = ResumableSampler(train_set, num_replicas=d.world_size, rank=d.rank, shuffle=True, seed=seed,
                               drop_last=True)
    sampler.keyed = isinstance(train_set, datasets.PerSampleSeeds)
    workers = max(plan.cpus_per_rank - 1, 0) if data.workers is None else data.workers
    rng = torch.Generator()
    loader = DataLoader(train_set, batch_size=per_device, sampler=sampler, drop_last=True,
                        num_workers=workers, persistent_workers=workers > 0, generator=rng,
                        prefetch_factor=data.prefetch if workers > 0 else None,
                        pin_memory=d.device.type == "cuda")
    steps_per_epoch = len(loader) // accum
    if steps_per_epoch == 0:
        raise SystemExit(f"the training set ({len(train_set)} samples) is smaller than one global batch "
                         f"({plan.batch.global_}): lower batch.global")
    validation = datasets.validation_set(data, target)
    if validation is None and test_set is not None and d.is_main:
        log.info("no validation split: the evaluations during training run on the test split")
    return TrainData(train_set, test_set, meta, loader, sampler, rng, seed, d.rank, steps_per_epoch,
                     validation if validation is not None else test_set)
