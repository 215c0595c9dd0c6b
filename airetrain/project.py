"""`airetrain init [DIR]`: a project of the user's own, which uses the installed workflow as a Snakemake
module, so the project's repository holds only the project's files and upgrading airetrain is a pip install.

Nothing is overwritten: every file that exists already is named and nothing is written.
"""
from __future__ import annotations

import re
from pathlib import Path

from .errors import ConfigError
from .profiles import ACCOUNT_NAME as SLURM_NAME, NAMES, built_in, with_account

SNAKEFILE = '''\
# The airetrain workflow, installed with the package (`airetrain workflow-path` shows where), used as a
# Snakemake module: your repository holds your configs, code and results; `pip install -U airetrain`
# upgrades the workflow.
from airetrain.workflow import snakefile


configfile: "config/config.yaml"


module airetrain:
    snakefile:
        snakefile()
    config:
        config


use rule * from airetrain
'''

GITIGNORE = "results/\nlogs/\n.snakemake/\n.airetrain/\n"

CONFIG = '''\
# One run, described completely under `defaults:`; each entry of `runs:` names a run and changes only
# what differs from the defaults. Every key, its default and its allowed values: airetrain's
# docs/configuration.md. `airetrain plan` checks this file and prints what each run will ask for.
defaults:
{layout}
  precision: bf16                             # bf16 autocast (fp32 on CPUs without fast bf16)
{training}
  batch: {{global: {batch}, per_device: 32}}{pad}# global = per_device x devices x accumulation steps
  time_min: {{stage: 5, train: 15, promote: 5}}  # the SLURM time limit of each step, in minutes
  # slurm: {{account: my-account}}              # else $SBATCH_ACCOUNT, else the profile's slurm_account

runs:
  first: {{}}
  # second: {{optim: {{lr: 1e-3}}}}               # a second run: only what differs
'''

BUILT_IN = '''\
  model: {name: small_cnn, width: 32}         # or your own: {name: mypackage.models:build}
  data: {name: digits, path: datasets/digits} # a built-in dataset, prepared once; or {name: npy, path: ...}
  optim: {name: adamw, lr: 3e-3}
  train: {epochs: 5, seed: 0, log_every_steps: 10}'''

SCRIPT = '''\
  data: {{name: synthetic}}                     # nothing to stage; {{name: npy, path: DIR}}: staged for you
  train: {{script: {script}, args: [--epochs, "5"]}}  # run as torchrun runs it, $AIRETRAIN_DATA_DIR and all set
  params: {{lr: 1.0e-2}}                          # your script's own values: job.params()'''
# The script init writes where there is none: a complete DDP script that trains as it is.
SCRIPT_TEMPLATE = Path(__file__).parent / "workflow" / "templates" / "ddp_script.py"

README = '''\
# {name}

A training project run by airetrain (`airetrain --help`): your configs in
`config/`, your code beside them, results in `results/`. Check the plan, train on this machine, then on Aire:

```bash
airetrain plan                                  # every run's layout and SLURM request; refusals name the key
snakemake --cores 2                             # here: CPU processes (gloo), or this machine's GPUs
snakemake --profile profiles/aire               # on Aire's login node: one SLURM job per run
```

Then `airetrain status` shows where every run is, and `results/report/` holds the efficiency and results
tables (`efficiency.html`, `results.md`). `profiles/aire/profile.yaml` names the SLURM account.
'''


def layout(gpus: int | None, per_node: int = 3) -> str:
    """per_node: the GPUs of a node (site:, else Aire's)."""
    if gpus:
        return (f"  gpus: {gpus}                                     # the run's GPUs: up to {per_node} on one node, "
                f"more in whole nodes ({2 * per_node}, {3 * per_node}, ...)")
    return ("  gpus: 0                                     # 0: CPU processes; on Aire 1-3 per node, e.g. 3\n"
            "  processes: 2                                # with gpus: 0, this many CPU processes (gloo)")


def site_section(partition: str, site: dict, missing: list[str]) -> str:
    """The config's site: as SLURM gave it for the partition, and the runs' partition."""
    import yaml

    lines = [f"# The site's facts, read from SLURM's partition {partition} by `airetrain init --partition "
             f"{partition}` (`airetrain site` reads them again)", *(f"# not found: {m}" for m in missing)]
    return "\n" + "\n".join(lines) + "\n" + yaml.safe_dump({"site": site}, sort_keys=False)


def files(directory: Path, script: str | None, gpus: int | None, account: str | None,
          partition: str | None = None, site: tuple[dict, list[str]] | None = None) -> dict[Path, str]:
    """What init writes, by path. partition and site: the runs' partition and what SLURM said of it."""
    training = SCRIPT.format(script=script) if script else BUILT_IN
    aire, local = with_account(built_in("aire"), account), built_in("local")
    per_node = site[0].get("gpus_per_node", 3) if site else 3
    config = CONFIG.format(layout=layout(gpus, per_node), training=training, **_batch(gpus))
    if script:   # the script chooses its batch and precision, and reads its params
        config = re.sub(r"  precision: .*\n", "", config)
        config = re.sub(r"  batch: .*\n", "  # batch: the script's own (--batch-size); args naming "
                        "$AIRETRAIN_BATCH_PER_DEVICE get airetrain's, checked\n", config)
        config = config.replace("# second: {optim: {lr: 1e-3}}", "# second: {params: {lr: 1.0e-3}}")
    if partition:
        config = config.replace("  # slurm: {account: my-account}", f"  slurm: {{partition: {partition}}}"
                                "                # account: else $SBATCH_ACCOUNT, else the profile's")
        config += site_section(partition, *site) if site else ""
    found = {
        "Snakefile": SNAKEFILE,
        "config/config.yaml": config,
        ".gitignore": GITIGNORE,
        "README.md": README.format(name=directory.absolute().name),
        **{f"profiles/aire/{name}": aire for name in NAMES},
        **{f"profiles/local/{name}": local for name in NAMES},
        **({script: SCRIPT_TEMPLATE.read_text()} if script and not (directory / script).exists() else {}),
    }
    return {directory / path: text for path, text in found.items()}


def _batch(gpus: int | None) -> dict:
    """One batch of 32 per device and no accumulation: valid for any layout (CPU: 2 processes)."""
    batch = str(32 * (gpus or 2))
    return {"batch": batch, "pad": " " * (11 - len(batch))}


def init(directory: str | Path = ".", script: str | None = None, gpus: int | None = None,
         account: str | None = None, partition: str | None = None) -> list[Path]:
    """Write the project's files into directory (made if missing); refuse if any of them exists. partition: the
    runs' SLURM partition, whose facts SLURM gives for the config's site:."""
    directory = Path(directory)
    if gpus is not None and gpus < 0:
        raise ConfigError(f"--gpus {gpus}: give 0 (CPU processes) or more")
    site = None
    if partition is not None:
        if not SLURM_NAME.match(partition):   # it reaches the config, then sbatch
            raise ConfigError(f"--partition {partition!r}: a SLURM name is letters, digits, '_', '.' and '-'")
        from .cluster.site_facts import read_site

        facts, missing, _, _ = read_site(partition)
        if not facts:
            raise ConfigError(f"--partition {partition}: {missing[0]}; run init on the cluster's login node")
        site = (facts, missing)
    written = files(directory, script, gpus, account, partition, site)
    if existing := [str(p) for p in written if p.exists() or p.is_symlink()]:
        raise ConfigError(f"init writes nothing over existing files; move these away first: "
                          f"{', '.join(existing)}")
    for path, text in written.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(written)
