#!/usr/bin/env bash
# Start a real SLURM 22.05 test cluster on this one Debian machine (as root), for the test suite.
#
#   labgpu1, labgpu2  partition gpu: 24 CPUs, 256000 MB, gres gpu:l40s:3 (device files are /dev/null links)
#   labgpu3           the same, a third GPU node: with the other two in partition gpu3 alone, so that the health
#                     tests can leave a node out and still run 2 nodes, while partition gpu keeps two
#   labcpu1           partition standard (default)
# with munged, MariaDB + slurmdbd (accounting: sacct works), slurmctld and one slurmd per node.
# Each slurmd runs in its own UTS + mount namespace: its own hostname, and /etc/slurm and /etc/hosts
# bind-mounted from the state directory, so jobs find the config without $SLURM_CONF (the Snakemake
# jobstep plugin strips SLURM_*) and node names resolve (torchrun's c10d rendezvous needs that).
#
# $S/nodetmp/local is node-local inside jobs (each node bind-mounts its own $S/nodetmp/<node> there):
# point TMPDIR at it to emulate Aire's node-local $TMPDIR. Or let the site set it, as Aire does: a job
# whose environment has AIRETRAIN_LAB_JOB_TMPDIR=1 gets TMPDIR=$S/nodetmp/local/job.<id> from the
# TaskProlog on every node, and the Epilog deletes that directory when the job ends (Aire purges
# /tmp/job.<id>). Other jobs are left alone.
# Another site's shape (Aire's is the default), for that site's own tests: AIRETRAIN_SLURM_GPU_TYPE=a100
# AIRETRAIN_SLURM_GPUS_PER_NODE=4 AIRETRAIN_SLURM_GPU_PARTITION=gpu-a100 AIRETRAIN_SLURM_QOS_GPU_CAP=8 (a QoS
# gpulimits capping GPUs per user, enforced), with AIRETRAIN_SLURM_NODE_PREFIX=site (sitegpu1, ...: its
# nodes' names and cgroups apart from the default cluster's), its own state, AIRETRAIN_SLURM_PORT and
# AIRETRAIN_SLURM_FIRST_JOB_ID. The suite's second Aire-shaped cluster is made the same way (tests/conftest.py).
# Idempotent; everything lives in $AIRETRAIN_SLURM_STATE (default tests/slurm/state).
# Clients: source "$AIRETRAIN_SLURM_STATE/env.sh". Stop with down.sh (by pid files only).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
S="${AIRETRAIN_SLURM_STATE:-$HERE/state}"
CTLD_PORT=${AIRETRAIN_SLURM_PORT:-6917}
DBD_PORT=$((CTLD_PORT + 2))
NODE_PORT=$((CTLD_PORT + 13))
DB_PORT=$((CTLD_PORT - 3601))   # 3316 by default
# Short credential lifetime: a requeued job restarts after about this long (SLURM's default is 120 s).
CRED_EXPIRE=${AIRETRAIN_SLURM_CRED_EXPIRE:-10}
GPU_TYPE=${AIRETRAIN_SLURM_GPU_TYPE:-l40s}
GPUS=${AIRETRAIN_SLURM_GPUS_PER_NODE:-3}
GPU_PARTITION=${AIRETRAIN_SLURM_GPU_PARTITION:-gpu}
QOS_GPU_CAP=${AIRETRAIN_SLURM_QOS_GPU_CAP:-}
P=${AIRETRAIN_SLURM_NODE_PREFIX:-lab}
CLUSTER=${AIRETRAIN_SLURM_CLUSTER:-airetrain}
# A cluster beside another counts its job ids from elsewhere: a run's rendezvous port comes from its job id
# (10000 + id % 20000), and two clusters' jobs on one machine must not meet on a port.
FIRST_JOB_ID=${AIRETRAIN_SLURM_FIRST_JOB_ID:-1}
PACKAGES=(slurmctld slurmd slurm-client slurmdbd slurm-wlm-mysql-plugin munge mariadb-server)

say() { printf '[slurm-up %(%T)T] %s\n' -1 "$*" >&2; }
fail() { say "ERROR: $*"; exit 1; }
running() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null && grep -qa -- "$2" "/proc/$(cat "$1")/cmdline"; }
wait_until() {  # wait_until SECONDS WHAT COMMAND...
  local limit=$((SECONDS + $1)) what=$2; shift 2
  until timeout 10 "$@" >/dev/null 2>&1; do
    ((SECONDS < limit)) || fail "gave up after $limit s waiting for $what"
    sleep 0.3
  done
}

[[ $(id -u) == 0 ]] || fail "needs root (it starts daemons as the slurm, munge and mysql users)"

missing=()
for p in "${PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
unshare --uts --mount -- true 2>/dev/null || fail "unshare --uts --mount is not permitted here: nodes cannot get their own hostnames"

mkdir -p "$S"/{etc,run,log,spool/ctld,gpu,munge,db,db-run}
NODES=("${P}gpu1" "${P}gpu2" "${P}gpu3" "${P}cpu1")
for n in "${NODES[@]}"; do mkdir -p "$S/spool/$n" "$S/nodetmp/$n"; done
mkdir -p "$S/nodetmp/local"
chmod 755 "$S" "$S"/{etc,run,log,spool,gpu}
chown slurm:slurm "$S/spool/ctld" "$S/log" "$S/run"
chown munge:munge "$S/munge"; chmod 755 "$S/munge"
chown mysql:mysql "$S/db" "$S/db-run"
for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$S/gpu/nvidia$i"; done   # a GRES needs a device file; /dev/null stats as one

# cgroup v1 memory + freezer: memory limits enforced and OUT_OF_MEMORY recorded, as on a real cluster
CGROUP=0
if [[ -d /sys/fs/cgroup/memory && -d /sys/fs/cgroup/freezer ]] && mkdir /sys/fs/cgroup/memory/airetrain_probe 2>/dev/null; then
  rmdir /sys/fs/cgroup/memory/airetrain_probe; CGROUP=1
fi

HOST=$(hostname -s)
NODE="CPUs=24 Boards=1 SocketsPerBoard=2 CoresPerSocket=12 ThreadsPerCore=1 RealMemory=256000"
cat >"$S/etc/slurm.conf" <<CONF
ClusterName=$CLUSTER
FirstJobId=$FIRST_JOB_ID
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$NODE_PORT
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/munge.socket,cred_expire=$CRED_EXPIRE
MailProg=/bin/true
StateSaveLocation=$S/spool/ctld
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
$( ((CGROUP)) && printf 'ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup' || printf 'ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none')
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$S/munge/munge.socket
AccountingStorageTRES=gres/gpu,gres/gpu:$GPU_TYPE
$([[ -n $QOS_GPU_CAP ]] && echo "AccountingStorageEnforce=associations,limits,qos")
SchedulerType=sched/backfill
# a test cluster of three nodes: look at pending jobs (a requeued one, one whose nodes came free) every
# 2 s instead of SLURM's 60 s and 30 s, so that no test waits on the scheduler's clock
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
GresTypes=gpu
# a 2-core test machine advertises Aire-sized nodes
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=10
MinJobAge=3600
SlurmdTimeout=60
JobRequeue=1
TaskProlog=$S/etc/task_prolog.sh
Epilog=$S/etc/epilog.sh
NodeName=${P}gpu1 NodeHostname=${P}gpu1 NodeAddr=127.0.2.1 Port=$((NODE_PORT + 1)) $NODE Gres=gpu:$GPU_TYPE:$GPUS
NodeName=${P}gpu2 NodeHostname=${P}gpu2 NodeAddr=127.0.2.2 Port=$((NODE_PORT + 2)) $NODE Gres=gpu:$GPU_TYPE:$GPUS
NodeName=${P}cpu1 NodeHostname=${P}cpu1 NodeAddr=127.0.3.1 Port=$((NODE_PORT + 3)) $NODE
NodeName=${P}gpu3 NodeHostname=${P}gpu3 NodeAddr=127.0.2.3 Port=$((NODE_PORT + 4)) $NODE Gres=gpu:$GPU_TYPE:$GPUS
PartitionName=standard Nodes=${P}cpu1 Default=YES MaxTime=2-00:00:00 State=UP
PartitionName=$GPU_PARTITION Nodes=${P}gpu1,${P}gpu2 MaxTime=2-00:00:00 State=UP
PartitionName=gpu3 Nodes=${P}gpu1,${P}gpu2,${P}gpu3 MaxTime=2-00:00:00 State=UP
CONF
cat >"$S/etc/task_prolog.sh" <<PROLOG
#!/bin/sh
# Aire's per-job \$TMPDIR, for jobs that ask for it (runs as the job's user, in its environment)
[ "\$AIRETRAIN_LAB_JOB_TMPDIR" = 1 ] || exit 0
dir="$S/nodetmp/local/job.\$SLURM_JOB_ID"
mkdir -p "\$dir" && echo "export TMPDIR=\$dir"
PROLOG
cat >"$S/etc/epilog.sh" <<EPILOG
#!/bin/sh
# the job's \$TMPDIR is purged when it ends, on every node (runs as root after each job)
rm -rf "$S/nodetmp/local/job.\$SLURM_JOB_ID"
exit 0
EPILOG
chmod 755 "$S/etc/task_prolog.sh" "$S/etc/epilog.sh"
printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainRAMSpace=yes\nConstrainSwapSpace=yes\nAllowedSwapSpace=0\n' >"$S/etc/cgroup.conf"
echo "NodeName=${P}gpu[1-3] Name=gpu Type=$GPU_TYPE File=$S/gpu/nvidia[0-$((GPUS - 1))]" >"$S/etc/gres.conf"
cat >"$S/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.socket
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=slurm
LogFile=$S/log/slurmdbd.log
PidFile=$S/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=airetrain
StorageLoc=slurm_acct_db
CONF
chown slurm:slurm "$S/etc/slurmdbd.conf"; chmod 600 "$S/etc/slurmdbd.conf"
cat >"$S/etc/my.cnf" <<CONF
[mysqld]
datadir=$S/db
socket=$S/db-run/mysqld.sock
pid-file=$S/db-run/mysqld.pid
log-error=$S/db-run/mysqld.log
port=$DB_PORT
bind-address=127.0.0.1
user=mysql
innodb_buffer_pool_size=256M
CONF
{ grep -v " $P\(gpu\|cpu\)[0-9]\$" /etc/hosts; printf "127.0.2.1 ${P}gpu1\n127.0.2.2 ${P}gpu2\n127.0.2.3 ${P}gpu3\n127.0.3.1 ${P}cpu1\n"; } >"$S/etc/hosts"
echo "export SLURM_CONF=$S/etc/slurm.conf" >"$S/env.sh"
export SLURM_CONF=$S/etc/slurm.conf

[[ -s $S/etc/munge.key ]] || head -c 1024 /dev/urandom >"$S/etc/munge.key"
chown munge:munge "$S/etc/munge.key"; chmod 400 "$S/etc/munge.key"
if ! running "$S/munge/munged.pid" munged; then
  say "munged"
  runuser -u munge -- /usr/sbin/munged --socket="$S/munge/munge.socket" --key-file="$S/etc/munge.key" \
    --pid-file="$S/munge/munged.pid" --log-file="$S/munge/munged.log" --seed-file="$S/munge/munged.seed"
fi
wait_until 20 munged bash -c "munge -S '$S/munge/munge.socket' -n | unmunge -S '$S/munge/munge.socket'"

[[ -d $S/db/mysql ]] || mariadb-install-db --defaults-file="$S/etc/my.cnf" --skip-test-db >"$S/log/db-install.log" 2>&1
if ! running "$S/db-run/mysqld.pid" mariadbd; then
  say "mariadbd"
  setsid /usr/sbin/mariadbd --defaults-file="$S/etc/my.cnf" </dev/null >>"$S/db-run/mysqld.log" 2>&1 &
fi
wait_until 60 mariadbd mariadb-admin --defaults-file="$S/etc/my.cnf" --socket="$S/db-run/mysqld.sock" ping
mariadb --defaults-file="$S/etc/my.cnf" --socket="$S/db-run/mysqld.sock" -e "
  CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'airetrain';
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'airetrain';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

if ! running "$S/run/slurmdbd.pid" slurmdbd; then say "slurmdbd"; /usr/sbin/slurmdbd; fi
wait_until 60 slurmdbd sacctmgr -n show cluster
sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
sacctmgr -n -P show account format=account | grep -qx lab || sacctmgr -i add account lab Description=tests Organization=tests >/dev/null
sacctmgr -n -P show assoc where account=lab user=root format=user | grep -qx root || sacctmgr -i add user root Account=lab >/dev/null
# a second account of root's besides its default (lab), so that a test can see a profile's account reach a job
sacctmgr -n -P show account format=account | grep -qx lab_project || sacctmgr -i add account lab_project Description=tests Organization=tests >/dev/null
sacctmgr -n -P show assoc where account=lab_project user=root format=user | grep -qx root || sacctmgr -i add user root Account=lab_project >/dev/null
# a second QoS besides "normal", so that a test can see slurm.qos reach a job
sacctmgr -n -P show qos format=name | grep -qx lab_high || sacctmgr -i add qos lab_high >/dev/null
sacctmgr -n -P show assoc where account=lab user=root format=qos | grep -q lab_high \
  || sacctmgr -i modify user root set qos+=lab_high >/dev/null

if ! running "$S/run/slurmctld.pid" slurmctld; then say "slurmctld"; /usr/sbin/slurmctld -f "$SLURM_CONF"; fi
wait_until 60 slurmctld bash -c 'scontrol ping | grep -q UP'
if [[ -n $QOS_GPU_CAP ]]; then   # the site's GPU cap per user: a QoS gpulimits, root's default, enforced
  sacctmgr -n -P show qos format=name | grep -qx gpulimits || sacctmgr -i add qos gpulimits >/dev/null
  for _ in $(seq 30); do
    sacctmgr -i modify qos gpulimits set MaxTRESPerUser=gres/gpu="$QOS_GPU_CAP" >/dev/null 2>&1 && break
    sleep 1
  done
  sacctmgr -n -P show qos gpulimits format=MaxTRESPU | grep -q "gres/gpu=$QOS_GPU_CAP" || fail "the QoS gpulimits cap did not take"
  sacctmgr -i modify user root set qos+=gpulimits defaultqos=gpulimits >/dev/null
fi

for n in "${NODES[@]}"; do
  running "$S/run/slurmd-$n.pid" slurmd && continue
  say "slurmd $n"
  # $S/nodetmp/local is node-local storage: each node sees its own directory there (like $TMPDIR on Aire)
  AIRETRAIN_SLURM_STATE="$S" bash "$HERE/slurmd.sh" "$n"
done

limit=$((SECONDS + 90)); resumed=0
while :; do
  states=$(sinfo -h -N -o '%N %T' | sort -u)
  [[ $(grep -c ' idle$' <<<"$states") == "${#NODES[@]}" ]] && break
  if ((!resumed && SECONDS > limit - 80)) && grep -qE 'down|drain' <<<"$states"; then   # left down by an earlier run
    for n in $(awk '/down|drain/ {print $1}' <<<"$states"); do scontrol update NodeName="$n" State=RESUME || true; done
    resumed=1
  fi
  ((SECONDS < limit)) || { echo "$states" >&2; fail "nodes not idle after 90 s"; }
  sleep 0.5
done
say "up: source $S/env.sh"
