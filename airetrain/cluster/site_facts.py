"""The site's facts read from SLURM itself (`airetrain site`), and where a config's `site:` disagrees with them.

    read_site(partition, qos)   ({site key: value} SLURM gives for a partition, [what it could not find], ...)
    fast_root_note()            inside a job: a sentence naming its fast root, and whether its nodes share it
    disagreements(site, read)   the config's site: keys that differ from what SLURM says

From scontrol show partition (its nodes, MaxTime and QoS), scontrol show node (each node's CPUTot, RealMemory
and gpu gres: the smallest node counts, as a job must fit any of them), and sacctmgr: the GPU limits of the
job's QoS, the partition's QoS and the user's association, the one that binds (gpu_cap). The fast root is
told from the environment where this runs inside a job ($TMP_SHARED, else $TMPDIR); on a login node it
cannot be told, and the list of what was not found says so.
"""
from __future__ import annotations

import os
import pwd
import re

from . import slurm
from .units import duration_s

SITE_KEYS = ("gpus_per_node", "gpu_type", "cores_per_node", "mem_gb_per_node", "max_wall_hours", "max_gpus_per_user")


def gpu_gres(gres: str) -> tuple[int, str | None]:
    """A node's gres ('gpu:l40s:3(S:0-1),shard:6') -> (its GPUs, their type or None)."""
    for item in re.split(r",(?![^(]*\))", gres or ""):
        parts = re.sub(r"\(.*\)", "", item).split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            return int(parts[-1]), parts[1] if len(parts) == 3 else None
    return 0, None


def read_site(partition: str | None = None, qos: str | None = None,
              env=None) -> tuple[dict, list[str], str | None, dict[str, str]]:
    """(the site facts SLURM gives for the partition (its default where None), what could not be found and
    why, the partition read, {fact: where it came from} where a fact has several possible sources)."""
    env = os.environ if env is None else env
    missing: list[str] = []
    sources: dict[str, str] = {}
    partition = partition or slurm.default_partition(env)
    text = slurm.query(["scontrol", "show", "partition", "-o", partition], env) if partition else None
    if not text:
        return {}, [f"SLURM does not answer here (scontrol show partition {partition or '(default)'})"], partition, {}
    part = slurm.key_values(text)
    site: dict = {}
    max_wall_s = duration_s(part.get("MaxTime")) if part.get("MaxTime") not in (None, "UNLIMITED") else None
    if max_wall_s:
        site["max_wall_hours"] = round(max_wall_s / 3600, 2)
    else:
        missing.append(f"max_wall_hours: partition {partition} has MaxTime={part.get('MaxTime')}")
    hosts = slurm.hostnames(part.get("Nodes", ""), env)
    nodes = [slurm.key_values(slurm.query(["scontrol", "show", "node", "-o", host], env) or "") for host in hosts]
    nodes = [n for n in nodes if n]
    if nodes:
        gres = [gpu_gres(n.get("Gres", "")) for n in nodes]
        site["gpus_per_node"] = min(count for count, _ in gres)
        kinds = {kind for count, kind in gres if count}
        site["gpu_type"] = kinds.pop() if len(kinds) == 1 else None
        if site["gpu_type"] is None and site["gpus_per_node"]:
            missing.append(f"gpu_type: the nodes' gres name {'several types' if kinds else 'no type'}")
        site["cores_per_node"] = min(int(n.get("CPUTot", 0)) for n in nodes)
        site["mem_gb_per_node"] = round(min(int(n.get("RealMemory", 0)) for n in nodes) / 1024, 1)
    else:
        missing.append(f"the nodes of partition {partition}: scontrol show node gave nothing")
    cap = gpu_cap(part.get("QoS"), qos, env)
    if cap is not None:
        site["max_gpus_per_user"], sources["max_gpus_per_user"] = cap
    else:
        missing.append(f"max_gpus_per_user: no gres/gpu limit in QoS {qos or '(your default)'}, partition "
                       f"{partition}'s QoS ({part.get('QoS', 'N/A')}) or your association (or accounting does not "
                       "answer)")
    if fast_root_note(env) is None:
        missing.append("the fast root: not told on a login node (srun -p PARTITION -t 1 airetrain site reads a "
                       "job's $TMP_SHARED or $TMPDIR)")
    return site, missing, partition, sources


def fast_root_note(env=None) -> str | None:
    """Inside a job, which folder is its fast root and how it is shared, told from the job's environment;
    None on a login node, where no job's folders exist."""
    env = os.environ if env is None else env
    if env.get("TMP_SHARED"):
        return f"$TMP_SHARED in this job ({env['TMP_SHARED']}), shared by the job's nodes: a run stages once"
    if env.get("SLURM_JOB_ID") and env.get("TMPDIR"):
        return f"$TMPDIR in this job ({env['TMPDIR']}), no $TMP_SHARED: each node stages its own copy"
    return None


def _gpu_limits(text: str, fields: tuple[str, ...]) -> list[tuple[int, str]]:
    """[(GPUs, field)] of sacctmgr's -P lines whose fields (in that order) set gres/gpu=N."""
    out = []
    for line in text.splitlines():
        for field, value in zip(fields, line.split("|")):
            if match := re.search(r"gres/gpu=(\d+)", value):
                out.append((int(match[1]), field))
    return out


def gpu_cap(partition_qos: str | None, qos: str | None, env) -> tuple[int, str] | None:
    """The GPUs a user may hold at once, as they bind a job submitted as the plan submits it (in the
    partition, under qos, else the user's default QoS), and where the binding limit is set: the smallest of
    the job's QoS and the partition's QoS (MaxTRESPerUser, and GrpTRES, which all users share) and the user's
    association (GrpTRES; MaxTRES, a job's). None where none of them limits GPUs."""
    # $USER is unset in some shells (a container's, cron's): the account database's name for this uid then
    user = env.get("USER") or env.get("LOGNAME") or pwd.getpwuid(os.getuid()).pw_name
    assoc = slurm.query(["sacctmgr", "-nP", "show", "assoc", "where", f"user={user}",
                         "format=DefaultQOS,GrpTRES,MaxTRES"], env) or ""
    qos = qos or next((line.split("|")[0] for line in assoc.splitlines() if line.split("|")[0]), "normal")
    found = [(n, f"your association's {field}") for n, field in _gpu_limits(assoc, ("DefaultQOS", "GrpTRES",
                                                                                    "MaxTRES"))]
    for name, whose in ((qos, f"QoS {qos} (the job's)"), (partition_qos, f"the partition's QoS {partition_qos}")):
        if name and name not in ("N/A", "(null)"):
            out = slurm.query(["sacctmgr", "-nP", "show", "qos", name, "format=MaxTRESPerUser,GrpTRES"], env) or ""
            found += [(n, f"{whose} {field}") for n, field in _gpu_limits(out, ("MaxTRESPerUser", "GrpTRES"))]
    return min(found) if found else None


def disagreements(site: dict, read: dict) -> list[str]:
    """'site.KEY = config value, SLURM says value' for each key both give that differ."""
    out = []
    for key in SITE_KEYS:
        if key in read and read[key] is not None and site.get(key) is not None and _differs(site[key], read[key]):
            out.append(f"site.{key} = {site[key]!r}, SLURM says {read[key]!r}")
    return out


def _differs(configured, read) -> bool:
    if isinstance(read, str) or isinstance(configured, str):
        return str(configured).lower() != str(read).lower()
    return abs(float(configured) - float(read)) > 0.02 * max(abs(float(read)), 1)
