#!/usr/bin/env bash
# ci/slurm/up.sh DIR: a one-node Slurm on 127.0.0.1 whose files all live in
# DIR (an empty or missing directory): munged on its own socket and key,
# slurmctld and slurmd in the foreground of their own processes, no systemd,
# no cgroups, no slurmdbd. Returns once the node is idle, so that a job can
# run; then `export SLURM_CONF=DIR/slurm.conf` points Slurm's commands at it.
# ci/slurm/down.sh DIR stops it. Needs root and Debian's slurmctld, slurmd,
# slurm-client and munge packages (Slurm 22.05 in Debian 12).
#
# The daemons' process ids are in DIR/pids (name pid, a line), their logs in
# DIR/log/. A daemon that does not come up within UP_TIMEOUT seconds (30)
# fails this script: it names the daemon, prints the end of its log and stops
# what it started.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
dir=$(cd "$1" && pwd)
timeout=${UP_TIMEOUT:-30}

[ "$(id -u)" = 0 ] || { echo "$0: run as root (slurmd starts jobs as their users)" >&2; exit 1; }
for bin in munged slurmctld slurmd slurmstepd scontrol sinfo; do
    command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] ||
        { echo "$0: no $bin here (apt-get install slurmctld slurmd slurm-client munge)" >&2; exit 1; }
done
[ ! -e "$dir/pids" ] || { echo "$0: $dir/pids exists: a Slurm from $dir may be running (ci/slurm/down.sh $dir)" >&2; exit 1; }
PATH=$PATH:/usr/sbin

mkdir -p "$dir"/{munge,state,spool,log}
chmod 700 "$dir" "$dir/munge"
: >"$dir/pids"

# fail WHAT LOG: says what did not come up, shows its log, stops the rest.
fail() {
    echo "$0: $1 did not come up within $timeout s; the end of $2:" >&2
    tail -n 20 "$2" >&2 || true
    "$here/down.sh" "$dir" >&2 || true
    exit 1
}
# wait_for WHAT LOG COMMAND...: polls COMMAND until it succeeds, up to $timeout s.
wait_for() {
    local what=$1 log=$2 end=$((SECONDS + timeout))
    shift 2
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || fail "$what" "$log"
        sleep 0.1
    done
}
# alive NAME: the daemon NAME recorded in pids still runs.
alive() { kill -0 "$(awk -v n="$1" '$1 == n { print $2 }' "$dir/pids")" 2>/dev/null; }

# munge: a key of our own and a socket of our own, so that a munged the
# system runs (or a stale key in /etc/munge) plays no part.
head -c 1024 /dev/urandom >"$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"
munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/socket" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/seed" --log-file="$dir/log/munged.log" \
    </dev/null >"$dir/log/munged.out" 2>&1 &
echo "munged $!" >>"$dir/pids"
wait_for munged "$dir/log/munged.log" test -S "$dir/munge/socket"

cat >"$dir/slurm.conf" <<CONF
# Written by ci/slurm/up.sh: one node, localhost, every file under $dir.
ClusterName=rctb-ci
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf

slurmctld -D -f "$SLURM_CONF" </dev/null >"$dir/log/slurmctld.out" 2>&1 &
echo "slurmctld $!" >>"$dir/pids"
ctld_up() { alive slurmctld && scontrol ping | grep -q 'is UP'; }
wait_for slurmctld "$dir/log/slurmctld.log" ctld_up

slurmd -D -f "$SLURM_CONF" -N localhost </dev/null >"$dir/log/slurmd.out" 2>&1 &
echo "slurmd $!" >>"$dir/pids"
node_idle() { alive slurmd && [ "$(sinfo -h -n localhost -o %T)" = idle ]; }
wait_for "slurmd (node localhost idle)" "$dir/log/slurmd.log" node_idle

echo "slurm up in $dir: export SLURM_CONF=$SLURM_CONF"
