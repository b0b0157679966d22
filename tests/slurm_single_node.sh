#!/usr/bin/env bash
# A real one-node Slurm on localhost (Debian's slurm-wlm and munge): start munged, slurmctld and
# slurmd from a private configuration, export a plan of two tiny runs with
# `python -m kit launch plan`, submit its sbatch array and wait (bounded) for both runs.
# Usage: tests/slurm_single_node.sh PYTHON WORK_DIR
# Exit 0: both runs finished; 77: skipped (the reason is printed); anything else: failure.
set -uo pipefail
python=$1
work=$(mkdir -p "$2" && cd "$2" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }

for tool in munged slurmctld slurmd sbatch squeue scontrol; do
    command -v "$tool" >/dev/null || skip "$tool not installed (Debian: apt-get install slurm-wlm munge)"
done
[ "$(id -u)" = 0 ] || skip "the Slurm daemons need root here (running as $(id -un))"

host=$(hostname -s)
conf="$work/etc"
mkdir -p "$conf" "$work/state" "$work/spool" "$work/munge" "$work/log"
pids=()
cleanup() {
    # a job step still running when its daemons go would leave its srun waiting for ever
    pkill -f -- "$work/plan/" 2>/dev/null
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    wait 2>/dev/null
}
trap cleanup EXIT

# munge: a private key and socket, so that no system daemon is needed or disturbed
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$work/munge/munge.key"
socket="$work/munge/munge.socket"
munged --force --foreground --key-file="$work/munge/munge.key" --socket="$socket" \
    --pid-file="$work/munge/munged.pid" --log-file="$work/log/munged.log" \
    --seed-file="$work/munge/seed" &
pids+=($!)

cpus=$(nproc)
memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
cat > "$conf/slurm.conf" <<EOF
ClusterName=kit
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=60
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$conf/slurm.conf"
slurmctld -D -f "$SLURM_CONF" >"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$work/log/slurmd.out" 2>&1 &
pids+=($!)

ready=""
for _ in $(seq 60); do
    if sinfo -h -o "%T" 2>/dev/null | grep -q -E "idle|mixed|allocated"; then ready=1; break; fi
    sleep 1
done
if [ -z "$ready" ]; then
    tail -n 5 "$work"/log/*.log "$work"/log/*.out 2>/dev/null
    skip "slurmctld/slurmd did not bring the node up within 60 s (logs above)"
fi

cat > "$work/base.yaml" <<EOF
model: resnet10
width: 0.125
num_classes: 4
seed: 1
data: {kind: synthetic, image_size: 16, synthetic: {num_train: 128, num_eval: 64, noise: 0.1,
       components: [{weight: 1.0, cues: [colour]}, {weight: 1.0, cues: [position]}]}}
batch_size: 16
iterations: 4
lr: 0.01
bn_recalibration_batches: 1
eval_every: 0
checkpoint_every: 0
log_every: 2
num_workers: 0
output_dir: $work/runs
EOF
cd "$repo" || exit 1
PYTHONPATH="$repo" "$python" -m kit launch plan --config "$work/base.yaml" --runs 2 --total 8 \
    --seeds 1 2 --out "$work/plan" --launch timeout_min=10 --launch "setup=['export OMP_NUM_THREADS=1']" \
    || exit 1
job=$(sbatch --parsable "$work/plan/train.sbatch") || exit 1
echo "submitted array job $job"
for _ in $(seq 300); do
    [ -f "$work/runs/cat2/seed1/DONE" ] && [ -f "$work/runs/cat2/seed2/DONE" ] && break
    sleep 1
done
for _ in $(seq 60); do  # the runs are done; let their steps end before the daemons do
    [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
    sleep 1
done
squeue -a 2>/dev/null
for seed in 1 2; do
    if [ ! -f "$work/runs/cat2/seed$seed/DONE" ]; then
        echo "FAIL: run seed$seed did not finish within 300 s"
        tail -n 20 "$work"/plan/logs/* "$work"/log/slurmd.log 2>/dev/null
        exit 1
    fi
    echo "seed$seed: $(cat "$work/runs/cat2/seed$seed/DONE")"
done
echo "OK: the exported sbatch array trained both runs under Slurm"
