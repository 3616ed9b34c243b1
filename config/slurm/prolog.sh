#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/nvml-watchdog.sh; runs as root on
# the node before the job starts): tell the agent which job the node runs, for nodes given
# whole to one job. The agent reads the file with `job: {id_file: /run/nvml-watchdog/slurm-job}`
# every 10 s; without it the agent reads the job from its GPUs' processes.
# The Epilog (the same script, linked as epilog) removes the file when that job ends.
# It calls no Slurm command and always exits 0: a Prolog that fails drains the node.
JOB_FILE=/run/nvml-watchdog/slurm-job
case "$(basename "$0")" in
*epilog*)
    # only this job's file: a later job's prolog may already have written its own
    [ "$(cat "$JOB_FILE" 2>/dev/null)" = "$SLURM_JOB_ID" ] && rm -f "$JOB_FILE"
    ;;
*)
    mkdir -p "$(dirname "$JOB_FILE")" &&
        printf '%s\n' "$SLURM_JOB_ID" > "$JOB_FILE.tmp" &&
        chmod 0644 "$JOB_FILE.tmp" && mv -f "$JOB_FILE.tmp" "$JOB_FILE"
    ;;
esac
exit 0
