# airetrain: config -> plan -> stage -> train -> promote -> report.
# Each run's stage, train and promote share one SLURM allocation (group run_<name>),
# because the fast root ($TMP_SHARED) is purged when the job ends.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/stage.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/promote.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        get_final_outputs(),
    default_target: True
