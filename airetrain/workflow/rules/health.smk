# The first step of a run's job: every node checked before staging (one task per node, its own srun
# like the train rule's). A node that fails is left out: the job requeues itself without it.
rule health:
    wildcard_constraints:
        run=UNPACKED_RUN,
    input:
        plan="results/{run}/plan.json",
    output:
        "results/{run}/health.json",
    params:
        cmd=lambda w, input, output: command("health", python=PYTHON, plan=input.plan, out=output[0]),
    log:
        "logs/{run}/health.log",
    group:
        "run_{run}"
    resources:
        # seconds, within the stage step's minutes: the group's time limit is the plan's
        runtime=0,
        mem_mb=lambda w: slurm(w, "mem_mb"),
        slurm_partition=partition,
        slurm_account=account,
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} >> {log:q} 2>&1"
