"""sacct text for made-up jobs, for tests and benchmarks of the report's folding at scale (not shipped:
production code never needs invented accounting)."""
import random


def synthetic(n_jobs: int, seed: int = 0) -> str:
    """sacct text for n_jobs made-up jobs (batch step + one srun step each; every 10th requeued once),
    with known figures: for benchmarks and tests of the folding at scale."""
    rng = random.Random(seed)
    lines = []
    for i in range(n_jobs):
        job = str(100000 + i)
        cpus, nodes, gpus = rng.choice([(8, 1, 1), (24, 1, 3), (48, 2, 6)])
        elapsed, cpu = rng.randint(60, 7200), 0.0
        runs = 2 if i % 10 == 0 else 1
        for run in range(runs):
            cpu = elapsed * cpus * rng.uniform(0.1, 0.9)
            state = "REQUEUED" if run < runs - 1 else "COMPLETED"
            alloc = f"billing={cpus},cpu={cpus},gres/gpu={gpus},mem={nodes * 64}G,node={nodes}"
            lines.append("|".join([job, job, f"run{i}", state, "0:0", "2026-11-29T10:00:00", _hms(elapsed),
                                   "02:00:00", _hms(cpu), str(cpus), f"{nodes * 64}G", str(nodes), "", "", alloc,
                                   "", ""]))
            for step, share in (("batch", 0.05), ("0", 0.95)):
                mem_k = int(rng.uniform(1, 60) * 2 ** 20)
                lines.append("|".join([f"{job}.{step}", f"{job}.{step}", step, "COMPLETED", "0:0", "",
                                       _hms(elapsed), "", _hms(cpu * share), str(cpus), "", str(nodes),
                                       str(nodes), f"{mem_k}K", alloc, f"cpu={_hms(cpu * share)},mem={mem_k * nodes}K",
                                       f"cpu={_hms(cpu * share)},mem={mem_k}K,gres/gpuutil={rng.randint(10, 99)}"]))
    return "\n".join(lines) + "\n"


def _hms(s: float) -> str:
    whole = int(s)
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}.{int((s - whole) * 1000):03d}"
