# Runs as a SLURM step of the group's allocation (resource mpi: the executor does not wrap
# it in `srun -n1`), so torchrun can span every node of the job. Locally it runs torchrun.
rule train:
    wildcard_constraints:
        run=UNPACKED_RUN,
    input:
        plan="results/{run}/plan.json",
        stage="results/{run}/stage.json",
        init=get_init,
    output:
        train="results/{run}/train.json",
        metrics="results/{run}/metrics.jsonl",
    log:
        "logs/{run}/train.log",
    benchmark:
        "results/{run}/benchmarks/train.tsv"
    group:
        "run_{run}"
    threads: lambda w: PLANS[w.run].cpus_per_node
    resources:
        runtime=minutes("train"),
        nodes=lambda w: slurm(w, "nodes"),
        tasks=lambda w: slurm(w, "tasks"),
        tasks_per_gpu=0,
        cpus_per_task=lambda w: slurm(w, "cpus_per_task"),
        mem_mb=train_mem_mb,
        gres=lambda w: slurm(w, "gres") or "",
        slurm_partition=partition,
        slurm_account=account,
        slurm_extra=train_extra,
        qos=lambda w: slurm(w, "qos"),  # None: not asked for, the account's default
        mpi=lambda w: slurm(w, "mpi"),
    params:
        cmd=lambda w, input, output: command(
            "launch",
            python=PYTHON,
            plan=input.plan,
            stage=input.stage,
            out=os.path.dirname(output.train),
            script=TRAIN_SCRIPT,
        ),
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} >> {log:q} 2>&1"
