if PREPARED_DATASETS:

    rule prepare:
        output:
            directory("{dataset}"),
        params:
            cmd=lambda w, output: command(
                "prepare", python=PYTHON, name=PREPARED_DATASETS[output[0]], dataset=output[0]
            ),
        log:
            "logs/prepare{dataset}.log",
        localrule: True
        wildcard_constraints:
            dataset="|".join(map(re.escape, PREPARED_DATASETS)),
        conda:
            "../envs/aire.yaml"
        shell:
            "{params.cmd} > {log:q} 2>&1"


rule stage:
    wildcard_constraints:
        run=UNPACKED_RUN,
    input:
        plan="results/{run}/plan.json",
        health=get_health,
        data=get_dataset,
    output:
        "results/{run}/stage.json",
    params:
        cmd=lambda w, input, output: command("stage", python=PYTHON, plan=input.plan, out=output[0]),
    log:
        "logs/{run}/stage.log",
    benchmark:
        "results/{run}/benchmarks/stage.tsv"
    group:
        "run_{run}"
    resources:
        runtime=minutes("stage"),
        # the group's job asks for its members' largest memory: the profile's default (4000 MB)
        # would otherwise be the floor of every run's request
        mem_mb=lambda w: slurm(w, "mem_mb"),
        slurm_partition=partition,
        slurm_account=account,
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} > {log:q} 2>&1"
