"""`airetrain doctor`: what this environment can run, before a GPU-hour is spent finding out."""
from __future__ import annotations

import getpass
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from ..quota import quota_rows

# The pins the test suite ran (shared by the Makefile, CI and envs/aire.yaml), in a checkout.
PINS = Path(__file__).resolve().parents[2] / "envs" / "requirements.txt"

AIRE_VARIABLES = ("SCRATCH", "TMP_SHARED", "TMPDIR", "HOME")
TORCH_VARIABLES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF",
                   "NCCL_SOCKET_IFNAME", "NCCL_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "SLURM_JOB_ID")


def pinned_version(package: str, pins: Path = PINS) -> str | None:
    """The version envs/requirements.txt pins package to, or None (no checkout, or not pinned)."""
    try:
        text = pins.read_text()
    except OSError:
        return None
    match = re.search(rf"(?mi)^{re.escape(package)}==([^\s;#]+)", text)
    return match.group(1) if match else None


def torch_pin_line(running: str, pinned: str | None) -> str:
    public = running.split("+", 1)[0]   # 2.13.0+cpu and 2.13.0+cu128 are both 2.13.0
    if pinned is None:
        return "torch pin: envs/requirements.txt not found (not a checkout): cannot compare"
    if public == pinned:
        return f"torch {running} is the pinned version ({pinned}): the one the test suite ran"
    return (f"WARNING: torch {running} is not the pinned {pinned} (envs/requirements.txt): this environment "
            "runs a torch the test suite did not; recreate it from envs/aire.yaml or `make install`")


def driver_versions() -> tuple[str | None, str | None]:
    """(NVIDIA driver version, the newest CUDA it supports), or None where no driver answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()   # e.g. 12040
        driver = driver.decode() if isinstance(driver, bytes) else driver
        return driver, f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception:   # no nvidia-ml-py, or no driver
        pass
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    driver = re.search(r"Driver Version:\s*([\d.]+)", out)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", out)
    return (driver.group(1) if driver else None), (cuda.group(1) if cuda else None)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def cuda_lines(build_cuda: str | None, driver: str | None, driver_cuda: str | None) -> list[str]:
    """What this torch build needs of the driver, and whether the driver here gives it."""
    if build_cuda is None:
        return ["CUDA: this torch is a CPU build (no CUDA); on Aire use the CUDA build of envs/aire.yaml"]
    lines = [f"CUDA: this torch is built for CUDA {build_cuda}"]
    if driver is None:
        return lines + ["NVIDIA driver: none found (no nvidia-ml-py answer, no nvidia-smi): no GPU here"]
    lines.append(f"NVIDIA driver: {driver}, supports CUDA up to {driver_cuda or 'unknown'}")
    if driver_cuda and _version(driver_cuda) < _version(build_cuda):
        lines.append(f"WARNING: the driver supports CUDA {driver_cuda}, older than this build's {build_cuda}: "
                     "it runs only through CUDA minor-version compatibility (same major version, kernels for "
                     "this GPU in the build); a newer driver is the safe fix")
    return lines


FULL = 0.9   # Aire counts a filesystem as full at 90 % of its quota, and suspends scheduling


def _files_figure(words: list[str]) -> str:
    """'123,456 files of 1,500,000 (8 %)' from the columns used quota limit grace files quota limit grace;
    grace columns may be empty, so the files come after the first three (space) figures and a grace."""
    numbers = [w.rstrip("*") for w in words]
    files = next((i for i in range(3, len(numbers)) if numbers[i].isdigit()), None)
    if files is None:
        return "files: not shown"
    used, limits = int(numbers[files]), [int(n) for n in numbers[files + 1:files + 3] if n.isdigit()]
    limit = max(limits, default=0)
    if not limit:
        return f"{used:,} files (no file limit)"
    share = used / limit
    return f"{used:,} files of {limit:,} ({share:.0%})" + \
        (f"; OVER {FULL:.0%}: Aire counts this as full and suspends scheduling" if share >= FULL else "")


def quota_lines(roots: dict[str, str | None]) -> list[str]:
    """The file counts of the storage roots, from `lfs quota` (Lustre) or `quota -s`."""
    def run(cmd: list[str]) -> str:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout

    user = getpass.getuser()
    lines = []
    if shutil.which("lfs"):
        for label, path in roots.items():
            if not path:
                continue
            rows = quota_rows(run(["lfs", "quota", "-u", user, "-h", path]))
            lines.append(f"quota {label} ({path}): " + (_files_figure(rows[0][1]) if rows else
                                                        "lfs quota showed nothing (not a Lustre filesystem?)"))
    elif shutil.which("quota"):
        rows = quota_rows(run(["quota", "-s", "-w"]))
        lines += [f"quota {name}: {_files_figure(words)}" for name, words in rows] or \
            ["quota: no quotas are set for you here"]
    else:
        lines.append("file quotas: unknown here (neither lfs nor quota is installed); on Aire, "
                     "`quota -s` or `lfs quota -u $USER $SCRATCH` shows them")
    return lines


def report() -> list[str]:
    import torch

    from ..cluster.hardware import gpu_facts

    lines = [f"python {platform.python_version()}  torch {torch.__version__}  CUDA {torch.version.cuda}",
             torch_pin_line(torch.__version__, pinned_version("torch"))]
    lines += cuda_lines(torch.version.cuda, *driver_versions())
    if torch.cuda.is_available():
        lines.append(f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
        lines.append(f"arch list: {' '.join(torch.cuda.get_arch_list())}")
        for i in range(torch.cuda.device_count()):
            name = torch.cuda.get_device_name(i)
            major, minor = torch.cuda.get_device_capability(i)
            facts = gpu_facts(name)
            peak = f"{facts['bf16_tflops']:g} TFLOP/s bf16 peak" if facts else "peak unknown"
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
    lines += quota_lines({"$SCRATCH": os.environ.get("SCRATCH"), "$TMP_SHARED": os.environ.get("TMP_SHARED")})
    from importlib.util import find_spec

    lines.append("nvidia-ml-py: " + ("installed (GPU use is sampled)" if find_spec("pynvml")
                                     else "not installed (GPU use is not sampled)"))
    return lines


def add_parsers(sub) -> None:
    p = sub.add_parser("doctor", help="torch, CUDA, NCCL, GPUs and the variables that matter")
    p.set_defaults(func=lambda args: print("\n".join(report())))
