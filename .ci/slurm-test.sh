#!/usr/bin/env bash
# A real one-machine Slurm cluster in CI: install slurm-wlm + munge from the distribution (unless Slurm is
# already there), start munged, slurmctld and slurmd with a private configuration (no cgroups), submit the
# job scripts in jobs/ with IPCBENCH_DRY_RUN=1 (no GPU needed), check every job's state, task count and
# the plan ipcbench prints (--dry-run --json), print the job outputs; then let slurmd run the health check
# (jobs/healthcheck.sh as HealthCheckProgram) on a recorded unhealthy run and see the node drained with the
# check's reason, and on a healthy one see it back up; shut the cluster down.
#
#   bash .ci/slurm-test.sh          (as root, after `pip install -e '.[mpi,test]'` into .venv)
#
# Environment: SLURM_TEST_JOB_TIMEOUT (s, default 120) bounds the wait for the jobs; SLURM_TEST_KEEP=1 keeps
# the temporary directory (config, logs, job outputs). The last line is always `slurm: N passed, M failed`;
# the exit status is non-zero when anything failed.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
JOB_TIMEOUT=${SLURM_TEST_JOB_TIMEOUT:-120}
HOST=$(hostname -s)
WORK=""
PASSED=0
FAILED=0
FAILURES=()
JOBIDS=()
STARTED_MUNGED=0
FINISHED=0

say() { printf '== %s\n' "$*"; }
pass() {
    PASSED=$((PASSED + 1))
    printf 'PASS %s\n' "$*"
}
fail() {
    FAILED=$((FAILED + 1))
    FAILURES+=("$*")
    printf 'FAIL %s\n' "$*"
}
# Run a command with a time limit so that nothing here can hang CI.
t() {
    local secs=$1
    shift
    timeout --kill-after=5 "$secs" "$@"
}

stop_pidfile() { # name pidfile: TERM, wait up to 10 s, then KILL
    local name=$1 pidfile=$2 pid
    [[ -s $pidfile ]] || return 0
    pid=$(cat "$pidfile")
    kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "$name (pid $pid) did not stop: killing it"
        kill -9 "$pid" 2>/dev/null || true
    fi
}

cleanup() {
    set +e
    if ((${#JOBIDS[@]} > 0)) && [[ -n ${SLURM_CONF:-} ]]; then
        t 10 scancel "${JOBIDS[@]}" >/dev/null 2>&1
    fi
    if [[ -n $WORK ]]; then
        stop_pidfile slurmd "$WORK/slurmd.pid"
        stop_pidfile slurmctld "$WORK/slurmctld.pid"
    fi
    if ((STARTED_MUNGED)); then
        stop_pidfile munged /run/munge/munged.pid
    fi
    if [[ -n $WORK && ${SLURM_TEST_KEEP:-0} != 1 ]]; then
        rm -rf "$WORK"
    elif [[ -n $WORK ]]; then
        echo "kept $WORK (config, daemon logs, job outputs)"
    fi
    WORK=""
}

summary() {
    local f
    say "summary"
    for f in "${FAILURES[@]}"; do echo "  failed: $f"; done
    echo "slurm: $PASSED passed, $FAILED failed"
}

# shellcheck disable=SC2317,SC2329 # invoked by the EXIT trap
on_exit() {
    local rc=$?
    ((FINISHED)) && return
    trap - ERR
    set +e
    fail "slurm-test.sh stopped early (status $rc): see the messages above"
    cleanup
    summary
    exit 1
}
trap on_exit EXIT
trap 'echo "slurm-test.sh: command failed at line $LINENO: $BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------------------------------------------------
# 1. Slurm and munge
say "install"
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    echo "slurm already installed: $(slurmctld -V 2>&1 | head -1)"
elif ((EUID != 0)); then
    fail "install: Slurm is not installed and this is not root (cannot apt-get install slurm-wlm munge)"
    FINISHED=1
    summary
    exit 1
else
    start=$SECONDS
    export DEBIAN_FRONTEND=noninteractive
    if t 60 apt-get update -q >"${TMPDIR:-/tmp}/slurm-test-apt.log" 2>&1 &&
        t 120 apt-get install -y -q --no-install-recommends slurm-wlm munge >>"${TMPDIR:-/tmp}/slurm-test-apt.log" 2>&1; then
        echo "installed slurm-wlm + munge in $((SECONDS - start)) s: $(slurmctld -V 2>&1 | head -1)"
    else
        tail -20 "${TMPDIR:-/tmp}/slurm-test-apt.log"
        fail "install: apt-get install slurm-wlm munge failed (log above)"
        FINISHED=1
        summary
        exit 1
    fi
fi
for cmd in slurmctld slurmd sbatch scontrol squeue sinfo munged munge unmunge; do
    command -v "$cmd" >/dev/null || {
        fail "install: $cmd is missing after installing slurm-wlm and munge"
        FINISHED=1
        summary
        exit 1
    }
done

[[ -f $REPO/.venv/bin/activate ]] || fail "setup: no $REPO/.venv (the jobs activate it; install the project first)"

# ---------------------------------------------------------------------------------------------------------
# 2. The cluster: munged (reused when one already answers), slurmctld + slurmd on this host
say "cluster"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/slurm-test.XXXXXX")
chmod 755 "$WORK"
mkdir -p "$WORK/state" "$WORK/spool" "$WORK/log" "$WORK/out" "$WORK/results"

if t 10 munge -n 2>/dev/null | t 10 unmunge >/dev/null 2>&1; then
    echo "munged: already running"
elif ((EUID != 0)); then
    echo "munged is not running and this is not root: cannot start it"
else
    if [[ ! -s /etc/munge/munge.key ]]; then
        echo "munge: creating /etc/munge/munge.key"
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    chmod 755 /run/munge
    if command -v runuser >/dev/null; then
        runuser -u munge -- /usr/sbin/munged || true
    else
        su -s /bin/sh munge -c /usr/sbin/munged || true
    fi
    STARTED_MUNGED=1
    for _ in $(seq 1 25); do
        t 5 munge -n 2>/dev/null | t 5 unmunge >/dev/null 2>&1 && break
        sleep 0.2
    done
fi
if t 10 munge -n 2>/dev/null | t 10 unmunge >/dev/null 2>&1; then
    pass "munge: munge -n | unmunge succeeds"
else
    fail "munge: munged does not answer (munge -n | unmunge fails; see /var/log/munge/munged.log)"
    tail -5 /var/log/munge/munged.log 2>/dev/null || true
fi

# Two free TCP ports, so a Slurm that may already run on this machine is left alone.
read -r CTLD_PORT SLURMD_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

export SLURM_CONF=$WORK/slurm.conf
# The health check slurmd runs: jobs/healthcheck.sh judging the recorded run named in $WORK/hc-from (a
# healthy one until section 4 swaps it), through a wrapper that gives it this cluster's configuration.
HC_HEALTHY=$REPO/tests/data/compare/quiet1
HC_UNHEALTHY=$REPO/tests/data/compare/loaded
echo "$HC_HEALTHY" >"$WORK/hc-from"
cat >"$WORK/hc.sh" <<EOF
#!/bin/bash
export SLURM_CONF=$SLURM_CONF PATH=/usr/sbin:/usr/bin:/sbin:/bin:\$PATH
export IPCBENCH_HC_EXE=$REPO/.venv/bin/ipcbench IPCBENCH_HC_ARGS=--any-host IPCBENCH_HC_LOG=$WORK/log/healthcheck.log
export IPCBENCH_HC_FROM=\$(cat $WORK/hc-from)
exec $REPO/jobs/healthcheck.sh
EOF
chmod 755 "$WORK/hc.sh"
cat >"$SLURM_CONF" <<EOF
# one-machine test cluster written by .ci/slurm-test.sh: no cgroups, no accounting
ClusterName=ipcbench-ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdLogFile=$WORK/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# The CI machine has 2 cores; declare 8 CPUs (config_overrides accepts it) so a 4-task job fits.
SlurmdParameters=config_overrides
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=8 RealMemory=2000 State=UNKNOWN
HealthCheckProgram=$WORK/hc.sh
HealthCheckInterval=5
HealthCheckNodeState=ANY
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF

CLUSTER_UP=0
CTLD_UP=0
if ((EUID != 0)); then
    echo "not root: slurmd must run as root here (SlurmdUser=root); not starting the cluster"
elif t 20 slurmctld -f "$SLURM_CONF"; then
    for _ in $(seq 1 50); do
        t 5 scontrol ping 2>/dev/null | grep -q 'is UP' && {
            CTLD_UP=1
            break
        }
        sleep 0.2
    done
fi
if ((CTLD_UP)) && t 20 slurmd -f "$SLURM_CONF" -N "$HOST"; then
    state=""
    for _ in $(seq 1 60); do
        state=$(t 5 sinfo -h -n "$HOST" -o %T 2>/dev/null | head -1 || true)
        case $state in
        idle*) break ;;
        down* | drain*) t 5 scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    [[ $state == idle* ]] && CLUSTER_UP=1
fi
if ((CLUSTER_UP)); then
    pass "cluster: slurmctld + slurmd up, node $HOST idle ($(t 5 sinfo -h -o '%P %D %c CPUs %T'))"
else
    fail "cluster: could not start (slurmctld up: $CTLD_UP, node state: '${state:-none}'); daemon logs follow"
    tail -n 30 "$WORK"/log/*.log 2>/dev/null || true
fi

# ---------------------------------------------------------------------------------------------------------
# 3. The jobs. Each: name | expected state | expected tasks | expected PLAN (python dict literal, or -) |
#    sbatch options | environment for the job (comma separated, no commas inside values)
JOBS=(
    "node-mpirun|COMPLETED|2|{'nodes': 1, 'ranks': 2, 'ranks_per_node': {'@HOST': 2}}|-N 1 --ntasks-per-node=2 --gres=none jobs/node.sbatch|IPCBENCH_DRY_RUN=1"
    "fleet-mpiexec|COMPLETED|4|{'nodes': 2, 'ranks': 4, 'ranks_per_node': {'pretend0': 2, 'pretend1': 2}}|-N 1 --ntasks-per-node=4 --gres=none jobs/fleet.sbatch|IPCBENCH_DRY_RUN=1,IPCBENCH_LAUNCHER=mpiexec,IPCBENCH_PRETEND_NODES=2"
    "fleet-srun|COMPLETED|4|{'nodes': 2, 'ranks': 4, 'ranks_per_node': {'pretend0': 2, 'pretend1': 2}}|-N 1 --ntasks-per-node=4 --gres=none jobs/fleet.sbatch|IPCBENCH_DRY_RUN=1,IPCBENCH_LAUNCHER=srun,IPCBENCH_SRUN_MPI=pmi2,IPCBENCH_PRETEND_NODES=2"
    "node-bad-args-must-fail|FAILED|2|-|-N 1 --ntasks-per-node=2 --gres=none jobs/node.sbatch|IPCBENCH_DRY_RUN=1,IPCBENCH_ARGS=--no-such-option"
    "fleet-check|COMPLETED|4|{'nodes': 2, 'ranks': 4, 'ranks_per_node': {'pretend0': 2, 'pretend1': 2}}|-N 1 --ntasks-per-node=4 --gres=none jobs/fleet-check.sbatch|IPCBENCH_DRY_RUN=1,IPCBENCH_LAUNCHER=mpiexec,IPCBENCH_PRETEND_NODES=2"
)
declare -A JOBID_OF=()

if ((CLUSTER_UP)); then
    say "submit"
    for spec in "${JOBS[@]}"; do
        IFS='|' read -r name _ _ _ opts envs <<<"$spec"
        read -r -a opt_array <<<"$opts"
        if out=$(t 30 sbatch --parsable --job-name="ci-$name" --output="$WORK/out/$name.out" \
            --export="ALL,IPCBENCH_RESULTS=$WORK/results,$envs" "${opt_array[@]}" 2>&1); then
            JOBID_OF[$name]=${out%%;*}
            JOBIDS+=("${out%%;*}")
            echo "submitted $name: job ${out%%;*} (sbatch $opts; $envs)"
        else
            fail "$name: sbatch $opts failed: $out"
        fi
    done

    say "wait (at most $JOB_TIMEOUT s)"
    deadline=$((SECONDS + JOB_TIMEOUT))
    while ((${#JOBIDS[@]} > 0)); do
        pending=$(t 10 squeue -h -j "$(
            IFS=,
            echo "${JOBIDS[*]}"
        )" -o '%i %T' 2>/dev/null || true)
        [[ -z $pending ]] && break
        if ((SECONDS > deadline)); then
            fail "wait: jobs still not finished after $JOB_TIMEOUT s: $(echo "$pending" | tr '\n' ' ')"
            t 10 scancel "${JOBIDS[@]}" || true
            sleep 2
            break
        fi
        sleep 1
    done
    echo "all jobs left the queue after $((SECONDS - deadline + JOB_TIMEOUT)) s"

    say "job outputs"
    for spec in "${JOBS[@]}"; do
        IFS='|' read -r name _ <<<"$spec"
        echo "----- $name (job ${JOBID_OF[$name]:-none}): $WORK/out/$name.out"
        cat "$WORK/out/$name.out" 2>/dev/null || echo "(no output file)"
    done

    say "checks"
    for spec in "${JOBS[@]}"; do
        IFS='|' read -r name want_state want_tasks want_plan _ <<<"$spec"
        id=${JOBID_OF[$name]:-}
        [[ -n $id ]] || continue
        info=$(t 10 scontrol -o show job "$id" 2>&1 || true)
        state=$(sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' <<<"$info")
        tasks=$(sed -n 's/.* NumTasks=\([0-9]*\).*/\1/p' <<<"$info")
        exitcode=$(sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' <<<"$info")
        why=()
        [[ $state == "$want_state" ]] || why+=("state $state (want $want_state)")
        [[ $tasks == "$want_tasks" ]] || why+=("tasks ${tasks:-?} (want $want_tasks)")
        if [[ $want_state == COMPLETED && $exitcode != 0:0 ]]; then why+=("exit code $exitcode"); fi
        if [[ $want_state == FAILED && $exitcode == 0:0 ]]; then why+=("exit code 0:0 on a job that must fail"); fi
        if [[ $want_plan != - ]]; then
            plan=$(grep -a '^{"nodes"' "$WORK/out/$name.out" 2>/dev/null | tail -n 1 || true)
            if [[ -z $plan ]]; then
                why+=("no plan (a JSON line from --dry-run --json) in the output")
            elif ! msg=$(python3 - "$plan" "${want_plan//@HOST/$HOST}" "$HOST" <<'PY'
import ast, json, sys
plan, want, host = json.loads(sys.argv[1]), ast.literal_eval(sys.argv[2]), sys.argv[3]
short = lambda h: str(h).split(".")[0]
bad = []
for key in ("nodes", "hosts", "ranks", "ranks_per_node", "gpus_per_node", "suites", "sizes", "measurements", "estimated_s"):
    if key not in plan:
        bad.append(f"PLAN has no '{key}'")
got = {"nodes": plan.get("nodes"), "ranks": plan.get("ranks"),
       "ranks_per_node": {short(h): n for h, n in (plan.get("ranks_per_node") or {}).items()}}
for key, value in want.items():
    if got.get(key) != value:
        bad.append(f"PLAN {key} = {got.get(key)!r}, want {value!r}")
if isinstance(plan.get("hosts"), list) and len(plan["hosts"]) != plan.get("nodes"):
    bad.append(f"PLAN hosts {plan['hosts']!r} do not number nodes = {plan.get('nodes')}")
print("; ".join(bad) if bad else f"PLAN nodes={got['nodes']} ranks={got['ranks']} ranks_per_node={got['ranks_per_node']}")
sys.exit(1 if bad else 0)
PY
            ); then
                why+=("$msg")
            fi
        else
            msg="(no plan expected)"
        fi
        if ((${#why[@]} == 0)); then
            pass "$name: job $id $state, $tasks tasks, exit $exitcode; ${msg:-}"
        else
            fail "$name: job $id: $(
                IFS=';'
                echo "${why[*]}"
            )"
        fi
    done

    # 4. The health check: slurmd runs jobs/healthcheck.sh every 5 s (HealthCheckProgram). An unhealthy
    #    recorded run must drain the node with the check's REASON; a healthy one must bring it back up.
    say "health check"
    node_state() { t 5 sinfo -h -n "$HOST" -o '%T|%E' 2>/dev/null | head -n 1; }
    echo "$HC_UNHEALTHY" >"$WORK/hc-from"
    got=""
    for _ in $(seq 1 40); do
        got=$(node_state)
        [[ $got == drain* && $got == *"ipcbench check: FAIL"* ]] && break
        sleep 1
    done
    if [[ $got == drain* && $got == *"ipcbench check: FAIL: GPU 0 -> GPU 1"* ]]; then
        pass "health check: an unhealthy run drains the node: ${got#*|}"
    else
        fail "health check: the node was not drained with the check's reason (state|reason: '$got')"
    fi
    echo "$HC_HEALTHY" >"$WORK/hc-from"
    for _ in $(seq 1 40); do
        got=$(node_state)
        [[ $got == idle* ]] && break
        sleep 1
    done
    if [[ $got == idle* ]]; then
        pass "health check: a healthy run leaves the node up (the check resumed the node it had drained)"
    else
        fail "health check: the node did not come back up on a healthy run (state|reason: '$got')"
    fi
    echo "----- $WORK/log/healthcheck.log"
    tail -n 8 "$WORK/log/healthcheck.log" 2>/dev/null || echo "(no health-check log)"

    if ((FAILED > 0)); then
        say "daemon logs (last lines)"
        tail -n 20 "$WORK"/log/*.log 2>/dev/null || true
    fi
else
    # Fallback when no cluster could be started: what can still be checked without one.
    # The cluster failure is already counted; sbatch --test-only (which needs slurmctld) is shown for
    # information: without a registered node it cannot say much.
    say "fallback checks (no cluster)"
    for spec in "${JOBS[@]}"; do
        IFS='|' read -r name _ _ _ opts _ <<<"$spec"
        read -r -a opt_array <<<"$opts"
        if ((CTLD_UP)); then
            out=$(t 30 sbatch --test-only "${opt_array[@]}" 2>&1 || true)
            echo "info: $name: sbatch --test-only $opts: $out"
        fi
    done
    for f in jobs/*.sbatch jobs/common.sh; do
        if out=$(bash -n "$f" 2>&1); then pass "bash -n $f"; else fail "bash -n $f: $out"; fi
    done
    if command -v shellcheck >/dev/null; then
        if out=$(shellcheck -x jobs/*.sbatch jobs/common.sh .ci/*.sh 2>&1); then
            pass "shellcheck jobs/ .ci/"
        else
            echo "$out"
            fail "shellcheck jobs/ .ci/ (output above)"
        fi
    else
        echo "shellcheck not installed: skipped"
    fi
fi

# ---------------------------------------------------------------------------------------------------------
say "shutdown"
cleanup
if command -v pgrep >/dev/null && pgrep -f "$SLURM_CONF" >/dev/null 2>&1; then
    fail "shutdown: a daemon started with $SLURM_CONF is still running"
else
    echo "slurmctld and slurmd stopped$( ((STARTED_MUNGED)) && echo ", munged stopped")"
fi
FINISHED=1
trap - ERR
summary
exit $((FAILED > 0 ? 1 : 0))
