rule promote:
    wildcard_constraints:
        run=UNPACKED_RUN,
    input:
        plan="results/{run}/plan.json",
        train="results/{run}/train.json",
    output:
        checkpoint="results/{run}/checkpoint.json",
        record="results/{run}/run.json",
    params:
        cmd=lambda w, input, output: command(
            "promote",
            python=PYTHON,
            plan=input.plan,
            train=input.train,
            out=output.checkpoint,
            record=output.record,
            project_dir=os.getcwd(),  # the project: the working directory
        ),
    log:
        "logs/{run}/promote.log",
    benchmark:
        "results/{run}/benchmarks/promote.tsv"
    group:
        "run_{run}"
    resources:
        runtime=minutes("promote"),
        # the group's job asks for its members' largest memory: the profile's default (4000 MB)
        # would otherwise be the floor of every run's request
        mem_mb=lambda w: slurm(w, "mem_mb"),
        slurm_partition=partition,
        slurm_account=account,
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} > {log:q} 2>&1"
