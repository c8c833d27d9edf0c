#!/bin/bash
# Slurm node health check with `ipcbench check` (jobs/README.md, "Health check").
#
# In slurm.conf:   HealthCheckProgram=/path/to/ipcbench/jobs/healthcheck.sh
#                  HealthCheckInterval=300        HealthCheckNodeState=IDLE   (a check needs the node's GPUs)
# slurmd runs it as root on the node. It measures every GPU pair of the node (`mpirun -np <GPUs> ipcbench check`,
# well inside the 60 s Slurm gives a health check), and:
#   exit 0 (healthy)          the node stays up; a node this script drained earlier is resumed
#   exit 1 (unhealthy)        the node is drained, the reason being the check's REASON line
#   exit 2 (cannot judge)     drained too (the gate fails closed), unless IPCBENCH_HC_DRAIN_UNJUDGED=0
#   no answer in time         drained ("timed out")
# Settings (environment, or the file IPCBENCH_HC_CONF, default /etc/default/ipcbench-healthcheck):
#   IPCBENCH_HC_EXE        the ipcbench command (default: ipcbench on PATH; e.g. /opt/ipcbench/.venv/bin/ipcbench)
#   IPCBENCH_HC_LAUNCH     the launcher and its options (default: mpirun -np <GPUs>, + --allow-run-as-root for
#                          Open MPI as root)
#   IPCBENCH_HC_ARGS       more arguments for `ipcbench check` (e.g. --thresholds /etc/ipcbench/site.toml)
#   IPCBENCH_HC_FROM       judge this recorded run instead of measuring (testing; CI's Slurm test does): a run of
#                          any host (`check --from` judges any node's run); the node drained is always this one
#   IPCBENCH_HC_DIR        where the measured runs go (default /var/tmp/ipcbench-check); IPCBENCH_HC_KEEP of them
#                          are kept (default 20): this script removes only its own older run directories there
#   IPCBENCH_HC_TIMEOUT    seconds before the check is stopped (default 50)
#   IPCBENCH_HC_LOG        append what happened to this file
set -u

CONF=${IPCBENCH_HC_CONF:-/etc/default/ipcbench-healthcheck}
# shellcheck disable=SC1090 # a site's settings
[[ -r $CONF ]] && . "$CONF"
NODE=${SLURMD_NODENAME:-$(hostname -s)}
EXE=${IPCBENCH_HC_EXE:-ipcbench}
LIMIT=${IPCBENCH_HC_TIMEOUT:-50}
TAG="ipcbench check"

log() {
    local line
    line="$(date '+%F %T') $NODE: $*"
    [[ -n ${IPCBENCH_HC_LOG:-} ]] && echo "$line" >>"$IPCBENCH_HC_LOG"
    echo "$line"
}

node_reason() { # the node's current drain reason ("" when none)
    scontrol -o show node "$NODE" 2>/dev/null | sed -n 's/.* Reason=\(.*\) \[[^]]*\].*/\1/p' | head -n 1
}

drain() { # says "drained" only when scontrol did it (outside Slurm it cannot: said so, with the reason)
    local reason="$TAG: $1" err
    reason=${reason:0:200}
    if err=$(scontrol update nodename="$NODE" state=drain reason="$reason" 2>&1); then
        log "drained: $reason"
    else
        log "could not drain $NODE (scontrol: ${err:-exit status $?}); the reason: $reason"
    fi
}

resume_own() { # resume the node only if this script drained it
    local r err
    r=$(node_reason)
    if [[ $r == "$TAG"* ]]; then
        if err=$(scontrol update nodename="$NODE" state=resume 2>&1); then
            log "resumed (was: $r)"
        else
            log "could not resume $NODE (scontrol: ${err:-exit status $?}); drained for: $r"
        fi
    fi
}

read -r -a extra <<<"${IPCBENCH_HC_ARGS:-}"
if [[ -n ${IPCBENCH_HC_FROM:-} ]]; then
    cmd=("$EXE" check --from "$IPCBENCH_HC_FROM")
else
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    if ((gpus < 1)); then
        drain "cannot judge: no GPU visible to the health check (nvidia-smi -L)"
        exit 0
    fi
    if [[ -n ${IPCBENCH_HC_LAUNCH:-} ]]; then
        read -r -a launch <<<"$IPCBENCH_HC_LAUNCH"
    else
        launch=(mpirun -np "$((gpus > 1 ? gpus : 2))")
        if mpirun --version 2>&1 | grep -q 'Open MPI' && ((EUID == 0)); then launch+=(--allow-run-as-root --oversubscribe); fi
    fi
    dir=${IPCBENCH_HC_DIR:-/var/tmp/ipcbench-check}
    mkdir -p "$dir"
    # Keep the newest IPCBENCH_HC_KEEP-1 of this script's own runs (check-YYYYmmdd-HHMMSS), then add one.
    mapfile -t old < <(find "$dir" -maxdepth 1 -type d -name 'check-[0-9]*' -printf '%f\n' | sort -r |
        tail -n +"${IPCBENCH_HC_KEEP:-20}")
    for o in "${old[@]}"; do rm -rf -- "${dir:?}/$o"; done
    cmd=("${launch[@]}" "$EXE" check --quiet --out "$dir/check-$(date +%Y%m%d-%H%M%S)")
fi

out=$(timeout --kill-after=5 "$LIMIT" "${cmd[@]}" "${extra[@]}" 2>&1)
rc=$?
reason=$(grep '^REASON: ' <<<"$out" | tail -n 1)
reason=${reason#REASON: }
case $rc in
0)
    log "healthy: $reason"
    resume_own
    ;;
1) drain "${reason:-unhealthy (no REASON line)}" ;;
2)
    if [[ ${IPCBENCH_HC_DRAIN_UNJUDGED:-1} == 1 ]]; then
        drain "${reason:-cannot judge: $(tail -n 1 <<<"$out")}"
    else
        log "not judged, left as it is: ${reason:-$(tail -n 1 <<<"$out")}"
    fi
    ;;
124 | 137) drain "cannot judge: no answer within ${LIMIT} s" ;;
*) drain "cannot judge: the check failed (exit $rc): $(tail -n 1 <<<"$out")" ;;
esac
exit 0
