#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, for trying profiles/slurm-local and for the
# tests marked `slurm` (tests/slurm/). Debian's slurm-wlm and munge, run as root.
#
#   bash profiles/slurm-local/cluster.sh install   # apt-get install slurm-wlm munge (once)
#   bash profiles/slurm-local/cluster.sh start     # writes the config, starts the daemons
#   bash profiles/slurm-local/cluster.sh start 2   # two nodes (or APERTUS_SLURM_NODES=2)
#   snakemake --workflow-profile profiles/slurm-local
#   bash profiles/slurm-local/cluster.sh stop
#
# The config is /etc/slurm/slurm.conf, where every SLURM command looks (Snakemake's SLURM
# jobstep drops SLURM_CONF from the environment of the jobs it starts); a slurm.conf there
# that this script did not write is never overwritten, and `stop` removes it. State (spool, logs, pid files) lives in
# $APERTUS_SLURM_DIR (default /tmp/apertus-slurm): slurmctld.log and slurmd.log are there.
# The node is this host (`hostname -s`) with all its CPUs and most of its memory, in one
# partition `local`. Accounting is off (the profile asks squeue for job states, not sacct).
#
# With N > 1 nodes (for multi-node training), the nodes are apertus-n1 ... apertus-nN on this
# one machine, each with twice its CPUs (see write_conf) and the memory of the one node. Each
# slurmd runs in its own UTS namespace (`unshare --uts`) with the node's name as hostname, so a
# job's `hostname` names its node, as on a real cluster; this also is how slurmd knows which
# node it is. All share the network: each node listens on its own loopback address (127.0.0.2, ...,
# named in /etc/hosts by lines this script adds and `stop` removes) and its own slurmd port,
# with its own spool dir, pid file and log (slurmd-apertus-nK.log).
set -euo pipefail

STATE=${APERTUS_SLURM_DIR:-/tmp/apertus-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# Written by profiles/slurm-local/cluster.sh"
NODE=$(hostname -s)
HOSTS=/etc/hosts
HOSTS_MARK="# apertus slurm-local node"
# Node K of a multi-node cluster: apertus-nK at 127.0.0.(K+1), slurmd port 6820+K (6818, the
# default, stays the one-node cluster's).
node_name() { echo "apertus-n$1"; }
node_addr() { echo "127.0.0.$(($1 + 1))"; }
node_port() { echo "$((6820 + $1))"; }

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
    local nodes=$1 cpus mem_mb spool suffix partition
    # With several nodes each is the whole machine, as big as the one node: a job the one-node
    # cluster runs fits one of its nodes as is (the pipeline's jobs ask for all the cores in
    # threads; the multi-node training job, `--nodes=N --cpus-per-task=<threads>`, would pend
    # forever on nodes with a share of them). Each has twice the machine's CPUs, so that a
    # training job on every node leaves room beside it for the 1-thread jobs (the evaluations
    # of earlier checkpoints), as the local executor runs them side by side; else each training
    # job waits for all nodes to drain and the rehearsal runs its jobs one after the other. The
    # machine is oversubscribed when several nodes are busy: slower per job, not wrong.
    cpus=$(nproc --all)
    [ "$nodes" = 1 ] || cpus=$((2 * cpus))
    # Leave a quarter of the memory (at least 1 GB) to the machine itself.
    mem_mb=$(awk '/MemTotal/ {m = int($2 / 1024); r = m / 4; if (r < 1024) r = 1024;
                              print int(m - r)}' /proc/meminfo)
    spool=$STATE/spool suffix="" partition=$NODE
    if [ "$nodes" -gt 1 ]; then
        # slurmd's files, one of each per slurmd: %n is the node's name.
        spool=$STATE/spool/%n suffix=-%n partition="apertus-n[1-$nodes]"
    fi
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
SlurmdSpoolDir=$spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd$suffix.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd$suffix.log
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
EOF
    if [ "$nodes" = 1 ]; then
        echo "NodeName=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN" >>"$CONF"
    else
        # The nodes' CPUs as configured, not as counted on the machine (twice its CPUs).
        echo "SlurmdParameters=config_overrides" >>"$CONF"
        for k in $(seq "$nodes"); do
            echo "NodeName=$(node_name "$k") NodeAddr=$(node_addr "$k") Port=$(node_port "$k")" \
                "CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN" >>"$CONF"
        done
    fi
    echo "PartitionName=local Nodes=$partition Default=YES MaxTime=INFINITE State=UP" \
        "OverSubscribe=NO" >>"$CONF"
}

# The nodes of the cluster $CONF describes.
conf_nodes() {
    grep -c '^NodeName=' "$CONF"
}

# /etc/hosts without this script's lines. Rewritten in place (not replaced by a new file):
# in a container it is often a bind mount.
unlist_nodes() {
    grep -qF "$HOSTS_MARK" "$HOSTS" 2>/dev/null || return 0
    local kept
    kept=$(grep -vF "$HOSTS_MARK" "$HOSTS")
    printf '%s\n' "$kept" >"$HOSTS"
}

list_nodes() {
    local nodes=$1
    unlist_nodes
    for k in $(seq "$nodes"); do
        echo "$(node_addr "$k") $(node_name "$k") $HOSTS_MARK" >>"$HOSTS"
    done
}

start_slurmd() {
    local nodes=$1
    if [ "$nodes" = 1 ]; then
        slurmd -f "$CONF" || die "slurmd did not start; see $STATE/slurmd.log"
        return
    fi
    unshare --uts true 2>/dev/null ||
        die "several nodes need a UTS namespace per slurmd, and \`unshare --uts\` fails here"
    list_nodes "$nodes"
    for k in $(seq "$nodes"); do
        local name
        name=$(node_name "$k")
        mkdir -p "$STATE/spool/$name"
        # The namespace lives as long as the daemon (slurmd forks into the background in it),
        # and every job step it starts inherits it.
        unshare --uts sh -c 'hostname "$1" && exec slurmd -f "$2" -N "$1"' sh "$name" "$CONF" ||
            die "slurmd of node $name did not start; see $STATE/slurmd-$name.log"
    done
}

running() {
    scontrol ping 2>/dev/null | grep -q "is UP"
}

cmd_start() {
    local nodes=${1:-${APERTUS_SLURM_NODES:-1}}
    [[ "$nodes" =~ ^[1-9][0-9]?$ ]] || die "the number of nodes must be 1 to 99, got '$nodes'"
    installed || die "slurm-wlm and munge are not installed: run '$0 install' (as root)"
    need_root
    if [ -f "$CONF" ] && running; then
        local have
        have=$(conf_nodes)
        [ "$have" = "$nodes" ] ||
            die "already running with $have node(s), not $nodes; '$0 stop' it first"
        echo "cluster.sh: already running"
        return
    fi
    write_conf "$nodes"
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
    start_slurmd "$nodes"
    # Ready when every node takes jobs; one that registers drained is resumed (this script
    # owns the cluster, and a drain reason of a past run is no reason now).
    local names
    names=$([ "$nodes" = 1 ] && echo "node $NODE" || echo "nodes apertus-n[1-$nodes]")
    for _ in $(seq 60); do
        local ready=0 name state
        while read -r name state; do
            case "$state" in
                idle | mix | alloc) ready=$((ready + 1)) ;;
                drain* | drng | down*)
                    scontrol update NodeName="$name" State=RESUME 2>/dev/null || true
                    ;;
            esac
        done < <(sinfo -h -N -o "%N %t" 2>/dev/null)
        if [ "$ready" = "$nodes" ]; then
            echo "cluster.sh: up: $names, partition local ($STATE)"
            return
        fi
        sleep 1
    done
    die "not all nodes became idle in 60 s; see $STATE/slurmctld.log and $STATE/slurmd*.log"
}

cmd_stop() {
    [ -f "$CONF" ] || { unlist_nodes; echo "cluster.sh: not running (no $CONF)"; return; }
    # Jobs first, then both daemons; `scontrol shutdown` waits for neither, so wait here.
    scancel --full --quiet --state=RUNNING,PENDING 2>/dev/null || true
    # Cancelled jobs get SIGTERM, and SIGKILL after KillWait: let them end while slurmd runs.
    for _ in $(seq 40); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1; done
    scontrol shutdown 2>/dev/null || true
    for pidfile in "$STATE/slurmctld.pid" "$STATE/slurmd.pid" "$STATE"/slurmd-*.pid; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    # A job step whose slurmd went first would stay behind: this cluster's run in $STATE.
    for pid in $(pgrep -x slurmstepd); do
        [ "$(readlink "/proc/$pid/cwd")" = "$STATE" ] && kill -9 "$pid" 2>/dev/null || true
    done
    unlist_nodes
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
    start) cmd_start "${2:-}" ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) die "usage: $0 install|start [NODES]|stop|status" ;;
esac
