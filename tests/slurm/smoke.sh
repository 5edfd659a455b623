#!/usr/bin/env bash
# Smoke test of the running test cluster: a batch job completes, srun runs
# 4 tasks on the node (with -O), scancel gives CANCELLED, all seen by sacct.
# Run after start.sh; exits non-zero on the first failure. Takes ~5-10 s.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$HERE/lib.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; cd "$work"

acct_state() { sacct -j "$1" -X -n -P -o State 2>/dev/null | head -n 1 | cut -d' ' -f1; }
state_is() { [ "$(acct_state "$1")" = "$2" ]; }

id=$(sbatch --parsable -p "$PARTITION" -A "$ACCOUNT" --mem=100 --wrap 'hostname')
wait_for 60 "job $id COMPLETED in sacct" state_is "$id" COMPLETED || die "sbatch job $id: $(acct_state "$id")"
log "sbatch --wrap hostname: job $id COMPLETED ($(cat "slurm-$id.out"))"

# shellcheck disable=SC2016  # expanded by the task, not here
out=$(timeout 60 srun -p "$PARTITION" -O -n 4 --mem=100 bash -c 'echo $SLURM_PROCID' | sort -n | tr '\n' ' ')
[ "$out" = "0 1 2 3 " ] || die "srun -O -n 4 printed: '$out'"
log "srun -O -n 4: ranks $out"

id=$(sbatch --parsable -p "$PARTITION" --mem=100 --wrap 'sleep 300')
wait_for 30 "job $id running" sh -c "[ \"\$(squeue -h -j $id -o %T)\" = RUNNING ]" || die "job $id did not start"
scancel "$id"
wait_for 60 "job $id CANCELLED in sacct" state_is "$id" CANCELLED || die "scancel job $id: $(acct_state "$id")"
log "scancel: job $id CANCELLED"
log "smoke test passed"
