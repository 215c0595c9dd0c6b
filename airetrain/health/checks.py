"""One node's checks before staging: what must hold on this node for the run to train here.

Each check answers a list of problems ({check, reason}; empty: it holds), and none raises: an error
of the check itself is a problem of the node. A check that may block (a GPU that never answers, a
durable root whose mount hangs) runs in a thread, bounded by a timeout.

- gpus: the GPUs SLURM gave are visible, as many as the plan asked, each answers a small
  computation, and NVML shows no pending retired pages or row remappings and no uncorrectable ECC
  errors (GPU runs only);
- fast_root: writable, with room for the staged data and checkpoint.keep + 1 checkpoints;
- durable_root: it answers;
- interfaces: those NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME name exist on this node.
"""
from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

from ..dataset_trees import scan
from ..records import Plan
from ..roots import fast_root, run_dir
from ..text import human_bytes

ANSWER_S = 60.0   # the longest a GPU's computation or a durable root's listing may take to answer


def problem(check: str, reason: str) -> dict:
    return {"check": check, "reason": reason}


def within(seconds: float, fn):
    """fn() in a daemon thread: its result, or TimeoutError after `seconds` (the thread is left behind)."""
    box: dict = {}

    def call():
        try:
            box["value"] = fn()
        except BaseException as e:   # handed to the caller
            box["error"] = e
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def interface_names(env) -> dict[str, list[str]]:
    """{variable: the interfaces it requires} for NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME. NCCL's value is
    a list of prefixes (=name: that name exactly; ^...: interfaces to avoid, which requires none)."""
    wanted = {}
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = (env.get(variable) or "").strip()
        if value and not value.startswith("^"):
            wanted[variable] = [name.strip() for name in value.split(",") if name.strip()]
    return wanted


def interface_problems(env, present: list[str]) -> list[dict]:
    """The interfaces the run's environment names that this node lacks: gloo opens every name its
    variable lists; NCCL needs one interface matching one of its prefixes."""
    found = []
    for variable, names in interface_names(env).items():
        if variable == "GLOO_SOCKET_IFNAME":
            missing = [name for name in names if name not in present]
        else:
            matches = [name for name in names
                       if any(p == name[1:] if name.startswith("=") else p.startswith(name) for p in present)]
            missing = [] if matches else names
        if missing:
            found.append(problem("interfaces", f"{variable}={','.join(names)}: no interface {', '.join(missing)} "
                                               f"on this node; its interfaces are {', '.join(present)}"))
    return found


def fast_root_problems(plan: Plan, env=None) -> list[dict]:
    """The fast root (as this node resolves it) is writable and has room for what the run puts there."""
    fast = fast_root(plan.roots.tmp_shared, env)
    where = run_dir(fast.path, plan.run)
    try:
        where.mkdir(parents=True, exist_ok=True)
        probe = where / f".health-{socket.gethostname()}-{os.getpid()}"
        with open(probe, "wb") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
        free = shutil.disk_usage(where).free
    except OSError as e:
        return [problem("fast_root", f"{fast.path} ({fast.source}) is not writable: {e.strerror or e}")]
    need = room_needed(plan, staged=(where / "data").is_dir())
    if free < need:
        return [problem("fast_root", f"{fast.path} ({fast.source}) has {human_bytes(free)} free; the run needs "
                                     f"{human_bytes(need)} (its data and checkpoint.keep + 1 checkpoints)")]
    return []


def room_needed(plan: Plan, staged: bool) -> int:
    """Bytes the run writes to the fast root: the dataset (unless a copy is there already; its size from the
    plan, else from a listing of it: a dataset the workflow prepared had none at plan time) and keep + 1
    checkpoints (of the plan's estimate; none known for a script, a CPU run or what the meta device could not
    estimate)."""
    data, size = 0, (plan.dataset_size or {}).get("bytes")
    if not staged and plan.dataset is not None:
        if size is not None:
            data = int(size)
        elif Path(plan.dataset).is_dir():
            data = sum(n for n, _ in scan(Path(plan.dataset)).values())
    checkpoint = int((plan.memory_estimate or {}).get("checkpoint_bytes") or 0)
    return data + (plan.config.checkpoint.keep + 1) * checkpoint


def durable_root_problems(plan: Plan, seconds: float = ANSWER_S) -> list[dict]:
    """The durable root answers: a listing of it returns (a hung mount would block the run's every save).
    Where it is not made yet (a run that prepares nothing there), its nearest folder that exists answers."""
    root = Path(plan.roots.scratch)

    def listing():
        where = root
        while not where.exists() and where != where.parent:
            where = where.parent
        return os.listdir(where)
    try:
        within(seconds, listing)
    except (OSError, TimeoutError) as e:
        return [problem("durable_root", f"{root} does not answer: {e}")]
    return []


def gpu_problems(expected: int, env=None, seconds: float = ANSWER_S) -> list[dict]:
    """The GPUs this node's task sees: as many as SLURM was asked for, each answering a small matmul,
    and NVML's memory error counters clean."""
    env = os.environ if env is None else env
    try:
        import torch
        count = torch.cuda.device_count()
    except Exception as e:
        return [problem("gpus", f"CUDA is not usable: {e}")]
    if count != expected:
        return [problem("gpus", f"{count} GPU{'s' if count != 1 else ''} visible, the plan asked for {expected} "
                                f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', '')})")]
    found = []
    for index in range(count):
        try:
            within(seconds, lambda: answer(index))
        except Exception as e:
            found.append(problem("gpus", f"GPU {index} did not answer a small computation: {e}"))
    return found + memory_error_problems(count)


def answer(index: int) -> None:
    import torch
    x = torch.ones(256, 256, device=f"cuda:{index}")
    if float((x @ x).sum().item()) != 256.0 ** 3:
        raise RuntimeError("a wrong result")


def memory_error_problems(count: int, nvml=None) -> list[dict]:
    """NVML's verdict on each GPU's memory: pending page retirements or row remappings (the GPU needs a
    reset), a failed remapping, or uncorrectable ECC errors since the driver loaded. A counter the GPU does
    not have is skipped; without NVML, nothing is said."""
    import torch
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception:
        return []
    found = []
    for index in range(count):
        try:
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:
            continue
        found += [problem("gpu_memory", f"GPU {index}: {reason}") for reason in gpu_memory_reasons(nvml, handle)]
    return found


def gpu_memory_reasons(nvml, handle) -> list[str]:
    """What NVML says is wrong with one GPU's memory ([]: nothing)."""
    reasons = []

    def read(fn, *args):
        try:
            return fn(handle, *args)
        except Exception:   # NVML_ERROR_NOT_SUPPORTED and the like: this GPU has no such counter
            return None
    remapped = read(nvml.nvmlDeviceGetRemappedRows)   # (corrected, uncorrected, pending, failed)
    if remapped and remapped[2]:
        reasons.append("a row remapping is pending (the GPU needs a reset)")
    if remapped and remapped[3]:
        reasons.append("a row remapping failed")
    pending = read(nvml.nvmlDeviceGetRetiredPagesPendingStatus)
    if pending:
        reasons.append("retired pages are pending (the GPU needs a reset)")
    uncorrected = read(nvml.nvmlDeviceGetTotalEccErrors, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                       nvml.NVML_VOLATILE_ECC)
    if uncorrected:
        reasons.append(f"{uncorrected} uncorrectable ECC error{'s' if uncorrected > 1 else ''} since the driver loaded")
    return reasons


def check_node(plan: Plan, env=None) -> dict:
    """This node's report: {host, ok, seconds, problems, interfaces}."""
    env = os.environ if env is None else env
    t0 = time.perf_counter()
    present = sorted(name for _, name in socket.if_nameindex())
    problems = interface_problems(env, present) + fast_root_problems(plan, env) + durable_root_problems(plan)
    if plan.device == "cuda":
        problems += gpu_problems(plan.nproc_per_node, env)
    return {"host": socket.gethostname(), "ok": not problems, "seconds": round(time.perf_counter() - t0, 3),
            "problems": problems, "interfaces": present}
