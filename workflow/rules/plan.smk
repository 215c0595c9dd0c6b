rule plan:
    output:
        "results/{run}/plan.json",
    params:
        plan=plan_of,
    log:
        "logs/{run}/plan.log",
    localrule: True
    run:
        from airetrain.fsutil import write_json_atomic

        write_json_atomic(output[0], params.plan)
