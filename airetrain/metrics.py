"""Efficiency figures the trainer measures itself: model FLOPs, MFU, GPU use through NVML.

On CPU, or where NVML is missing, these are None: never invented.
"""
from __future__ import annotations

import threading
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

# Dense bf16 tensor-core peaks (datasheets), TFLOP/s, matched against the CUDA device name.
PEAK_BF16_TFLOPS = {"L40S": 362.0, "A100": 312.0, "H100": 989.0, "H200": 989.0}


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def count_flops(model, x, y, loss_fn) -> int:
    """FLOPs of one forward + backward of this micro-batch (torch.utils.flop_counter)."""
    with FlopCounterMode(display=False) as counter:
        loss_fn(model(x), y).backward()
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
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
            mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used
            self.samples.append((float(util), int(mem)))

    def summary(self) -> dict:
        self._stop.set()
        if not self.samples:
            return {"gpu_util_mean": None, "gpu_mem_peak_bytes": None, "gpu_samples": 0}
        return {"gpu_util_mean": round(sum(u for u, _ in self.samples) / len(self.samples), 1),
                "gpu_mem_peak_bytes": max(m for _, m in self.samples), "gpu_samples": len(self.samples)}


def now(device: torch.device) -> float:
    """A timestamp after the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
