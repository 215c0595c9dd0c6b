"""energy.py through the report's fold: each job's energy and CO2e from sacct rows of known cores, usage,
memory, GPUs and time, the Green Algorithms formula worked by hand here; SLURM's measured energy where a row
carries it; and no figure for a GPU the table does not know."""
import pytest

from airetrain.report.energy import DEFAULTS, job_energy
from airetrain.report.collection import jobs_rows

ALLOC = "{id}|{id}|{name}|COMPLETED|0:0|2026-12-01T10:00:00|{elapsed}|02:00:00|{cpu}|{cores}|{mem}|1|||{tres}||\n"
STEP = ("{id}.batch|{id}.batch|batch|COMPLETED|0:0|2026-12-01T10:00:00|{elapsed}||{cpu}|{cores}||1|1|1G|{tres}|"
        "cpu={cpu},energy={energy},mem=1G|cpu={cpu},mem=1G\n")


def sacct(id, name, elapsed, cpu, cores, mem, tres, energy=0, extern_energy=0) -> str:
    fields = dict(id=id, name=name, elapsed=elapsed, cpu=cpu, cores=cores, mem=mem, tres=tres, energy=energy)
    text = ALLOC.format(**fields) + STEP.format(**fields)
    if extern_energy:   # the extern step spans the whole allocation
        text += STEP.format(**{**fields, "energy": extern_energy, "cpu": "00:00:00"}).replace(".batch", ".extern")
    return text


def by_run(text: str, energy=None) -> dict:
    rows, _ = jobs_rows(text=text, energy=energy)
    return {row["run"]: row for row in rows}


def test_the_estimate_is_green_algorithms_formula_worked_by_hand():
    rows = by_run(sacct(101, "cpujob", "01:00:00", "02:00:00", 4, "8G", "billing=4,cpu=4,mem=8G,node=1")
                  + sacct(102, "gpujob", "00:30:00", "00:30:00", 8, "64G",
                          "billing=8,cpu=8,gres/gpu:l40s=2,gres/gpu=2,mem=64G,node=1"))
    # 4 cores x 12 W x usage 0.5 (2 h of CPU over 1 h x 4 cores) + 8 GB x 0.3725 W, for 1 h, x PUE 1.67
    cpu = (4 * 12 * 0.5 + 8 * 0.3725) * 1.0 * 1.67 / 1000
    assert rows["cpujob"]["energy_kwh"] == pytest.approx(cpu, rel=1e-3)
    assert rows["cpujob"]["co2e_kg"] == pytest.approx(cpu * 124 / 1000, rel=1e-3)
    assert rows["cpujob"]["energy_source"] == "estimated (Green Algorithms)"
    # 8 cores x 12 W x 0.125 + 64 GB x 0.3725 W + 2 L40S x 350 W (the table's board power) x use 1, for 0.5 h
    gpu = (8 * 12 * 0.125 + 64 * 0.3725 + 2 * 350) * 0.5 * 1.67 / 1000
    assert rows["gpujob"]["energy_kwh"] == pytest.approx(gpu, rel=1e-3)
    assert rows["gpujob"]["gpu_type"] == "l40s"


def test_the_sites_constants_are_used_and_a_gpus_measured_use_scales_its_term():
    text = sacct(101, "cpujob", "01:00:00", "02:00:00", 4, "8G", "billing=4,cpu=4,mem=8G,node=1")
    row = by_run(text, {"pue": 1.0, "carbon_g_per_kwh": 200.0})["cpujob"]
    assert row["energy_kwh"] == pytest.approx((4 * 12 * 0.5 + 8 * 0.3725) / 1000, rel=1e-3)
    assert row["co2e_kg"] == pytest.approx(row["energy_kwh"] * 0.2, rel=1e-3)
    job = {"elapsed_s": 3600, "cpus": 0, "mem_alloc_mb": 0, "gpus": 1, "gpu_type": "NVIDIA H100 80GB HBM3"}
    assert job_energy(job, {"pue": 1.0}, gpu_use=0.5)["energy_kwh"] == pytest.approx(0.35)   # 700 W x 0.5 x 1 h


def test_slurms_measured_energy_is_used_where_a_row_carries_it():
    rows = by_run(sacct(103, "measured", "01:00:00", "01:00:00", 4, "8G", "billing=4,cpu=4,mem=8G,node=1",
                        energy=1800000, extern_energy=3600000))
    row = rows["measured"]
    assert row["energy_source"] == "measured, node (SLURM energy TRES) x PUE"
    assert row["energy_kwh"] == pytest.approx(1.0 * DEFAULTS["pue"])   # the extern step's 3.6 MJ: 1 kWh


def test_a_gpu_the_table_does_not_know_gets_no_figure_never_a_guess():
    rows = by_run(sacct(104, "other", "01:00:00", "01:00:00", 4, "8G",
                        "billing=4,cpu=4,gres/gpu:mi300x=1,gres/gpu=1,mem=8G,node=1"))
    row = rows["other"]
    assert row["energy_kwh"] is None and row["co2e_kg"] is None
    assert row["energy_source"] == "unknown: no board power for GPU type mi300x"


def test_the_defaults_are_the_schemas():
    from airetrain.plan.config import defaults_from_schema, load_schema

    assert defaults_from_schema(load_schema())["site"]["energy"] == DEFAULTS


def test_the_trainers_nvml_energy_is_used_where_slurm_measures_none_and_said_to_be_the_gpus_alone():
    """A train.json's gpu_energy_j (synthetic here: NVML's counter needs a GPU, which the device check reads)."""
    job = {"elapsed_s": 3600, "cpus": 4, "cpu_eff": 0.5, "mem_alloc_mb": 8192, "gpus": 1, "gpu_type": "l40s",
           "gpu_energy_j": 1.8e6}
    assert job_energy(job, {"pue": 1.0}) == {"energy_kwh": 0.5, "co2e_kg": 0.062,
                                             "energy_source": "measured, GPUs only (NVML) x PUE"}
    assert job_energy({**job, "energy_j": 3.6e6}, {"pue": 1.0})["energy_source"].startswith("measured, node")
