"""`airetrain doctor`: what this environment can run, before a GPU-hour is spent finding out."""
from __future__ import annotations

import os
import platform

AIRE_VARIABLES = ("SCRATCH", "TMP_SHARED", "TMPDIR", "HOME")
TORCH_VARIABLES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF",
                   "NCCL_SOCKET_IFNAME", "NCCL_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "SLURM_JOB_ID")


def report() -> list[str]:
    import torch

    from .metrics import PEAK_BF16_TFLOPS

    lines = [f"python {platform.python_version()}  torch {torch.__version__}  CUDA {torch.version.cuda}"]
    if torch.cuda.is_available():
        lines.append(f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
        lines.append(f"arch list: {' '.join(torch.cuda.get_arch_list())}")
        for i in range(torch.cuda.device_count()):
            name = torch.cuda.get_device_name(i)
            major, minor = torch.cuda.get_device_capability(i)
            peak = next((f"{v:g} TFLOP/s bf16 peak" for k, v in PEAK_BF16_TFLOPS.items() if k in name), "peak unknown")
            ok = f"sm_{major}{minor}" in torch.cuda.get_arch_list()
            lines.append(f"GPU {i}: {name}, compute capability {major}.{minor}, "
                         f"{torch.cuda.get_device_properties(i).total_memory / 1e9:.0f} GB, {peak}, "
                         f"{'kernels present' if ok else 'NO KERNELS FOR THIS GPU in this build'}")
    else:
        lines.append("no CUDA GPU visible: CPU runs only (gloo); GPU plans need device: cpu to run here")
    lines.append(f"distributed: gloo {torch.distributed.is_gloo_available()}, "
                 f"nccl {torch.distributed.is_nccl_available()}")
    for name in AIRE_VARIABLES:
        value = os.environ.get(name)
        lines.append(f"${name}: {value if value else 'NOT SET'}")
    for name in TORCH_VARIABLES:
        if os.environ.get(name):
            lines.append(f"{name}={os.environ[name]}")
    from importlib.util import find_spec

    lines.append("nvidia-ml-py: " + ("installed (GPU use is sampled)" if find_spec("pynvml")
                                     else "not installed (GPU use is not sampled)"))
    return lines
