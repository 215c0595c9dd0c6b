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
        from airetrain.plan import resolve_strategy

        write_json_atomic(output[0], resolve_strategy(params.plan))
