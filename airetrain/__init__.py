"""airetrain: PyTorch training from a config file to safe checkpoints and an efficiency report.

One subpackage per stage of the workflow's DAG, above shared modules that every stage may use
(tests/unit/test_layers.py holds the order, and that every package's docstring, as this one,
maps its modules):

    plan/            planning at parse time and in the plan step: config, sweeps, layouts, refusals
    health/          every node checked before staging, and the sick ones left out (ExcNodeList)
    stage/           the dataset written and staged onto the fast root
    train/           training under torchrun, its launch, and script mode
    checkpoint/      checkpoints saved, promoted to scratch and resumed
    report/          the efficiency report, the results table, `airetrain status`
    tune/            a search's Optuna study on the submitting side: its steps, its table
    tracking/        W&B and MLflow: the trainer's figures sent, one tracker run per run (shared: the trainer,
                     the promote step and `airetrain sync` use it)
    cluster/         SLURM, the site's facts, the GPU table, SLURM's formats (shared)
    rundir/          a run's durable directory: its logs, metric history, captured code, record (shared)
    workflow/        the Snakemake workflow, shipped in the package: Snakefile, rules, schema, profiles

The commands (they may import anything):
    cli              the `airetrain` command: it assembles the commands' parsers
    commands/        one module per command, or per family of them, each with its own add_parsers
    job              airetrain.job, for a user's own torchrun script: the deadline and requeue contract
    lightning        airetrain.lightning: the same contract as one Lightning callback
    hf               airetrain.hf: the same contract as one Hugging Face Trainer callback
    __main__         `python -m airetrain`

Shared (they import only each other):
    project          `airetrain init`: a project of the user's own
    profiles         the built-in Snakemake profiles (aire, local) and a profile's account
    restart          `airetrain restart`: what retraining a run from step 0 removes
    config_docs      docs/configuration.md from the schema and the built-in tables
    run_config       the config as typed records        schema        the config schema and its defaults
    records          the files between the steps        typed         typed records to and from JSON
    roots            where data lives (scratch, the fast root)
    sizing           requests sized from measurements (right-sizing and the advice)
    schedule         when to save and to evaluate, where a resume continues
    search_space     a tune's space, its trials' names, configs and rungs
    direction        which way an evaluation figure is better
    catalog          the built-in datasets               builtin_models  the built-in models and losses
    environment      each rank's environment variables
    dataset_trees    datasets on disk: listings, manifests
    shards           the shard format                   quota         the fast root's quotas
    fsutil           durable file operations             text          text for people
    errors           the one error users see
"""

__version__ = "0.1.0"
