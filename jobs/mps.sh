#!/bin/bash
# shellcheck shell=bash
# MPS (CUDA Multi-Process Service) for ipcbench runs: with or without it, and never by accident.
#
# Run on its own, around any command (a GPU machine without Slurm):
#   jobs/mps.sh on  -- mpirun -np 2 ipcbench all --quick --out results/check-mps
#   jobs/mps.sh off -- mpirun -np 2 ipcbench all --quick --out results/check-nomps
# or sourced by jobs/common.sh (IPCBENCH_MPS=off|on|both in jobs/node.sbatch; jobs/README.md).
#
# on:  start an MPS control daemon that belongs to this job (`nvidia-cuda-mps-control -d`), with its own
#      pipe and log directories in a private temporary directory (CUDA_MPS_PIPE_DIRECTORY,
#      CUDA_MPS_LOG_DIRECTORY, exported: the command's processes are its clients), check that it is up,
#      and stop it (`echo quit | nvidia-cuda-mps-control`) when the command ends, or on any exit of the
#      shell (an EXIT trap; TERM, INT and HUP become exits), so no daemon is left behind.
# off: CUDA_MPS_PIPE_DIRECTORY points at an empty private directory, so no daemon, not even one
#      already running for the default pipe directory (/tmp/nvidia-mps), can take the command's processes.
# Both export IPCBENCH_EXPECT_MPS=1 (on) or 0 (off): ipcbench refuses to measure when the driver reports
# otherwise (core/mps.py), so a run's label can never be wrong. A daemon this script did not start is
# reported and left alone: it is never used (the ranks have their own pipe directory) and never stopped.
#
# Test only: IPCB_MPS_DEFAULT_PIPE_DIR replaces /tmp/nvidia-mps when looking for daemons of others,
# IPCB_MPS_CONTROL the control program's name, IPCB_MPS_START_TIMEOUT the 10 s that a daemon has to come up.

IPCB_MPS_DEFAULT_PIPE_DIR=${IPCB_MPS_DEFAULT_PIPE_DIR:-/tmp/nvidia-mps}
IPCB_MPS_CONTROL=${IPCB_MPS_CONTROL:-nvidia-cuda-mps-control}
IPCB_MPS_START_TIMEOUT=${IPCB_MPS_START_TIMEOUT:-10}
# State of this shell, never taken from the environment (ipcb_mps_stop removes IPCB_MPS_DIR).
IPCB_MPS_DIR=""       # the private directory this script created (empty: none)
IPCB_MPS_DAEMON=""    # 1 while a daemon started by this script may be running
IPCB_MPS_ENV_SAVED="" # 1 while the caller's MPS variables are saved

ipcb_mps_log() { printf '[ipcbench-mps] %s\n' "$*"; }
ipcb_mps_warn() { printf '[ipcbench-mps] WARNING: %s\n' "$*" >&2; }
ipcb_mps_die() {
    printf '[ipcbench-mps] ERROR: %s\n' "$*" >&2
    exit 1
}

# Is process $1 alive? Any user's (/proc, not kill -0); a zombie is not (a container's init may not reap).
ipcb_mps_alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != [ZX] ]]
}

# The pid in a pipe directory's pid file when that process is alive.
ipcb_mps_live_pid() {
    local f=$1/nvidia-cuda-mps-control.pid pid=""
    [[ -r $f ]] || return 1
    read -r pid <"$f" || true
    [[ $pid =~ ^[0-9]+$ ]] && ipcb_mps_alive "$pid" || return 1
    echo "$pid"
}

# Say so when a control daemon that this script did not start serves the default pipe directory or the
# one in the environment. Such a daemon is left alone.
ipcb_mps_foreign_daemons() {
    local d pid seen=" "
    for d in "$IPCB_MPS_DEFAULT_PIPE_DIR" "${CUDA_MPS_PIPE_DIRECTORY:-}"; do
        [[ -n $d && $seen != *" $d "* ]] || continue
        seen+="$d "
        [[ -n $IPCB_MPS_DIR && $d == "$IPCB_MPS_DIR"/* ]] && continue # our own
        [[ -e $d/control ]] || continue
        if pid=$(ipcb_mps_live_pid "$d"); then
            ipcb_mps_warn "an MPS control daemon that this job did not start serves $d (pid $pid): this job neither" \
                "uses nor stops it (its ranks get their own CUDA_MPS_PIPE_DIRECTORY)"
        else
            ipcb_mps_warn "$d has an MPS control pipe that this job did not make (its daemon may be gone, or in" \
                "another namespace): this job neither uses nor stops it (its ranks get their own CUDA_MPS_PIPE_DIRECTORY)"
        fi
    done
}

# A private directory for this job's pipes and logs, local and short (a Unix socket path has ~107 bytes).
ipcb_mps_private_dir() {
    local root=${TMPDIR:-/tmp}
    [[ -z $IPCB_MPS_DIR ]] || return 0
    if ((${#root} > 50)) || [[ ! -d $root || ! -w $root ]]; then root=/tmp; fi
    IPCB_MPS_DIR=$(mktemp -d "$root/ipcb-mps.${SLURM_JOB_ID:-$$}.XXXXXX") ||
        ipcb_mps_die "cannot create a private MPS directory in $root"
}

# Keep the caller's MPS variables, to put them back after the run.
ipcb_mps_save_env() {
    [[ -z $IPCB_MPS_ENV_SAVED ]] || return 0
    IPCB_MPS_ENV_SAVED=1
    IPCB_MPS_OLD_PIPE=${CUDA_MPS_PIPE_DIRECTORY+s$CUDA_MPS_PIPE_DIRECTORY}
    IPCB_MPS_OLD_LOG=${CUDA_MPS_LOG_DIRECTORY+s$CUDA_MPS_LOG_DIRECTORY}
    IPCB_MPS_OLD_EXPECT=${IPCBENCH_EXPECT_MPS+s$IPCBENCH_EXPECT_MPS}
}

_ipcb_mps_restore_one() { # $1: variable, $2: saved ("": it was unset, "s<value>": it was set)
    if [[ -n $2 ]]; then export "$1=${2#s}"; else unset "$1"; fi
}

ipcb_mps_restore_env() {
    [[ -n $IPCB_MPS_ENV_SAVED ]] || return 0
    _ipcb_mps_restore_one CUDA_MPS_PIPE_DIRECTORY "$IPCB_MPS_OLD_PIPE"
    _ipcb_mps_restore_one CUDA_MPS_LOG_DIRECTORY "$IPCB_MPS_OLD_LOG"
    _ipcb_mps_restore_one IPCBENCH_EXPECT_MPS "$IPCB_MPS_OLD_EXPECT"
    IPCB_MPS_ENV_SAVED=""
}

# Stop on every exit of this shell, a failure included; a signal becomes an exit so the EXIT trap runs.
ipcb_mps_trap() {
    trap 'ipcb_mps_stop' EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    trap 'exit 129' HUP
}

# Is this job's daemon up? Its control pipe exists and (where it wrote one) its pid is alive.
ipcb_mps_up() {
    local pipe=$IPCB_MPS_DIR/pipe
    [[ -e $pipe/control ]] || return 1
    [[ -e $pipe/nvidia-cuda-mps-control.pid ]] || return 0
    ipcb_mps_live_pid "$pipe" >/dev/null
}

ipcb_mps_show_log() {
    local f=$IPCB_MPS_DIR/log/control.log
    [[ -s $f ]] || return 0
    ipcb_mps_warn "last lines of $f:"
    tail -n 20 "$f" >&2 || true
}

# Set IPCB_MPS_CTL to the control program, or fail saying where it comes from.
ipcb_mps_find_control() {
    IPCB_MPS_CTL=$(command -v "$IPCB_MPS_CONTROL") ||
        ipcb_mps_die "MPS was asked for, but $IPCB_MPS_CONTROL is not on PATH (it comes with the NVIDIA driver," \
            "usually in /usr/bin: add its directory to PATH or load the module that has it), or run without MPS"
}

# Start this job's own MPS control daemon; what runs next in this shell is its client.
ipcb_mps_start() {
    local ctl i pipe log
    [[ -z $IPCB_MPS_DAEMON ]] || ipcb_mps_die "this job's MPS daemon is already running ($IPCB_MPS_DIR)"
    ipcb_mps_find_control
    ctl=$IPCB_MPS_CTL
    ipcb_mps_foreign_daemons
    ipcb_mps_trap
    ipcb_mps_private_dir
    pipe=$IPCB_MPS_DIR/pipe log=$IPCB_MPS_DIR/log
    mkdir -p "$pipe" "$log"
    ipcb_mps_save_env
    export CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$log IPCBENCH_EXPECT_MPS=1
    ipcb_mps_log "starting this job's MPS control daemon: $ctl -d (CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$log)"
    IPCB_MPS_DAEMON=1 # from here on, any exit stops it
    "$ctl" -d || ipcb_mps_die "$ctl -d failed with status $?"
    for ((i = 0; i < IPCB_MPS_START_TIMEOUT * 10; i++)); do
        ipcb_mps_up && break
        sleep 0.1
    done
    if ! ipcb_mps_up; then
        ipcb_mps_show_log
        ipcb_mps_die "the MPS control daemon did not come up within $IPCB_MPS_START_TIMEOUT s (no live daemon behind" \
            "$pipe/control)"
    fi
    ipcb_mps_log "MPS control daemon up (pid $(ipcb_mps_live_pid "$pipe" || echo unknown)): the ranks will be its clients"
}

# Without MPS, whatever runs on the node: the clients look for a daemon in an empty private directory.
ipcb_mps_off() {
    ipcb_mps_foreign_daemons
    ipcb_mps_trap
    ipcb_mps_private_dir
    mkdir -p "$IPCB_MPS_DIR/none"
    ipcb_mps_save_env
    export CUDA_MPS_PIPE_DIRECTORY=$IPCB_MPS_DIR/none IPCBENCH_EXPECT_MPS=0
    unset CUDA_MPS_LOG_DIRECTORY
    ipcb_mps_log "without MPS: CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY (empty: no daemon can serve the ranks)"
}

# Stop this job's daemon (if it started one), put the environment back, remove the private directory.
# Safe to call twice, and from the EXIT trap after any failure.
ipcb_mps_stop() {
    local ctl pid="" i quit=()
    if [[ -n $IPCB_MPS_DAEMON ]]; then
        pid=$(ipcb_mps_live_pid "$IPCB_MPS_DIR/pipe" || true)
        ipcb_mps_log "stopping this job's MPS control daemon: echo quit | nvidia-cuda-mps-control (CUDA_MPS_PIPE_DIRECTORY=$IPCB_MPS_DIR/pipe)"
        if ctl=$(command -v "$IPCB_MPS_CONTROL"); then
            if command -v timeout >/dev/null; then quit=(timeout 30); fi
            echo quit | CUDA_MPS_PIPE_DIRECTORY=$IPCB_MPS_DIR/pipe "${quit[@]}" "$ctl" >/dev/null 2>&1 ||
                ipcb_mps_warn "'echo quit | nvidia-cuda-mps-control' exited with status $?"
        fi
        if [[ -n $pid ]]; then
            for ((i = 0; i < 150; i++)); do
                ipcb_mps_alive "$pid" || break
                sleep 0.1
            done
            if ipcb_mps_alive "$pid"; then
                ipcb_mps_warn "this job's MPS control daemon (pid $pid) is still running 15 s after quit: kill $pid"
                kill "$pid" 2>/dev/null || true
            fi
        fi
        IPCB_MPS_DAEMON=""
        ipcb_mps_log "MPS control daemon stopped"
    fi
    ipcb_mps_restore_env
    if [[ -n $IPCB_MPS_DIR ]]; then
        rm -rf -- "$IPCB_MPS_DIR" || true
        IPCB_MPS_DIR=""
    fi
}

ipcb_mps_usage() {
    cat >&2 <<'EOF'
usage: jobs/mps.sh on|off -- COMMAND [ARG...]
  on:  run COMMAND as a client of an MPS control daemon started for it (stopped when COMMAND ends)
  off: run COMMAND where no MPS daemon can serve it
COMMAND sees IPCBENCH_EXPECT_MPS=1 or 0; ipcbench refuses to measure if the driver disagrees.
EOF
}

# jobs/mps.sh on|off -- COMMAND...: COMMAND's exit status.
ipcb_mps_main() {
    local mode=${1:-} rc=0
    case $mode in
    on | off) shift ;;
    *)
        ipcb_mps_usage
        return 2
        ;;
    esac
    [[ ${1:-} != -- ]] || shift
    if (($# == 0)); then
        ipcb_mps_usage
        return 2
    fi
    if [[ $mode == on ]]; then ipcb_mps_start; else ipcb_mps_off; fi
    ipcb_mps_log "run: $*"
    "$@" || rc=$?
    ipcb_mps_stop
    ipcb_mps_log "done: status $rc (MPS $mode)"
    return "$rc"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    ipcb_mps_main "$@"
fi
