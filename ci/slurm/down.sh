#!/usr/bin/env bash
# ci/slurm/down.sh DIR: stops the Slurm that ci/slurm/up.sh DIR started.
# Cancels its jobs first (their processes belong to slurmstepd, which
# outlives slurmd), then ends slurmd, slurmctld and munged by the process
# ids in DIR/pids: SIGTERM, then SIGKILL after DOWN_TIMEOUT seconds (10).
# Safe to run twice, or after a partial start; exits 1 when a daemon had to
# be killed or a job would not end.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
timeout=${DOWN_TIMEOUT:-10}
PATH=$PATH:/usr/sbin
[ -f "$dir/pids" ] || exit 0
status=0

pid_of() { awk -v n="$1" '$1 == n { print $2 }' "$dir/pids"; }
export SLURM_CONF=$dir/slurm.conf
ctld=$(pid_of slurmctld)
if [ -n "$ctld" ] && kill -0 "$ctld" 2>/dev/null; then
    jobs=$(squeue -h -o %i 2>/dev/null)
    if [ -n "$jobs" ]; then
        # shellcheck disable=SC2086 # one job id a word
        scancel $jobs
        end=$((SECONDS + timeout))
        while [ -n "$(squeue -h -o %i 2>/dev/null)" ]; do
            if [ "$SECONDS" -ge "$end" ]; then
                echo "$0: jobs still queued or running after scancel: $(squeue -h -o %i | tr '\n' ' ')" >&2
                status=1
                break
            fi
            sleep 0.1
        done
    fi
fi

# stop NAME...: SIGTERM to each, then waits for all of them (each takes
# about 2 s to shut down); SIGKILL to those still there after $timeout s.
stop() {
    local name pid pids=() end=$((SECONDS + timeout))
    for name in "$@"; do
        pid=$(pid_of "$name")
        if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then pids+=("$name:$pid"); fi
    done
    for name in "${pids[@]}"; do
        pid=${name#*:}
        while kill -0 "$pid" 2>/dev/null; do
            if [ "$SECONDS" -ge "$end" ]; then
                echo "$0: ${name%%:*} (pid $pid) ignored SIGTERM for $timeout s; killing it" >&2
                kill -KILL "$pid" 2>/dev/null
                status=1
                break
            fi
            sleep 0.1
        done
    done
}
# The Slurm daemons still use munged as they shut down: it goes last.
stop slurmd slurmctld
stop munged
rm -f "$dir/pids"
exit "$status"
