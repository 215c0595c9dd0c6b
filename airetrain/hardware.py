"""Hardware facts, in one table: what the plan's defaults, the MFU figure and the advice rest on.

The GPU figures are datasheet values: dense bf16 tensor-core peak (no sparsity), TFLOP/s, and
memory, GB. AIRE_GPU_NODE is one node of Aire's `gpu` partition; the config schema's `site:`
defaults are these numbers (a test checks that they agree).
"""
from __future__ import annotations

GPUS = {
    "L40S": {"bf16_tflops": 362.0, "memory_gb": 48},
    "A100": {"bf16_tflops": 312.0, "memory_gb": 80},
    "H100": {"bf16_tflops": 989.0, "memory_gb": 80},
    "H200": {"bf16_tflops": 989.0, "memory_gb": 141},
}

AIRE_GPU_NODE = {
    "gpu": "L40S",             # PCIe, no NVLink: gradients cross the PCIe bus (and the network between nodes)
    "gpus_per_node": 3,
    "cores_per_node": 24,
    "mem_gb_per_node": 250,    # of 256 GB, what jobs can use
    "max_wall_hours": 48,
}


def gpu_facts(device_name: str) -> dict | None:
    """The facts of the GPU a CUDA device name names ('NVIDIA L40S' -> L40S's), or None."""
    return next((facts for key, facts in GPUS.items() if key in device_name), None)


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")   # x86 instructions that compute in bf16


def cpu_bf16_native(cpuinfo: str | None = None) -> bool | None:
    """Whether this CPU computes bf16 natively (None where it cannot be told: not Linux x86).
    Without those instructions bf16 autocast on the CPU is emulated, several times slower than
    fp32 (benchmarks/README.md)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return None
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), None)
    return None if flags is None else any(flag in flags for flag in NATIVE_BF16_FLAGS)
