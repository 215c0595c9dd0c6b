# Runs packed into one allocation (plan/packing.py decides which; run key pack): one rule per pack,
# whose job stages the dataset once, trains every run at once, each in a SLURM step of its own
# (--exact, its own GPUs), and promotes each (`airetrain run-pack`). resource mpi: the executor runs
# the command as it is, not wrapped in `srun -n1`, so that each run's step gets its share.
for _pack, _members in PACKS.items():
    _plans = [PLANS[m] for m in _members]
    _request = pack_request(_plans)
    _first = _plans[0]

    rule:
        name:
            re.sub(r"[^A-Za-z0-9_]", "_", _pack)
        input:
            plans=[run_paths(m)["plan"] for m in _members],
            data=dataset_of(_members[0]),
        output:
            stage=[run_paths(m)["stage"] for m in _members],
            train=[run_paths(m)["train"] for m in _members],
            metrics=[run_paths(m)["metrics"] for m in _members],
            checkpoint=[run_paths(m)["checkpoint"] for m in _members],
            record=[run_paths(m)["record"] for m in _members],
        log:
            f"logs/{_pack}/pack.log",
        threads: _request["tasks"] * _request["cpus_per_task"]
        resources:
            runtime=_request["minutes"],
            nodes=1,
            tasks=_request["tasks"],
            tasks_per_gpu=0,
            cpus_per_task=_request["cpus_per_task"],
            mem_mb=_request["mem_mb"],
            gres=f"gpu:{_request['gpus']}",
            slurm_partition=_first.slurm.partition,
            slurm_account=run_account(_members[0]),
            slurm_extra=lambda w, members=_members: after_training(members),
            qos=lambda w, qos=_first.slurm.qos: qos,
            mpi="srun",
        params:
            cmd=run_pack_command(_members),
        conda:
            "../envs/aire.yaml"
        shell:
            "{params.cmd} >> {log:q} 2>&1"
