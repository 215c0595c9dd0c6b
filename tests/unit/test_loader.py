"""train/loader.py: each rank's share of the training set, resumable mid-epoch: the batches from a
position are exactly those an uninterrupted epoch gives from there."""
import torch
from torch.utils.data import TensorDataset

from airetrain.train.loader import ResumableSampler, training_data
from airetrain.train.parallel.process_group import Dist

from conftest import make_plan

DATA = TensorDataset(torch.arange(40))


def test_a_sampler_started_part_way_skips_exactly_what_was_trained():
    full, resumed = (ResumableSampler(DATA, num_replicas=2, rank=1, shuffle=True, seed=3) for _ in range(2))
    for sampler in (full, resumed):
        sampler.set_epoch(2)
    resumed.start = 7
    assert list(resumed) == list(full)[7:] and len(resumed) == len(full) - 7
    other = ResumableSampler(DATA, num_replicas=2, rank=0, shuffle=True, seed=3)
    other.set_epoch(2)
    assert not set(other) & set(full)   # the two ranks share the epoch without overlap


def test_keyed_samples_carry_their_epoch():
    sampler = ResumableSampler(DATA, num_replicas=1, rank=0, shuffle=False)
    sampler.keyed = True
    sampler.set_epoch(3)
    assert list(sampler)[:2] == [3 * 40 + 0, 3 * 40 + 1]   # what PerSampleSeeds turns into (epoch, index)


def test_the_epoch_from_a_position_continues_an_uninterrupted_epoch(tmp_path):
    plan = make_plan({"processes": 1, "data": {"name": "synthetic", "samples": 96, "shape": [2], "workers": 0},
                      "batch": {"global": 8, "per_device": 4}}, tmp_path)
    data = training_data(plan, None, Dist(0, 0, 1, torch.device("cpu")))
    assert data.steps_per_epoch == 96 // 8
    whole = [batch[0] for batch in data.epoch(1, 0, accum=2, per_device=4)]
    tail = [batch[0] for batch in data.epoch(1, 5, accum=2, per_device=4)]   # resumed after step 5 of epoch 1
    assert len(tail) == len(whole) - 10 and all(torch.equal(a, b) for a, b in zip(whole[10:], tail))
    assert not torch.equal(torch.cat(whole), torch.cat([b[0] for b in data.epoch(2, 0, 2, 4)]))   # reshuffled
