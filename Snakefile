# This checkout is a project like any other: it uses the workflow packaged in airetrain/workflow/ as a
# Snakemake module, as the Snakefile that `airetrain init` writes for your own project does.
configfile: "config/config.yaml"


module airetrain:
    snakefile:
        "airetrain/workflow/Snakefile"
    config:
        config


use rule * from airetrain
