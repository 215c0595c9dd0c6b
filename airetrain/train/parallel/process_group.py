"""Distributed set-up in one place: which device, which backend, who is rank 0.

One code path for CPU and GPU: the device and the backend are parameters, so the GPU
branches are a few lines: a CPU build of torch silently ignores CUDA-only calls (autocast("cuda"),
GradScaler("cuda"), pin_memory), so a GPU branch run on CPU would test nothing.
"""
from __future__ import annotations

import os
import resource
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def check_cuda_arch() -> None:
    """Refuse a PyTorch build that has no kernels for this GPU (Aire's L40S is sm_89)."""
    major, minor = torch.cuda.get_device_capability()
    arch = torch.cuda.get_arch_list()
    native = f"sm_{major}{minor}"
    # PTX for an older or equal compute capability can be JIT-compiled for this one.
    ptx = [a for a in arch if a.startswith("compute_") and int(a.split("_")[1]) <= major * 10 + minor]
    if native not in arch and not ptx:
        raise RuntimeError(
            f"this PyTorch build ({torch.__version__}) has no kernels for {torch.cuda.get_device_name()} "
            f"({native}); its arch list is {arch}. Install a CUDA 12 build of torch (see envs/aire.yaml)."
        )


def setup(device_kind: str, timeout_s: float | None = None) -> Dist:
    """Join the process group torchrun describes in the environment; timeout_s: how long a collective
    may wait (torch's default, 10 min for NCCL and 30 for gloo, where None)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device_kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device is cuda but no GPU is visible; use device: cpu for a CPU stand-in")
        check_cuda_arch()
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    backend = dist.get_default_backend_for_device(device)
    dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None,
                            timeout=None if timeout_s is None else timedelta(seconds=timeout_s))
    return Dist(rank, local_rank, world, device)


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA's peak allocation, or the process's peak RSS on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reduce(values: list[float], op=dist.ReduceOp.SUM, device=None) -> list[float]:
    if device is None:   # nccl reduces CUDA tensors only
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


def hostnames() -> list[str]:
    names = [None] * dist.get_world_size()
    dist.all_gather_object(names, socket.gethostname())
    return sorted(set(names))
