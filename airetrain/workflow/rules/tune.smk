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


# A search that packs (plan/packing.py: wave_size) goes in waves: the slots of a group take each step
# together, as one study step, and the rungs it decided train side by side in one allocation, as a pack's
# runs do (rules/pack.smk). Each slot's chain of steps is what it would be unpacked.
checkpoint tune_wave:
    input:
        plan="results/{tune}/plan.json",
        trained=previous_wave,
    output:
        "results/{tune}/tune/group{group}/wave{wave}.json",
    params:
        cmd=lambda w, input, output: command(
            "tune_wave",
            python=PYTHON,
            plan=input.plan,
            settings_json=SETTINGS_JSON,
            group=w.group,
            index=w.wave,
            out=output[0],
        ),
    log:
        "logs/{tune}/tune/group{group}-wave{wave}.log",
    localrule: True
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} > {log:q} 2>&1"


rule tune_wave_train:
    input:
        wave="results/{tune}/tune/group{group}/wave{wave}.json",
        plans=lambda w: [run_paths(rung)["plan"] for rung in wave_rungs(w)],
        data=lambda w: dataset_of(w.tune),
    output:
        "results/{tune}/tune/group{group}/wave{wave}.trained",
    log:
        "logs/{tune}/tune/group{group}-wave{wave}-pack.log",
    threads: lambda w: wave_request(w)["tasks"] * wave_request(w)["cpus_per_task"]
    resources:
        runtime=lambda w: wave_request(w)["minutes"],
        nodes=1,
        tasks=lambda w: wave_request(w)["tasks"],
        tasks_per_gpu=0,
        cpus_per_task=lambda w: wave_request(w)["cpus_per_task"],
        mem_mb=lambda w: wave_request(w)["mem_mb"],
        gres=lambda w: f"gpu:{wave_request(w)['gpus']}",
        slurm_partition=lambda w: PLANS[w.tune].slurm.partition,
        slurm_account=lambda w: run_account(w.tune),
        slurm_extra=lambda w: after_training(wave_rungs(w)),
        qos=lambda w: PLANS[w.tune].slurm.qos,
        # as a run's: the executor's MPI checks refuse one task, which the empty value also runs unwrapped
        mpi=lambda w: "srun" if wave_request(w)["tasks"] > 1 else "",
    params:
        cmd=lambda w: run_pack_command(wave_rungs(w)),
    conda:
        "../envs/aire.yaml"
    shell:
        "{params.cmd} >> {log:q} 2>&1 && touch {output:q}"


# a group's waves listed, once the group is done (as tune_slot)
rule tune_group:
    input:
        group_waves,
    output:
        "results/{tune}/tune/group{group}.txt",
    log:
        "logs/{tune}/tune/group{group}.log",
    localrule: True
    conda:
        "../envs/aire.yaml"
    shell:
        "printf '%s\\n' {input:q} > {output:q} 2> {log:q}"
