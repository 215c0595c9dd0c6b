#!/usr/bin/env bash
# Stop the test cluster that up.sh started: cancel its jobs, then stop each daemon by its pid file.
# Keeps the state (accounting database, job history); AIRETRAIN_SLURM_WIPE=1 deletes it too.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
S="${AIRETRAIN_SLURM_STATE:-$HERE/state}"
[[ -d $S ]] || exit 0
export SLURM_CONF="$S/etc/slurm.conf"

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null && grep -qa -- "$2" "/proc/$(cat "$1")/cmdline"; }
stop() {  # stop PIDFILE NAME: TERM, wait up to 20 s, then KILL
  alive "$1" "$2" || return 0
  local pid; pid=$(cat "$1")
  kill -TERM "$pid"
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$1"
}

if alive "$S/run/slurmctld.pid" slurmctld; then
  jobs=$(timeout 10 squeue -h -o %A | tr '\n' ' ')
  if [[ -n ${jobs// /} ]]; then
    scancel $jobs
    for _ in $(seq 30); do [[ -z $(timeout 10 squeue -h -o %A) ]] && break; sleep 1; done
  fi
fi
for f in "$S"/run/slurmd-*.pid; do [[ -e $f ]] && stop "$f" slurmd & done
wait
stop "$S/run/slurmctld.pid" slurmctld
stop "$S/run/slurmdbd.pid" slurmdbd
stop "$S/db-run/mysqld.pid" mariadbd
stop "$S/munge/munged.pid" munged
for n in $(sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$S/etc/slurm.conf"); do
  for c in /sys/fs/cgroup/*/slurm_"$n"; do [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null; done
done
[[ ${AIRETRAIN_SLURM_WIPE:-0} == 1 ]] && rm -rf "$S"
exit 0
