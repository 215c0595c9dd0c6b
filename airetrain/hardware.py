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
