"""The cluster as airetrain sees it (shared: every stage and command may use it):

    slurm        every call of SLURM's commands, through one runner; what a job asks of SLURM from inside
    site_facts   the site's facts read from SLURM, and where a config's site: disagrees
    hardware     the GPU table: each GPU's memory, peaks and board power
    units        SLURM's formats: sizes and durations
"""
