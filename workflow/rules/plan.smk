# The memory estimate behind `strategy: auto` imports torch and builds the run's model (user code
# included): a step of its own, so a slow or failing model is an ordinary failed job with a log.
rule plan:
    output:
        "results/{run}/plan.json",
    params:
        cmd=lambda w, output: command(
            "resolve", python=PYTHON, plan_json=json.dumps(PLANS[w.run], sort_keys=True), out=output[0]
        ),
    log:
        "logs/{run}/plan.log",
    localrule: True
    conda:
        "../../envs/aire.yaml"
    shell:
        "{params.cmd} > {log:q} 2>&1"
