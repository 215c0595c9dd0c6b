if DIGITS_DATASETS:

    rule prepare_digits:
        output:
            directory("{dataset}"),
        params:
            python=PYTHON,
        log:
            "logs/prepare{dataset}.log",
        localrule: True
        wildcard_constraints:
            dataset="|".join(map(re.escape, DIGITS_DATASETS)),
        conda:
            "../../envs/aire.yaml"
        shell:
            "{params.python:q} -m airetrain prepare {output:q} > {log:q} 2>&1"


rule stage:
    input:
        plan="results/{run}/plan.json",
        data=lambda w: PLANS[w.run]["dataset"] or [],
    output:
        "results/{run}/stage.json",
    params:
        python=PYTHON,
    log:
        "logs/{run}/stage.log",
    benchmark:
        "results/{run}/benchmarks/stage.tsv"
    group:
        "run_{run}"
    resources:
        runtime=minutes("stage"),
        slurm_partition=partition,
        slurm_account=account,
    conda:
        "../../envs/aire.yaml"
    shell:
        "{params.python:q} -m airetrain stage --plan {input.plan:q} --out {output:q} > {log:q} 2>&1"
