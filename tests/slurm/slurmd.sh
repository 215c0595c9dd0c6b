#!/usr/bin/env bash
# Start the slurmd of one test-cluster node (up.sh starts every one; a test that killed one, as a
# node that died, starts it again): in its own UTS + mount namespace, with its hostname, /etc/slurm
# and /etc/hosts bind-mounted from the state directory, and its node-local $S/nodetmp/<node> at
# $S/nodetmp/local.   Usage: slurmd.sh NODE
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
S="${AIRETRAIN_SLURM_STATE:-$HERE/state}"
unshare --uts --mount --propagation private -- sh -ec '
  hostname "$1"; mount --bind "$2/etc" /etc/slurm; mount --bind "$2/etc/hosts" /etc/hosts
  mount --bind "$2/nodetmp/$1" "$2/nodetmp/local"
  exec /usr/sbin/slurmd -f "$2/etc/slurm.conf" -N "$1"' _ "$1" "$S"
