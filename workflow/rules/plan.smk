# The memory estimate behind `strategy: auto` imports torch and builds the run's model (user code
# included): a step of its own, so a slow or failing model is an ordinary failed job with a log.
rule plan:
    output:
        "results/{run}/plan.json",
    params:
        python=PYTHON,
        plan=lambda w: json.dumps(PLANS[w.run], sort_keys=True),
    log:
        "logs/{run}/plan.log",
    localrule: True
    conda:
        "../../envs/aire.yaml"
    shell:
        "{params.python:q} -m airetrain resolve --plan-json {params.plan:q} --out {output:q} > {log:q} 2>&1"
