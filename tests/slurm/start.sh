#!/usr/bin/env bash
# Install (if needed) and start a one-node Slurm cluster with accounting on
# localhost, then wait until it is usable. Idempotent: daemons that are
# already running are left alone. Needs root; needs no systemd.
# State (configs, pids, logs, spool, munge, mariadb): ${SOMA_SLURM_STATE:-/tmp/soma-slurm}
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

T0=$(date +%s)
[ "$(id -u)" = 0 ] || die "must run as root"
mkdir -p "$ETC" "$RUN" "$LOG" "$SPOOL/ctld" "$SPOOL/d" "$MUNGE_DIR" "$DB_DIR"

# ---------------------------------------------------------------- packages
PKGS="munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins slurmdbd slurm-wlm-mysql-plugin mariadb-server mariadb-client"
missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    log "installing:$missing"
    # Keep the packages' maintainer scripts from starting system services.
    made_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    if ! apt-get install -y -q --no-install-recommends $missing >"$LOG/apt.log" 2>&1; then
        log "apt-get install failed; running apt-get update and retrying"
        apt-get update -q >>"$LOG/apt.log" 2>&1 || true
        # shellcheck disable=SC2086
        apt-get install -y -q --no-install-recommends $missing >>"$LOG/apt.log" 2>&1 \
            || { tail -n 30 "$LOG/apt.log" >&2; die "apt-get install failed (log: $LOG/apt.log)"; }
    fi
    if [ -n "$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
    log "packages installed ($(( $(date +%s) - T0 ))s)"
fi

chmod 755 "$STATE"
chmod 700 "$MUNGE_DIR"

# start_daemon NAME CMD...: run CMD in the foreground in its own session,
# detached from our stdio, and record its pid in $RUN/NAME.pid.
start_daemon() {
    local name=$1; shift
    setsid "$@" </dev/null >>"$LOG/$name.out" 2>&1 &
    echo $! >"$RUN/$name.pid"
}
fail_with_log() { # fail_with_log NAME LOGFILE MESSAGE
    [ -f "$2" ] && { log "--- last lines of $2"; tail -n 25 "$2" >&2; }
    [ -f "$LOG/$1.out" ] && { log "--- last lines of $LOG/$1.out"; tail -n 10 "$LOG/$1.out" >&2; }
    die "$3"
}

# ---------------------------------------------------------------- munge
[ -s "$MUNGE_KEY" ] || dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
chmod 600 "$MUNGE_KEY"
munge_ok() { munge -n --socket="$MUNGE_SOCKET" | unmunge --socket="$MUNGE_SOCKET"; }
if ! alive munged; then
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    start_daemon munged munged --foreground --force \
        --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" \
        --pid-file="$RUN/munged.daemon.pid" --log-file="$LOG/munged.log" \
        --seed-file="$MUNGE_DIR/munged.seed"
    log "started munged (pid $(pid_of munged))"
fi
wait_for 30 munge munge_ok || fail_with_log munged "$LOG/munged.log" "munged not working"

# ---------------------------------------------------------------- mariadb
if [ ! -d "$DB_DATA/mysql" ]; then
    log "initialising mariadb datadir $DB_DATA"
    rm -rf "$DB_DATA"
    mariadb-install-db --no-defaults --user=root --datadir="$DB_DATA" \
        --auth-root-authentication-method=normal --skip-test-db \
        >"$LOG/mariadb-install-db.log" 2>&1 \
        || fail_with_log mariadbd "$LOG/mariadb-install-db.log" "mariadb-install-db failed"
fi
db_ping() { mariadb-admin --no-defaults --socket="$DB_SOCKET" -uroot ping; }
if ! alive mariadbd; then
    start_daemon mariadbd mariadbd --no-defaults --user=root \
        --datadir="$DB_DATA" --socket="$DB_SOCKET" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --skip-name-resolve \
        --pid-file="$RUN/mariadbd.daemon.pid" --log-error="$LOG/mariadbd.log" \
        --innodb-buffer-pool-size=256M --innodb-log-file-size=64M \
        --innodb-lock-wait-timeout=900 --max-connections=100
    log "started mariadbd (pid $(pid_of mariadbd))"
fi
wait_for 60 mariadb db_ping || fail_with_log mariadbd "$LOG/mariadbd.log" "mariadbd not answering"
mariadb --no-defaults --socket="$DB_SOCKET" -uroot <<SQL || die "could not create DB user"
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO '$DB_USER'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO '$DB_USER'@'localhost';
SQL

# ---------------------------------------------------------------- configs
HOST=$(hostname -s)
# Node shape as slurmd itself sees it, e.g.
# "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
NODE_LINE=$(slurmd -C | head -n 1)
getkv() { printf '%s\n' "$NODE_LINE" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
CPUS=$(getkv CPUs); SOCKETS=$(getkv SocketsPerBoard); CORES=$(getkv CoresPerSocket)
THREADS=$(getkv ThreadsPerCore); MEM=$(getkv RealMemory)
{ [ -n "$CPUS" ] && [ -n "$MEM" ]; } || die "could not parse 'slurmd -C': $NODE_LINE"
# Leave headroom: 1 GiB or 10%, whichever is larger.
HEAD=$(( MEM / 10 > 1024 ? MEM / 10 : 1024 ))
REALMEM=$(( MEM > HEAD + 512 ? MEM - HEAD : MEM / 2 ))
DEFMEM=$(( REALMEM / CPUS < 1024 ? REALMEM / CPUS : 1024 ))

write_if_changed() { # write_if_changed FILE MODE  (content on stdin)
    local tmp; tmp=$(mktemp "$1.XXXXXX")
    cat >"$tmp"; chmod "$2" "$tmp"
    if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv -f "$tmp" "$1"; fi
}

write_if_changed "$ETC/slurm.conf" 644 <<EOF
# soma test cluster - generated by tests/slurm/start.sh; do not edit.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=$RUN/slurmctld.daemon.pid
SlurmdPidFile=$RUN/slurmd.daemon.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$DEFMEM
EnforcePartLimits=ALL
# Keep finished jobs visible to squeue/scontrol for 10 minutes.
MinJobAge=600
KillWait=5
InactiveLimit=0
Waittime=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
# With slurmdbd this names the munge socket used to talk to it (default would be /run/munge).
AccountingStoragePass=$MUNGE_SOCKET
JobCompType=jobcomp/none
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS Sockets=$SOCKETS CoresPerSocket=$CORES ThreadsPerCore=$THREADS RealMemory=$REALMEM State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF

write_if_changed "$ETC/slurmdbd.conf" 600 <<EOF
# soma test cluster - generated by tests/slurm/start.sh; do not edit.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=$HOST
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.daemon.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF

# Plain `sbatch`/`sacct`/... (as the snakemake slurm plugin runs them) read
# /etc/slurm/slurm.conf unless SLURM_CONF is set: point it at our config,
# unless somebody else's real config is there.
mkdir -p /etc/slurm
for f in slurm.conf slurmdbd.conf; do
    if [ -L "/etc/slurm/$f" ] || [ ! -e "/etc/slurm/$f" ]; then
        ln -sfn "$ETC/$f" "/etc/slurm/$f"
    else
        log "WARNING: /etc/slurm/$f is not ours; callers must export SLURM_CONF=$ETC/slurm.conf (source tests/slurm/env.sh)"
    fi
done

# ---------------------------------------------------------------- slurmdbd
if ! alive slurmdbd; then
    start_daemon slurmdbd slurmdbd -D
    log "started slurmdbd (pid $(pid_of slurmdbd))"
fi
wait_for 60 slurmdbd sacctmgr -n show cluster \
    || fail_with_log slurmdbd "$LOG/slurmdbd.log" "slurmdbd not answering"

# Register cluster, account and root user (root gets the account as default,
# so tools that ask sacctmgr for the user's default account find one).
has() { [ -n "$(sacctmgr -n -P "$@" 2>/dev/null)" ]; }
has show cluster "$CLUSTER_NAME" format=cluster || sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
has show account "$ACCOUNT" format=account || \
    sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER_NAME" description="soma tests" organization=soma >/dev/null
has show assoc where user=root account="$ACCOUNT" cluster="$CLUSTER_NAME" format=user || \
    sacctmgr -i add user root account="$ACCOUNT" cluster="$CLUSTER_NAME" defaultaccount="$ACCOUNT" >/dev/null
sacctmgr -i modify user root set defaultaccount="$ACCOUNT" >/dev/null 2>&1 || true

# ---------------------------------------------------------------- slurmctld
if ! alive slurmctld; then
    start_daemon slurmctld slurmctld -D
    log "started slurmctld (pid $(pid_of slurmctld))"
fi
ctld_up() { scontrol ping | grep -q 'is UP'; }
wait_for 60 slurmctld ctld_up || fail_with_log slurmctld "$LOG/slurmctld.log" "slurmctld not answering"

# ---------------------------------------------------------------- slurmd
if ! alive slurmd; then
    start_daemon slurmd slurmd -D -N "$HOST"
    log "started slurmd (pid $(pid_of slurmd))"
fi
node_state() { sinfo -h -n "$HOST" -o '%T' 2>/dev/null | head -n 1; }
node_idle() {
    case "$(node_state)" in
        idle|mixed|allocated|completing) return 0 ;;
        down*|drain*|fail*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1; return 1 ;;
        *) return 1 ;;
    esac
}
wait_for 60 "node $HOST idle" node_idle \
    || fail_with_log slurmd "$LOG/slurmd.log" "node $HOST not idle (state: $(node_state))"
wait_for 30 sacct sacct -n -X -S now-1hours -o JobID \
    || fail_with_log slurmdbd "$LOG/slurmdbd.log" "sacct not answering"

log "cluster '$CLUSTER_NAME' up: partition=$PARTITION node=$HOST cpus=$CPUS mem=${REALMEM}M state=$STATE ($(( $(date +%s) - T0 ))s)"
