"""Efficiency figures the trainer measures itself: model FLOPs, MFU, GPU use through NVML.

On CPU, or where NVML is missing, these are None: never invented.
"""
from __future__ import annotations

import threading
import time

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from ..cluster.hardware import gpu_facts


def peak_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak, FLOP/s (None on CPU or for a GPU not in the hardware table)."""
    facts = gpu_facts(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    return facts["bf16_tflops"] * 1e12 if facts else None


def _attention(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query, key, value)


def _attention_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return 2 * flop_counter.sdpa_flop_count(query, key, value)


# Attention's model FLOPs, counted in full (the kernels compute the masked half of a causal mask too):
# - torch's counter does not know the CPU kernel, whose attention would count 0 FLOPs;
# - its formula for the GPU kernels' backward adds their recomputation of the scores (2.5 x forward).
#   MFU counts the model's FLOPs, 2 x forward: recomputation is the kernel's cost, not the model's.
aten = torch.ops.aten
ATTENTION = {aten._scaled_dot_product_flash_attention_for_cpu: _attention,
             aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_backward,
             aten._scaled_dot_product_flash_attention_backward: _attention_backward,
             aten._scaled_dot_product_efficient_attention_backward: _attention_backward,
             aten._scaled_dot_product_cudnn_attention_backward: _attention_backward}


def count_flops(model, objective, batch) -> int:
    """FLOPs of one forward + backward of this micro-batch (torch.utils.flop_counter)."""
    with FlopCounterMode(display=False, custom_mapping=ATTENTION) as counter:
        objective.loss(objective.forward(model, batch), batch).backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


class GpuSampler:
    """Samples this rank's GPU utilisation and memory once a second in a background thread."""

    def __init__(self, device: torch.device, interval_s: float = 1.0):
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._handle = None
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(device).uuid)
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            self._nvml = pynvml
        except Exception:  # no nvidia-ml-py, or NVML not usable here
            self._handle = None
            return
        self._energy_mj = self._energy()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
            mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used
            self.samples.append((float(util), int(mem)))

    def latest(self) -> dict:
        """The newest sample, for the curves: {} where nothing is sampled (CPU, no NVML)."""
        if not self.samples:
            return {}
        util, mem = self.samples[-1]
        return {"gpu_util": util, "gpu_mem_gb": mem / 1e9}

    def _energy(self) -> int | None:
        """NVML's energy counter of this GPU since the driver loaded, mJ; None where it has none (before Volta)."""
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except Exception:
            return None

    def summary(self) -> dict:
        self._stop.set()
        start = getattr(self, "_energy_mj", None)
        end = self._energy() if start is not None else None
        energy = {"gpu_energy_j": (end - start) / 1000 if end is not None else None}
        if not self.samples:
            return {"gpu_util_mean": None, "gpu_mem_peak_bytes": None, "gpu_samples": 0, **energy}
        return {"gpu_util_mean": round(sum(u for u, _ in self.samples) / len(self.samples), 1),
                "gpu_mem_peak_bytes": max(m for _, m in self.samples), "gpu_samples": len(self.samples), **energy}


def now(device: torch.device) -> float:
    """A timestamp after the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def micro_batch_flops(model, objective, batch, device: torch.device, precision: str) -> int:
    """Model FLOPs of one micro-batch of the training set, under the run's autocast."""
    from .step import autocast

    with autocast(device, precision):
        return count_flops(model, objective, batch)
