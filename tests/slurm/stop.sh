#!/usr/bin/env bash
# Stop what tests/slurm/start.sh started, by the pids it recorded in
# $SOMA_SLURM_STATE/run (default /tmp/soma-slurm/run). Never kills by name.
# Idempotent. `stop.sh --purge` also deletes the state directory.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

PURGE=""
pid_gone() { ! pid_alive "$1" "$2"; }
# Jobs are gone, and the node has finished tearing their steps down.
no_jobs() {
    [ -z "$(squeue -h -t PD,R,CG,S,CF -o %i 2>/dev/null)" ] || return 1
    case "$(sinfo -h -N -o %T 2>/dev/null | sort -u | tr '\n' ' ')" in
        *alloc*|*mix*|*complet*) return 1 ;;
    esac
}
[ "${1:-}" = "--purge" ] && PURGE=1

if [ -d "$RUN" ]; then
    # Cancel jobs first so their slurmstepd processes exit with them.
    if alive slurmctld && command -v squeue >/dev/null; then
        jobs=$(squeue -h -t PD,R,CG,S -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086
            log "cancelling jobs: $(printf "%s " $jobs)"
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            wait_for 30 "jobs to end" no_jobs || true
        fi
    fi

    for name in $DAEMONS_STOP_ORDER; do
        pid=$(pid_of "$name" || true)
        if pid_alive "$pid" "$name"; then
            log "stopping $name (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            if ! wait_for 30 "$name to exit" pid_gone "$pid" "$name"; then
                log "$name did not exit on TERM; sending KILL"
                kill -KILL "$pid" 2>/dev/null || true
                wait_for 10 "$name to die" pid_gone "$pid" "$name" \
                    || die "$name (pid $pid) still alive"
            fi
        fi
        rm -f "$RUN/$name.pid" "$RUN/$name.daemon.pid"
    done
fi

left=""
for name in $DAEMONS_STOP_ORDER; do
    if alive "$name"; then left="$left $name"; fi
done
[ -z "$left" ] || die "still running:$left"

# The links start.sh made in /etc/slurm go with the cluster: left pointing at a stopped
# controller, every `scontrol` waits out its 10 s timeout, and Snakemake's Slurm plugin runs
# `scontrol show config` as it is imported, so every snakemake start (the workflow tests',
# a user's) would wait 9 s for nothing. start.sh makes them again.
for f in slurm.conf slurmdbd.conf; do
    if [ "$(readlink "/etc/slurm/$f" 2>/dev/null)" = "$ETC/$f" ]; then rm -f "/etc/slurm/$f"; fi
done
if [ -n "$PURGE" ]; then
    rm -rf "$STATE"
    log "stopped; removed $STATE"
else
    log "stopped (state kept in $STATE)"
fi
