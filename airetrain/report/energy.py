"""Each job's energy (kWh) and emissions (kg CO2e), with where the figure comes from.

    measured, node   SLURM's energy TRES (sacct TRESUsageInTot energy=, joules), where the site's
                     acct_gather_energy plugin records it: every node's energy, the job's steps summed
    measured, GPU    the trainer's NVML energy counter over the session, every rank's GPU summed
                     (train.json gpu_energy_j): the GPUs' energy alone, and said so
    estimated        the Green Algorithms method (Lannelongue, Grealey and Inouye, Adv. Sci. 2021) from what
                     sacct records: cores x power per core x CPU usage + GPUs x board power x GPU use +
                     requested memory x power per GB, times the hours and the data centre's PUE

Both are energy at the data centre: the measured figure is multiplied by the PUE as the estimate is.
CO2e = energy x the grid's carbon intensity. The constants are site.energy settings (the config
schema documents their defaults and sources), so the figures can be worked by hand. A GPU the table
(hardware.py) does not know has no board power: such a job gets no estimate, never a guessed one.
"""
from __future__ import annotations

from ..cluster.hardware import gpu_facts

# the defaults of site.energy, and where they come from
DEFAULTS = {
    "cpu_core_w": 12.0,          # Green Algorithms' default power per core (W)
    "memory_w_per_gb": 0.3725,   # Green Algorithms: power per GB of memory (W)
    "pue": 1.67,                 # Green Algorithms' default PUE: the global average data centre (Uptime Institute)
    "carbon_g_per_kwh": 124.0,   # GB grid, 2024 annual average (National Energy System Operator)
}


def job_energy(job: dict, energy: dict | None = None, gpu_use: float | None = None) -> dict:
    """{energy_kwh, co2e_kg, energy_source} of one job's figures (report/jobs.py's Job.figures, with gpu_type
    where known). gpu_use: the trainer's NVML mean utilisation (0-1); None: 1, as Green Algorithms assumes."""
    energy = {**DEFAULTS, **(energy or {})}
    hours = (job.get("elapsed_all_runs_s") or job.get("elapsed_s") or 0) / 3600
    if job.get("energy_j"):
        kwh = job["energy_j"] / 3.6e6 * energy["pue"]
        source = "measured, node (SLURM energy TRES) x PUE"
    elif job.get("gpu_energy_j"):
        kwh = job["gpu_energy_j"] / 3.6e6 * energy["pue"]
        source = "measured, GPUs only (NVML) x PUE"
    else:
        watts = _estimated_watts(job, energy, gpu_use)
        if watts is None:
            return {"energy_kwh": None, "co2e_kg": None,
                    "energy_source": f"unknown: no board power for GPU type {job.get('gpu_type') or '(not named)'}"}
        kwh = watts * hours * energy["pue"] / 1000
        source = "estimated (Green Algorithms)"
    return {"energy_kwh": float(f"{kwh:.4g}"), "co2e_kg": float(f"{kwh * energy['carbon_g_per_kwh'] / 1000:.4g}"),
            "energy_source": source}


def _estimated_watts(job: dict, energy: dict, gpu_use: float | None) -> float | None:
    """The job's mean power draw by Green Algorithms' terms, W; None where a GPU's board power is not known."""
    cores, usage = job.get("cpus") or 0, job.get("cpu_eff")
    watts = cores * energy["cpu_core_w"] * (usage if usage is not None else 1.0)
    watts += (job.get("mem_alloc_mb") or 0) / 1024 * energy["memory_w_per_gb"]
    if job.get("gpus"):
        facts = gpu_facts(job.get("gpu_type"))
        if not facts or not facts["tdp_w"]:
            return None
        watts += job["gpus"] * facts["tdp_w"] * (gpu_use if gpu_use is not None else 1.0)
    return watts
