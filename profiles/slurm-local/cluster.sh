#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, for trying profiles/slurm-local and for the
# tests marked `slurm` (tests/slurm/). Debian's slurm-wlm and munge, run as root.
#
#   bash profiles/slurm-local/cluster.sh install   # apt-get install slurm-wlm munge (once)
#   bash profiles/slurm-local/cluster.sh start     # writes the config, starts the daemons
#   snakemake --workflow-profile profiles/slurm-local
#   bash profiles/slurm-local/cluster.sh stop
#
# The config is /etc/slurm/slurm.conf, where every SLURM command looks (Snakemake's SLURM
# jobstep drops SLURM_CONF from the environment of the jobs it starts); a slurm.conf there
# that this script did not write is never overwritten, and `stop` removes it. State (spool, logs, pid files) lives in
# $APERTUS_SLURM_DIR (default /tmp/apertus-slurm): slurmctld.log and slurmd.log are there.
# The node is this host (`hostname -s`) with all its CPUs and most of its memory, in one
# partition `local`. Accounting is off (the profile asks squeue for job states, not sacct).
set -euo pipefail

STATE=${APERTUS_SLURM_DIR:-/tmp/apertus-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# Written by profiles/slurm-local/cluster.sh"
NODE=$(hostname -s)

die() { echo "cluster.sh: $*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" = 0 ] || die "the local cluster's daemons run as root; run this as root"
}

installed() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v munged >/dev/null && command -v sbatch >/dev/null
}

cmd_install() {
    if installed; then
        echo "cluster.sh: slurm-wlm and munge are installed"
        return
    fi
    need_root
    command -v apt-get >/dev/null ||
        die "slurm-wlm and munge are missing and there is no apt-get to install them"
    local install=(apt-get install -y -q --no-install-recommends slurm-wlm munge)
    # A fresh machine may have no package lists yet: update once and retry.
    DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null; } ||
        die "apt-get install slurm-wlm munge failed"
    echo "cluster.sh: installed slurm-wlm and munge"
}

write_conf() {
    local cpus mem_mb
    cpus=$(nproc --all)
    # Leave a quarter of the memory (at least 1 GB) to the machine itself.
    mem_mb=$(awk '/MemTotal/ {m = int($2 / 1024); r = m / 4; if (r < 1024) r = 1024;
                              print int(m - r)}' /proc/meminfo)
    if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script; not overwriting it"
    fi
    mkdir -p "$STATE/ctld" "$STATE/spool" "$(dirname "$CONF")"
    cat >"$CONF" <<EOF
$MARK; rewritten by every start.
ClusterName=apertus-local
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
# No slurmdbd: job states come from slurmctld, which keeps finished jobs for MinJobAge s.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=30
JobRequeue=1
NodeName=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

running() {
    scontrol ping 2>/dev/null | grep -q "is UP"
}

cmd_start() {
    installed || die "slurm-wlm and munge are not installed: run '$0 install' (as root)"
    need_root
    if [ -f "$CONF" ] && running; then
        echo "cluster.sh: already running"
        return
    fi
    write_conf
    # munge: the credential daemon, run as the munge user as Debian's service does.
    if ! pgrep -x munged >/dev/null; then
        install -d -o munge -g munge -m 0755 /run/munge
        [ -s /etc/munge/munge.key ] || { mungekey --create --force && chown munge:munge /etc/munge/munge.key; }
        runuser -u munge -- /usr/sbin/munged --force ||
            die "munged did not start (see /var/log/munge/munged.log)"
    fi
    # -c: a clean start. A test cluster keeps nothing from its last run, in particular not a
    # node state such as "drain: SlurmdSpoolDir is full", which would outlive the full disk.
    slurmctld -c -f "$CONF" || die "slurmctld did not start; see $STATE/slurmctld.log"
    slurmd -f "$CONF" || die "slurmd did not start; see $STATE/slurmd.log"
    # Ready when the node takes jobs; one that registers drained is resumed (this script
    # owns the cluster, and a drain reason of a past run is no reason now).
    for _ in $(seq 60); do
        state=$(sinfo -h -N -o %t 2>/dev/null | head -1)
        case "$state" in
            idle | mix | alloc)
                echo "cluster.sh: up: node $NODE, partition local ($STATE)"
                return
                ;;
            drain* | drng | down*)
                scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true
                ;;
        esac
        sleep 1
    done
    die "the node did not become idle in 60 s; see $STATE/slurmctld.log and $STATE/slurmd.log"
}

cmd_stop() {
    [ -f "$CONF" ] || { echo "cluster.sh: not running (no $CONF)"; return; }
    # Jobs first, then both daemons; `scontrol shutdown` waits for neither, so wait here.
    scancel --full --quiet --state=RUNNING,PENDING 2>/dev/null || true
    scontrol shutdown 2>/dev/null || true
    for pidfile in "$STATE/slurmctld.pid" "$STATE/slurmd.pid"; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    # With a config naming a stopped controller every SLURM command waits ~9 s before failing,
    # and Snakemake's SLURM plugin runs several when it is loaded, by every `snakemake`.
    rm -f "$CONF"
    echo "cluster.sh: stopped"
}

cmd_status() {
    if [ -f "$CONF" ] && running; then
        sinfo
        squeue
    else
        echo "cluster.sh: not running"
        return 1
    fi
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) die "usage: $0 install|start|stop|status" ;;
esac
