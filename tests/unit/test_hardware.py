"""hardware.py: the one table of hardware facts, and the config defaults that rest on it."""
from airetrain.hardware import AIRE_GPU_NODE, GPUS, gpu_facts
from airetrain.plan.config import defaults_from_schema, load_schema


def test_the_schemas_site_defaults_are_the_aire_gpu_node():
    site = defaults_from_schema(load_schema())["site"]
    assert {k: site[k] for k in ("gpus_per_node", "cores_per_node", "mem_gb_per_node", "max_wall_hours")} == \
        {k: v for k, v in AIRE_GPU_NODE.items() if k != "gpu"}


def test_the_default_memory_budget_leaves_headroom_on_the_node_gpu():
    from airetrain.plan.config import resolve

    budget = resolve({"runs": {"r": {}}})[1]["r"].memory_budget_gb
    assert 0 < budget < GPUS[AIRE_GPU_NODE["gpu"]]["memory_gb"]


def test_device_names_find_their_facts():
    assert gpu_facts("NVIDIA L40S")["bf16_tflops"] == 362.0
    assert gpu_facts("NVIDIA H200")["memory_gb"] == 141
    assert gpu_facts("Some Other GPU") is None


def test_native_bf16_is_told_from_the_cpus_flags():
    from airetrain.hardware import cpu_bf16_native

    assert cpu_bf16_native("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n") is False   # AVX2 only: emulated
    assert cpu_bf16_native("flags\t\t: avx2 avx512f avx512_bf16 amx_tile\n") is True
    assert cpu_bf16_native("Processor\t: ARMv8\n") is None   # no x86 flags line: not known
