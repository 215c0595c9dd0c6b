"""Hardware facts, in one table: what the plan's defaults, the MFU figure and the advice rest on.

GPUS holds, per GPU type, datasheet values: memory (GB), the dense tensor-core peaks in TFLOP/s for bf16
and fp8 (no sparsity; None: the type has no such tensor cores), the board power (W) and the usual
interconnect, each with the datasheet it comes from. No other module names a GPU's size or peak (a
test checks): they ask gpu_facts for the run's type, by the name CUDA reports inside a job ("NVIDIA
A100-SXM4-80GB") or by a SLURM gres type ("l40s"). A name that fits several types (gres "a100": 40 or
80 GB) gets the figures they share and None for the others; a type not in the table gets None: a
figure is never guessed.

AIRE_GPU_NODE is one node of Aire's `gpu` partition; the config schema's `site:` defaults are these
numbers (a test checks that they agree).
"""
from __future__ import annotations

import re

FIELDS = ("memory_gb", "bf16_tflops", "fp8_tflops", "tdp_w", "interconnect", "datasheet")


def _gpu(memory_gb, bf16_tflops, fp8_tflops, tdp_w, interconnect, datasheet, names) -> dict:
    return {"memory_gb": memory_gb, "bf16_tflops": bf16_tflops, "fp8_tflops": fp8_tflops, "tdp_w": tdp_w,
            "interconnect": interconnect, "datasheet": datasheet, "names": names}


# names: regular expressions over the upper-cased name without "NVIDIA " or "TESLA ", most specific first
GPUS = {
    "L40S": _gpu(48, 362.05, 733.0, 350, "PCIe Gen4, no NVLink", "NVIDIA L40S datasheet (2023)", [r"^L40S\b"]),
    "L40": _gpu(48, 181.05, 362.05, 300, "PCIe Gen4, no NVLink", "NVIDIA L40 datasheet (2022)", [r"^L40\b(?!S)"]),
    "A40": _gpu(48, 149.7, None, 300, "PCIe Gen4, NVLink bridge (2 GPUs)", "NVIDIA A40 datasheet (2021)",
                [r"^A40\b"]),
    "A100-SXM4-40GB": _gpu(40, 312.0, None, 400, "NVLink 600 GB/s (SXM4)", "NVIDIA A100 datasheet (2021)",
                           [r"^A100-SXM4-40GB", r"^A100-SXM-40GB"]),
    "A100-PCIE-40GB": _gpu(40, 312.0, None, 250, "PCIe Gen4, NVLink bridge (2 GPUs)", "NVIDIA A100 datasheet (2021)",
                           [r"^A100-PCIE-40GB", r"^A100 40GB PCIE"]),
    "A100-SXM4-80GB": _gpu(80, 312.0, None, 400, "NVLink 600 GB/s (SXM4)", "NVIDIA A100 datasheet (2021)",
                           [r"^A100-SXM4-80GB", r"^A100-SXM-80GB"]),
    "A100-PCIE-80GB": _gpu(80, 312.0, None, 300, "PCIe Gen4, NVLink bridge (2 GPUs)", "NVIDIA A100 datasheet (2021)",
                           [r"^A100 80GB PCIE", r"^A100-PCIE-80GB"]),
    "H100-PCIE": _gpu(80, 756.0, 1513.0, 350, "PCIe Gen5, NVLink bridge (2 GPUs)", "NVIDIA H100 datasheet (2023)",
                      [r"^H100 PCIE", r"^H100-PCIE"]),
    "H100-SXM": _gpu(80, 989.0, 1979.0, 700, "NVLink 900 GB/s (SXM5)", "NVIDIA H100 datasheet (2023)",
                     [r"^H100 80GB HBM3", r"^H100-SXM", r"^H100 SXM"]),
    "H200": _gpu(141, 989.0, 1979.0, 700, "NVLink 900 GB/s (SXM)", "NVIDIA H200 datasheet (2024)", [r"^H200\b"]),
    "GH200": _gpu(96, 989.0, 1979.0, 1000, "NVLink-C2C 900 GB/s to the Grace CPU",
                  "NVIDIA GH200 datasheet (2023); power: the whole module's maximum, CPU and memory included",
                  [r"^GH200\b"]),
    "V100-SXM2-32GB": _gpu(32, None, None, 300, "NVLink 300 GB/s (SXM2)", "NVIDIA V100 datasheet (2020)",
                           [r"^V100-SXM2-32GB"]),
    "V100-SXM2-16GB": _gpu(16, None, None, 300, "NVLink 300 GB/s (SXM2)", "NVIDIA V100 datasheet (2020)",
                           [r"^V100-SXM2-16GB"]),
    "V100-PCIE-32GB": _gpu(32, None, None, 250, "PCIe Gen3", "NVIDIA V100 datasheet (2020)", [r"^V100-PCIE-32GB"]),
    "V100-PCIE-16GB": _gpu(16, None, None, 250, "PCIe Gen3", "NVIDIA V100 datasheet (2020)", [r"^V100-PCIE-16GB"]),
    "RTX-6000-ADA": _gpu(48, 364.2, 728.5, 300, "PCIe Gen4, no NVLink",
                         "NVIDIA RTX 6000 Ada Generation datasheet (2023); Ada architecture whitepaper",
                         [r"^RTX 6000 ADA"]),
}

# SLURM gres types as sites name them (gres.conf's Type=), each the table's types it may be
GRES_TYPES = {"l40s": ["L40S"], "l40": ["L40"], "a40": ["A40"], "h200": ["H200"], "gh200": ["GH200"],
              "a100": ["A100-SXM4-40GB", "A100-PCIE-40GB", "A100-SXM4-80GB", "A100-PCIE-80GB"],
              "a100_40g": ["A100-SXM4-40GB", "A100-PCIE-40GB"], "a100_80g": ["A100-SXM4-80GB", "A100-PCIE-80GB"],
              "h100": ["H100-PCIE", "H100-SXM"], "v100": [k for k in GPUS if k.startswith("V100")],
              "rtx6000ada": ["RTX-6000-ADA"]}

AIRE_GPU_NODE = {
    "gpu": "L40S",             # PCIe, no NVLink: gradients cross the PCIe bus (and the network between nodes)
    "gpus_per_node": 3,
    "cores_per_node": 24,
    "mem_gb_per_node": 250,    # of 256 GB, what jobs can use
    "max_wall_hours": 48,
}


def gpu_facts(name: str | None) -> dict | None:
    """The facts of the GPU a CUDA device name or a gres type names ('NVIDIA L40S', 'l40s'): every field of
    FIELDS, None where the type has no such figure or where the name fits several types that differ in it;
    None for a name the table does not know."""
    if not name:
        return None
    types = GRES_TYPES.get(name.strip().lower())
    if types is None:
        plain = re.sub(r"^((NVIDIA|TESLA)\s+)+", "", name.strip().upper())
        types = next(([key] for key, facts in GPUS.items() if any(re.search(p, plain) for p in facts["names"])), None)
    if types is None:
        return None
    facts = [GPUS[t] for t in types]
    return {"type": types[0] if len(types) == 1 else "/".join(types),
            **{f: facts[0][f] if all(x[f] == facts[0][f] for x in facts) else None for f in FIELDS}}


def gpu_memory_gb(name: str | None) -> float | None:
    """A GPU's memory by its CUDA or gres name; None: not known."""
    facts = gpu_facts(name)
    return facts["memory_gb"] if facts else None


def memory_budget_gb(name: str | None) -> float | None:
    """What strategy auto lets DDP use of a GPU: 5/6 of its memory (an L40S's 48 GB: 40), the rest headroom for
    the allocator and the communication buffers; None: the GPU's memory is not known."""
    memory = gpu_memory_gb(name)
    if not memory:
        return None
    budget = memory * 5 / 6
    return int(budget) if float(budget).is_integer() else round(budget, 1)


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
