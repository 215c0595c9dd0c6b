"""The `airetrain` commands, one module per command or family of them, each with its add_parsers(sub); cli.py
assembles them. Commands may import anything: each joins the stages below, which never import each other.

    planning           `airetrain plan` (with its forecast) and `airetrain sbatch`
    setup              `airetrain init`, `workflow-path`
    runs               `airetrain status`, `history`, `restart`, `sync`, `compare`
    pipeline_steps     what each rule runs: `resolve`, `prepare`, `pack`, `stage`, `launch`, `promote`
    pack_run           `airetrain run-pack`: the runs of one allocation side by side, the dataset staged once
    config_options     the config a command reads, as Snakemake reads it from the same words, and its plans
    resolve            the plan step's own work: files counted, user code tried, strategy decided
    submit             `airetrain submit`: the pipeline's Snakemake in a SLURM job of its own, requeued before its limit
    efficiency_report  `airetrain report`: the efficiency table of runs, or of any SLURM jobs (sacct started first)
    step_profile       `airetrain profile RUN`: where the profiled steps' time went (train.profile)
    tune_steps         the search's steps (`airetrain tune-step`, `tune-wave`, `tune-table`), its runs for status
    site               `airetrain site`: the site's facts read from SLURM
    node_check         `airetrain health`: the node check, the first step of a run's job
    doctor             `airetrain doctor`: what this environment can run
"""
