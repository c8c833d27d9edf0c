# shellcheck shell=bash
# Shared helpers for jobs/node.sbatch and jobs/fleet.sbatch. Sourced by them, never run on its own.
#
# Everything a site may want to change is an environment variable with a default (see jobs/README.md):
#   IPCBENCH_HOME       the ipcbench checkout (default: the directory sbatch was run from)
#   IPCBENCH_MODULES    modules to `module load` first, space separated (default: none)
#   IPCBENCH_VENV       virtual environment to activate (default: $IPCBENCH_HOME/.venv if it exists; "none": skip)
#   IPCBENCH_PYTHON     run `$IPCBENCH_PYTHON -m ipcbench` instead of the `ipcbench` command on PATH
#   IPCBENCH_SUITES     what to run: `all` (default) or suite names, space separated (one ipcbench run)
#   IPCBENCH_ARGS       extra arguments for every ipcbench suite run, e.g. "--quick --sizes 4K:64M"
#   IPCBENCH_RESULTS    where run directories go (default: $SLURM_SUBMIT_DIR/results)
#   IPCBENCH_LAUNCHER   mpirun (default) | mpiexec | srun
#   IPCBENCH_LAUNCHER_ARGS  extra arguments for the launcher
#   IPCBENCH_SRUN_MPI   the --mpi= plugin for srun (default: pmix; set it empty to use the site's MpiDefault)
#   IPCBENCH_DRY_RUN    1: pass --dry-run --json (print the plan as one JSON line, no GPU work); no report
#   IPCBENCH_MPS        node.sbatch only: unset (default) = as the node is; off = without MPS (<run>-nomps);
#                       on = with a daemon of this job (<run>-mps); both = off, then on (jobs/mps.sh)
#   GPUS_PER_NODE       ranks per node, one per GPU (default: SLURM_GPUS_ON_NODE, else the tasks per node)
# Test only:
#   IPCBENCH_PRETEND_NODES  fleet mode: split one node's ranks into this many pretend nodes by giving
#                           each rank IPCBENCH_NODE_KEY=pretend<i> (how CI tests fleet mode on one machine)

# shellcheck source=jobs/mps.sh
. "$(dirname "${BASH_SOURCE[0]}")/mps.sh"

ipcb_log() { printf '[ipcbench-job] %s\n' "$*"; }
ipcb_warn() { printf '[ipcbench-job] WARNING: %s\n' "$*" >&2; }
ipcb_die() {
    printf '[ipcbench-job] ERROR: %s\n' "$*" >&2
    exit 1
}

# Is $1 a positive integer?
ipcb_is_count() { [[ $1 =~ ^[0-9]+$ ]] && (($1 > 0)); }

# `module load` each of IPCBENCH_MODULES. Batch shells often lack the `module` function: source the usual init.
ipcb_load_modules() {
    local modules=${IPCBENCH_MODULES:-} m init
    [[ -n $modules ]] || return 0
    if ! declare -F module >/dev/null; then
        for init in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash \
            /usr/share/Modules/init/bash; do
            if [[ -r $init ]]; then
                set +u
                # shellcheck source=/dev/null
                . "$init"
                set -u
                break
            fi
        done
    fi
    declare -F module >/dev/null || ipcb_die "IPCBENCH_MODULES is set but this shell has no 'module' command"
    for m in $modules; do
        set +u # many modulefiles are not `set -u` clean
        module load "$m" || ipcb_die "module load $m failed"
        set -u
        ipcb_log "module loaded: $m"
    done
}

# Activate the virtual environment, if any, and set IPCB_EXE (an array: how to run ipcbench).
ipcb_setup_python() {
    local venv=${IPCBENCH_VENV:-$IPCBENCH_HOME/.venv}
    if [[ $venv != none && -f $venv/bin/activate ]]; then
        # shellcheck source=/dev/null
        . "$venv/bin/activate"
        ipcb_log "venv: $venv"
    elif [[ -n ${IPCBENCH_VENV:-} && $venv != none ]]; then
        ipcb_die "IPCBENCH_VENV=$venv is not a virtual environment (no $venv/bin/activate)"
    fi
    if [[ -n ${IPCBENCH_PYTHON:-} ]]; then
        command -v "$IPCBENCH_PYTHON" >/dev/null || ipcb_die "IPCBENCH_PYTHON=$IPCBENCH_PYTHON: not found"
        "$IPCBENCH_PYTHON" -c 'import ipcbench' ||
            ipcb_die "IPCBENCH_PYTHON=$IPCBENCH_PYTHON cannot import ipcbench (pip install -e '.[mpi]' into it?)"
        IPCB_EXE=("$IPCBENCH_PYTHON" -m ipcbench)
    else
        command -v ipcbench >/dev/null ||
            ipcb_die "no 'ipcbench' command on PATH: set IPCBENCH_VENV or IPCBENCH_PYTHON, or load its module"
        IPCB_EXE=("$(command -v ipcbench)")
    fi
}

# Set IPCB_PPN, the ranks per node (one per GPU), and IPCB_PPN_FROM, where that number came from:
# GPUS_PER_NODE, else the GPUs Slurm gave this node, else the job's tasks per node.
ipcb_gpus_per_node() {
    local n=${GPUS_PER_NODE:-} nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}} src=GPUS_PER_NODE
    if [[ -z $n ]] && ipcb_is_count "${SLURM_GPUS_ON_NODE:-}"; then
        n=$SLURM_GPUS_ON_NODE src=SLURM_GPUS_ON_NODE
    fi
    if [[ -z $n ]] && ipcb_is_count "${SLURM_NTASKS:-}" && ipcb_is_count "$nodes"; then
        n=$((SLURM_NTASKS / nodes)) src="SLURM_NTASKS/SLURM_JOB_NUM_NODES"
    fi
    if [[ -z $n ]] && ipcb_is_count "${SLURM_NTASKS_PER_NODE:-}"; then
        n=$SLURM_NTASKS_PER_NODE src=SLURM_NTASKS_PER_NODE
    fi
    [[ -n $n ]] || ipcb_die "cannot tell how many GPUs a node has: set GPUS_PER_NODE or request --gres=gpu:N"
    ipcb_is_count "$n" || ipcb_die "ranks per node must be a positive integer, got '$n' (from $src)"
    IPCB_PPN=$n IPCB_PPN_FROM=$src
}

# Per-task GPU binding hides the other GPUs from each rank, and then no cross-GPU IPC is possible.
ipcb_check_binding() {
    local why=()
    [[ -n ${SLURM_GPUS_PER_TASK:-} ]] && why+=("--gpus-per-task=$SLURM_GPUS_PER_TASK")
    [[ -n ${SLURM_GPU_BIND:-} && ${SLURM_GPU_BIND:-} != none ]] && why+=("--gpu-bind=$SLURM_GPU_BIND")
    [[ ${SLURM_TRES_PER_TASK:-} == *gpu* ]] && why+=("--tres-per-task=$SLURM_TRES_PER_TASK")
    ((${#why[@]} == 0)) && return 0
    ipcb_warn "this job binds GPUs per task (${why[*]}): each rank sees only its own GPU, so CUDA IPC"
    ipcb_warn "between GPUs cannot work. Request GPUs per node (--gres=gpu:N or --gpus-per-node=N) and no"
    ipcb_warn "per-task binding; ipcbench picks each rank's GPU by its local rank. See jobs/README.md."
}

# Which MPI an mpirun/mpiexec is: openmpi, hydra (MPICH, Intel MPI) or unknown.
ipcb_mpi_flavor() {
    local v
    v=$("$1" --version 2>&1 || true)
    case $v in
    *"Open MPI"* | *OpenRTE* | *open-mpi.org*) echo openmpi ;;
    *HYDRA* | *Hydra* | *"Intel(R) MPI"* | *MPICH*) echo hydra ;;
    *) echo unknown ;;
    esac
}

# Fill IPCB_LAUNCH (an array) with the launcher command for $1 ranks in all, $2 per node.
ipcb_launch_cmd() {
    local np=$1 ppn=$2 launcher=${IPCBENCH_LAUNCHER:-mpirun} extra=() flavor
    read -r -a extra <<<"${IPCBENCH_LAUNCHER_ARGS:-}"
    case $launcher in
    srun)
        command -v srun >/dev/null || ipcb_die "IPCBENCH_LAUNCHER=srun but there is no srun on PATH"
        IPCB_LAUNCH=(srun --ntasks="$np" --ntasks-per-node="$ppn" --kill-on-bad-exit=1)
        if [[ -n ${IPCBENCH_SRUN_MPI-pmix} ]]; then
            IPCB_LAUNCH+=(--mpi="${IPCBENCH_SRUN_MPI-pmix}")
        fi
        ;;
    mpirun | mpiexec | */mpirun | */mpiexec)
        command -v "$launcher" >/dev/null || ipcb_die "IPCBENCH_LAUNCHER=$launcher: not found on PATH"
        flavor=$(ipcb_mpi_flavor "$launcher")
        case $flavor in
        openmpi)
            IPCB_LAUNCH=("$launcher" -np "$np" --map-by "ppr:$ppn:node")
            # Open MPI refuses to run as root without this (CI containers, some clusters' admin runs).
            if ((EUID == 0)); then IPCB_LAUNCH+=(--allow-run-as-root); fi
            ;;
        hydra) IPCB_LAUNCH=("$launcher" -n "$np" -ppn "$ppn") ;;
        *)
            ipcb_warn "cannot tell which MPI '$launcher' belongs to; launching with '-n $np' only"
            IPCB_LAUNCH=("$launcher" -n "$np")
            ;;
        esac
        ;;
    *) ipcb_die "IPCBENCH_LAUNCHER must be mpirun, mpiexec or srun (got '$launcher')" ;;
    esac
    IPCB_LAUNCH+=("${extra[@]}")
}

# The whole job. $1: node (one node, its own run) or fleet (every node, one run, gathered by rank 0).
ipcb_main() {
    local mode=$1 host nodes ppn np run_id run_dir suites=() args=() rc=0 per mps=${IPCBENCH_MPS:-}
    [[ $mode == node || $mode == fleet ]] || ipcb_die "ipcb_main: mode must be node or fleet"
    [[ -n ${SLURM_JOB_ID:-} ]] || ipcb_die "not inside a Slurm job: submit with 'sbatch jobs/$mode.sbatch'"
    case $mps in
    "" | off | on | both) ;;
    *) ipcb_die "IPCBENCH_MPS must be off, on or both, or unset (got '$mps')" ;;
    esac
    if [[ -n $mps && $mode != node ]]; then
        ipcb_die "IPCBENCH_MPS is for node.sbatch (one node): a fleet would need a daemon on every node"
    fi
    if [[ -n $mps && ${IPCBENCH_DRY_RUN:-0} == 1 ]]; then
        ipcb_log "dry run: IPCBENCH_MPS=$mps ignored (no GPU work, no MPS daemon)"
        mps=""
    fi
    if [[ $mps == on || $mps == both ]]; then ipcb_mps_find_control; fi # before any run, not after the first
    host=$(hostname -s)
    nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
    if [[ $mode == node ]] && ((nodes != 1)); then
        ipcb_die "node.sbatch measures one node but this job has $nodes; use jobs/fleet.sbatch for several"
    fi

    ipcb_load_modules
    ipcb_setup_python
    ipcb_gpus_per_node
    ppn=$IPCB_PPN
    np=$((ppn * nodes))
    ipcb_check_binding
    if [[ -n ${SLURM_NTASKS:-} ]] && ((SLURM_NTASKS != np)); then
        ipcb_warn "the job has $SLURM_NTASKS tasks but $np ranks will run ($ppn per node x $nodes nodes)"
    fi
    ipcb_launch_cmd "$np" "$ppn"

    if [[ $mode == node ]]; then run_id="$SLURM_JOB_ID-$host"; else run_id="$SLURM_JOB_ID-fleet"; fi
    run_dir="${IPCBENCH_RESULTS:-${SLURM_SUBMIT_DIR:-$PWD}/results}/$run_id"
    read -r -a suites <<<"${IPCBENCH_SUITES:-all}"
    ((${#suites[@]} > 0)) || suites=(all)
    read -r -a args <<<"${IPCBENCH_ARGS:-}"
    if [[ ${IPCBENCH_DRY_RUN:-0} == 1 ]]; then args+=(--dry-run --json); fi

    # Test only: pretend nodes. Each rank learns its rank from its launcher and picks its node key.
    local wrap=()
    if [[ -n ${IPCBENCH_PRETEND_NODES:-} ]]; then
        [[ $mode == fleet ]] || ipcb_die "IPCBENCH_PRETEND_NODES is for fleet.sbatch only"
        if ! ipcb_is_count "$IPCBENCH_PRETEND_NODES" || ((np % IPCBENCH_PRETEND_NODES != 0)); then
            ipcb_die "IPCBENCH_PRETEND_NODES=$IPCBENCH_PRETEND_NODES must divide the $np ranks evenly"
        fi
        per=$((np / IPCBENCH_PRETEND_NODES))
        # shellcheck disable=SC2016 # expanded by the rank's own shell, not here
        wrap=(env "IPCB_RANKS_PER_PRETEND=$per" bash -c \
            'r=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:?no rank variable}}}}
             IPCBENCH_NODE_KEY="pretend$((r / IPCB_RANKS_PER_PRETEND))" exec "$@"' ipcbench-rank)
        ipcb_log "pretend nodes: $IPCBENCH_PRETEND_NODES x $per ranks (IPCBENCH_NODE_KEY=pretend<i>)"
    fi

    ipcb_log "mode=$mode job=$SLURM_JOB_ID nodes=$nodes (${SLURM_JOB_NODELIST:-$host}) ranks/node=$ppn (from $IPCB_PPN_FROM) ranks=$np"
    mkdir -p "$(dirname "$run_dir")"
    IPCB_SUITES=("${suites[@]}") IPCB_ARGS=("${args[@]}") IPCB_WRAP=("${wrap[@]}")
    case $mps in
    "")
        ipcb_run_and_report "$run_dir"
        rc=$IPCB_RUN_RC
        ;;
    both) ipcb_log "IPCBENCH_MPS=both: $run_dir-nomps without MPS, then $run_dir-mps with MPS" ;;&
    *)
        # off, on, or both (off first): one run directory per mode, each labelled by ipcbench too
        # (IPCBENCH_EXPECT_MPS: the run refuses to measure if the driver reports otherwise).
        if [[ $mps != on ]]; then
            ipcb_mps_off
            ipcb_run_and_report "$run_dir-nomps"
            rc=$IPCB_RUN_RC
            ipcb_mps_stop
        fi
        if [[ $mps != off ]]; then
            ipcb_mps_start
            ipcb_run_and_report "$run_dir-mps"
            ((rc != 0)) || rc=$IPCB_RUN_RC
            ipcb_mps_stop
        fi
        ;;
    esac
    ipcb_log "done: status $rc"
    return "$rc"
}

# One ipcbench run into $1, then its report. Sets IPCB_RUN_RC (never fails: the job goes on to the next
# mode and ends with the first bad status). Uses IPCB_LAUNCH, IPCB_WRAP, IPCB_EXE, IPCB_SUITES, IPCB_ARGS.
# After `ipcbench check` over the job's nodes (jobs/fleet-check.sbatch): the verdict of each node, judged again
# from the run (`--from`, as the check itself did), and one line naming the nodes that are not healthy.
ipcb_check_nodes() {
    local run_dir=$1
    [[ -e $run_dir/results.csv ]] || {
        ipcb_warn "no $run_dir/results.csv: no node can be judged"
        return 0
    }
    "${IPCB_EXE[@]}" check --from "$run_dir" --any-host --json "${IPCB_ARGS[@]}" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
bad = [n["host"] + ("" if n["status"] == "fail" else " (not judged)") for n in d["nodes"] if n["status"] != "pass"]
print("[ipcbench-job] nodes: " + ", ".join(n["host"] + " " + n["status"] for n in d["nodes"]))
print("[ipcbench-job] unhealthy nodes: " + (", ".join(bad) or "none"))' || ipcb_warn "could not list the nodes' verdicts"
}

ipcb_run_and_report() {
    local run_dir=$1 rc=0
    ipcb_log "run dir: $run_dir${CUDA_MPS_PIPE_DIRECTORY:+ (CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY)}"
    ipcb_log "run: ${IPCB_LAUNCH[*]}${IPCB_WRAP[*]:+ (pretend-node wrapper)} ${IPCB_EXE[*]} ${IPCB_SUITES[*]} --out $run_dir ${IPCB_ARGS[*]}"
    "${IPCB_LAUNCH[@]}" "${IPCB_WRAP[@]}" "${IPCB_EXE[@]}" "${IPCB_SUITES[@]}" --out "$run_dir" "${IPCB_ARGS[@]}" || {
        rc=$?
        ipcb_warn "ipcbench ${IPCB_SUITES[*]} exited with status $rc"
    }

    if [[ ${IPCBENCH_DRY_RUN:-0} == 1 ]]; then
        ipcb_log "dry run: no report"
    elif [[ ${IPCB_SUITES[0]} == check ]]; then
        ipcb_check_nodes "$run_dir"
    elif [[ -e $run_dir/results.csv ]]; then
        # Report even after a failure: the rows measured so far are in the CSV, failures are flagged there.
        ipcb_log "report: ${IPCB_EXE[*]} report $run_dir"
        "${IPCB_EXE[@]}" report "$run_dir" || {
            local rrc=$?
            ipcb_warn "ipcbench report exited with status $rrc"
            ((rc != 0)) || rc=$rrc
        }
    else
        ipcb_warn "no $run_dir/results.csv: nothing to report"
        ((rc != 0)) || rc=1
    fi
    ipcb_log "run done: status $rc, results in $run_dir"
    IPCB_RUN_RC=$rc
}
