"""Snakemake, with the SLURM executor's status checks every few seconds: the test cluster's own, loaded by the
suite alone (tests/conftest.py's snakemake_cmd runs Snakemake through this file for --executor slurm).

The executor waits 10 s longer before its next `squeue` after every check that finds no job finished, up to
180 s (snakemake-executor-plugin-slurm 2.8, check_active_jobs). That is kind to a production controller, and
what users keep; on the test cluster it is most of the suite's time: a job that ends a minute after the last
check is seen a minute late, at every step of a chain. Here the interval stays at
--slurm-init-seconds-before-status-checks after every check.
"""
import sys

import snakemake_executor_plugin_slurm as slurm_plugin
from snakemake.cli import main

PLUGIN_EXECUTOR = slurm_plugin.Executor


class FastStatus(PLUGIN_EXECUTOR):
    async def check_active_jobs(self, active_jobs):
        async for job in super().check_active_jobs(active_jobs):
            yield job
        self.next_seconds_between_status_checks = getattr(self.workflow.executor_settings,
                                                          "init_seconds_before_status_checks", 40)


slurm_plugin.Executor = FastStatus   # before Snakemake's plugin registry reads the module

if __name__ == "__main__":
    sys.argv[0] = "snakemake"
    sys.exit(main())
