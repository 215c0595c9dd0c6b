rule promote:
    input:
        plan="results/{run}/plan.json",
        train="results/{run}/train.json",
    output:
        checkpoint="results/{run}/checkpoint.json",
        manifest="results/{run}/manifest.json",
    params:
        python=PYTHON,
        workflow=workflow.basedir,
    log:
        "logs/{run}/promote.log",
    benchmark:
        "results/{run}/benchmarks/promote.tsv"
    group:
        "run_{run}"
    resources:
        runtime=minutes("promote"),
        slurm_partition=partition,
        slurm_account=account,
    conda:
        "../../envs/aire.yaml"
    shell:
        "{params.python:q} -m airetrain promote --plan {input.plan:q} --train {input.train:q} --out {output.checkpoint:q} "
        "--manifest {output.manifest:q} --workflow-dir {params.workflow:q} > {log:q} 2>&1"
