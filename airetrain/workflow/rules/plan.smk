# The memory estimate behind `strategy: auto` imports torch and builds the run's model (user code
# included): a step of its own, so a slow or failing model is an ordinary failed job with a log.
rule plan:
    output:
        "results/{run}/plan.json",
    params:
        # Not derived from output: Snakemake reruns a run whose plan changed by comparing the params
        # that are not derived from input or output.
        cmd=lambda w: command(
            "resolve",
            python=PYTHON,
            plan_json=json.dumps(to_dict(PLANS[w.run]), sort_keys=True),
            out=run_paths(w.run)["plan"],
        ),
    log:
        "logs/{run}/plan.log",
    localrule: True
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} > {log:q} 2>&1"
