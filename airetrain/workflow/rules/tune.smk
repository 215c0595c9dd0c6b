# A tuned run's search (tune:): `parallel` slots, each a chain of study steps. Each step is a checkpoint:
# what comes next (the same trial's next rung, a new trial, or nothing) is known only once it has run,
# on the submitting side, the one process that opens the study. A rung is a run of its own,
# <tune>-t<NNN>-e<epochs>, planned, staged, trained and promoted by the rules every run has.


checkpoint tune_step:
    input:
        plan="results/{tune}/plan.json",
        rung=previous_rung,
    output:
        "results/{tune}/tune/slot{slot}/step{step}.json",
    params:
        cmd=lambda w, input, output: command(
            "tune_step",
            python=PYTHON,
            plan=input.plan,
            settings_json=SETTINGS_JSON,
            slot=w.slot,
            index=w.step,
            out=output[0],
        ),
    log:
        "logs/{tune}/tune/slot{slot}-step{step}.log",
    localrule: True
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} > {log:q} 2>&1"


# a slot's steps listed, once the slot is done: its own target, so that the slots go on side by side
rule tune_slot:
    input:
        slot_steps,
    output:
        "results/{tune}/tune/slot{slot}.txt",
    log:
        "logs/{tune}/tune/slot{slot}.log",
    localrule: True
    conda:
        "../envs/aire.yaml"
    shell:
        "printf '%s\\n' {input:q} > {output:q} 2> {log:q}"


rule tune_table:
    input:
        plan="results/{tune}/plan.json",
        slots=every_slot,
    output:
        csv="results/{tune}/tune.csv",
        md="results/{tune}/tune.md",
        html="results/{tune}/tune.html",
    params:
        cmd=lambda w, input, output: command(
            "tune_table", python=PYTHON, plan=input.plan, out=os.path.dirname(output.csv)
        ),
    log:
        "logs/{tune}/tune/table.log",
    localrule: True
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} > {log:q} 2>&1"
