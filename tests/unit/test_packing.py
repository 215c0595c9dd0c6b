"""plan/packing.py: which runs share one allocation, from the plans alone (Aire's site: 3 GPUs, 24 cores and
256 GB a node)."""
from airetrain.plan.overview import format_table
from airetrain.plan.packing import pack_request, packs
from airetrain.plan.planner import plan_all

ONE_GPU = {"gpus": 1, "cpus_per_rank": 4, "mem_gb_per_rank": 32}


def packed(runs: dict, tmp_path) -> tuple[dict, dict]:
    plans = plan_all({"roots": {"scratch": str(tmp_path)}, "runs": runs}, env={"HOME": "/nonexistent"})
    return packs(dict(plans), plans.settings.site), plans


def test_six_one_gpu_seeds_fill_two_nodes_in_the_configs_order(tmp_path):
    found, plans = packed({"s": {**ONE_GPU, "seeds": [0, 1, 2, 3, 4, 5], "pack": "auto"}}, tmp_path)
    assert found == {"pack-s-seed0": ("s-seed0", "s-seed1", "s-seed2"),
                     "pack-s-seed3": ("s-seed3", "s-seed4", "s-seed5")}
    request = pack_request([plans[r] for r in found["pack-s-seed0"]])
    assert request == {"nodes": 1, "tasks": 3, "cpus_per_task": 4, "gpus": 3, "mem_mb": 3 * 32 * 1024,
                       "minutes": plans["s-seed0"].time_min.total}
    assert "s-seed3, s-seed4, s-seed5: one allocation (pack-s-seed3), 3 GPUs" in \
        format_table(dict(plans), plans.settings.site)


def test_pack_n_caps_a_pack_auto_is_the_default_and_none_packs_nothing(tmp_path):
    assert packed({"s": {**ONE_GPU, "seeds": [0, 1, 2, 3], "pack": 2}}, tmp_path)[0] == \
        {"pack-s-seed0": ("s-seed0", "s-seed1"), "pack-s-seed2": ("s-seed2", "s-seed3")}
    assert packed({"s": {**ONE_GPU, "seeds": [0, 1, 2]}}, tmp_path)[0] == {"pack-s-seed0": ("s-seed0", "s-seed1",
                                                                                           "s-seed2")}
    assert packed({"s": {**ONE_GPU, "seeds": [0, 1, 2], "pack": "none"}}, tmp_path)[0] == {}
    assert packed({"s": {"gpus": 0, "seeds": [0, 1, 2]}}, tmp_path)[0] == {}   # a laptop's CPU runs: never


def test_a_whole_node_a_fine_tune_and_what_the_node_cannot_hold_are_not_packed(tmp_path):
    runs = {"whole": {"gpus": 3, "pack": "auto", "seeds": [0, 1], "batch": {"global": 96}},
            "base": {**ONE_GPU, "pack": "auto"},
            "tuned": {**ONE_GPU, "pack": "auto", "model": {"init_from": {"run": "base"}}},
            "big": {**ONE_GPU, "mem_gb_per_rank": 200, "pack": "auto", "seeds": [0, 1]}}
    found, _ = packed(runs, tmp_path)
    # tuned waits for base's weights; base and one big take 232 GB of the node's 256, the other big its own
    assert found == {"pack-base": ("base", "big-seed0")}


def test_runs_asking_slurm_for_different_things_are_packed_apart(tmp_path):
    runs = {"a": {**ONE_GPU, "pack": "auto", "seeds": [0, 1]},
            "b": {**ONE_GPU, "pack": "auto", "seeds": [0, 1], "time_min": {"train": 300}}}
    assert packed(runs, tmp_path)[0] == {"pack-a-seed0": ("a-seed0", "a-seed1"), "pack-b-seed0": ("b-seed0", "b-seed1")}


def test_a_search_that_packs_goes_in_waves_of_what_a_node_holds(tmp_path):
    from airetrain.plan.packing import slot_groups, wave_size

    tune = {"space": {"optim.lr": {"loguniform": [1e-4, 1e-1]}}, "trials": 9}
    found, plans = packed({"s": {**ONE_GPU, "pack": "auto", "tune": {**tune, "parallel": 3}},
                           "four": {**ONE_GPU, "pack": "auto", "tune": {**tune, "parallel": 4}},
                           "capped": {**ONE_GPU, "pack": 2, "tune": {**tune, "parallel": 3}},
                           "plain": {**ONE_GPU, "pack": "none", "tune": {**tune, "parallel": 3}},
                           "whole": {"gpus": 3, "pack": "auto", "batch": {"global": 96},
                                     "tune": {**tune, "parallel": 2}}}, tmp_path)
    site = plans.settings.site
    assert found == {}   # a search's trials are never in a pack of the plan: its waves are
    assert [wave_size(plans[n], p, site) for n, p in (("s", 3), ("four", 4), ("capped", 3), ("plain", 3),
                                                      ("whole", 2))] == [3, 3, 2, 1, 1]
    assert slot_groups(4, 3) == [range(0, 3), range(3, 4)] and slot_groups(3, 1) == [range(i, i + 1) for i in range(3)]
    table = format_table(dict(plans), site)
    assert "s: its 3 trials at once in waves of 3, each wave's rungs one allocation (3 GPUs)" in table
    assert "plain:" not in table and "whole:" not in table


def test_outside_slurm_a_pack_shares_the_machines_gpus_or_runs_one_after_another():
    from airetrain.commands.pack_run import device_shares

    assert device_shares([1, 1, 1], {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}) == {0: "0", 1: "1", 2: "2"}
    assert device_shares([2, 1], {"CUDA_VISIBLE_DEVICES": "4,5,6"}) == {0: "4,5", 1: "6"}
    assert device_shares([1, 1, 1], {"CUDA_VISIBLE_DEVICES": "0"}) is None   # a workstation of one GPU
    assert device_shares([1, 1], {"SLURM_JOB_ID": "7"}) == {}   # each SLURM step is given its own
