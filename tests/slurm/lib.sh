# shellcheck shell=bash disable=SC2034
# Shared settings and helpers for start.sh / stop.sh. Sourced, not executed.
# Everything the test cluster owns lives under $STATE.

STATE="${SOMA_SLURM_STATE:-/tmp/soma-slurm}"
CLUSTER_NAME="${SOMA_SLURM_CLUSTER:-soma}"
PARTITION="${SOMA_SLURM_PARTITION:-debug}"
ACCOUNT="${SOMA_SLURM_ACCOUNT:-soma}"
DB_PORT="${SOMA_SLURM_DB_PORT:-3307}"          # our private mariadbd (not 3306)
CTLD_PORT="${SOMA_SLURM_CTLD_PORT:-6817}"
SLURMD_PORT="${SOMA_SLURM_SLURMD_PORT:-6818}"
DBD_PORT="${SOMA_SLURM_DBD_PORT:-6819}"

ETC="$STATE/etc"
RUN="$STATE/run"
LOG="$STATE/log"
SPOOL="$STATE/spool"
MUNGE_DIR="$STATE/munge"
MUNGE_SOCKET="$MUNGE_DIR/munge.socket"
MUNGE_KEY="$MUNGE_DIR/munge.key"
DB_DIR="$STATE/mariadb"
DB_DATA="$DB_DIR/data"
DB_SOCKET="$DB_DIR/mariadb.sock"
DB_USER="slurm"
DB_PASS="soma-slurm-test"   # local throw-away DB bound to 127.0.0.1 only

export SLURM_CONF="$ETC/slurm.conf"

# Daemons in stop order (reverse of start order).
DAEMONS_STOP_ORDER="slurmd slurmctld slurmdbd mariadbd munged"

log() { printf '[soma-slurm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# alive NAME: true if $RUN/NAME.pid names a live (not zombie/dead) process
# whose comm is NAME. A zombie or a recycled pid counts as not alive.
pid_of() { [ -s "$RUN/$1.pid" ] && tr -dc '0-9' <"$RUN/$1.pid"; }
pid_alive() { # pid_alive PID NAME
    local pid=$1 name=$2 stat state comm
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    # field 2 is "(comm)", which may contain spaces; state follows the last ')'
    state=${stat##*) }; state=${state%% *}
    case "$state" in Z|X|x) return 1 ;; esac
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [ "$comm" = "$name" ]
}
alive() { pid_alive "$(pid_of "$1")" "$1"; }

# wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.5 s
wait_for() {
    local secs=$1 what=$2; shift 2
    local deadline=$(( $(date +%s) + secs ))
    until "$@" >/dev/null 2>&1; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "timed out after ${secs}s waiting for: $what"
            return 1
        fi
        sleep 0.5
    done
}
