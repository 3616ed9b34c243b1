#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, in one run of about 8.5 minutes: the gpu-marked
# tests, `watchdog check` against gpustat, the agent's CPU against gpustat's with a job
# running, and a labelled recording of a job change followed by a slowed GPU
# (bench/gpu_workload.py) taken by nvidia-smi, `watchdog record` and the running agent at
# once.
#
# Run from the repository root on a GPU node, with the project's dependencies that node
# lacks as wheels in .whl/ and the project's own wheel in .whl/self/
# (`pip wheel --no-deps -w .whl/self .`):
#     bash bench/gpu_checks.sh             # writes $OUT/gpu.tar.gz
# Every step runs even when an earlier one fails; each step's output is in the archive.
set -u
OUT=${OUT:-/tmp/gpu-out}
D=$OUT/gpu
mkdir -p "$D" /tmp/site /tmp/bin
pack() { tar -C "$OUT" -czf "$OUT/gpu.tar.gz" gpu && rm -rf "$D"; }
trap pack EXIT
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$D/pip.txt" 2>&1
export PYTHONPATH=/tmp/site:$PWD
printf '#!/bin/sh\nexec python3 -m watchdog "$@"\n' >/tmp/bin/watchdog
chmod +x /tmp/bin/watchdog
export PATH=/tmp/bin:$PATH

{ date -u; nvidia-smi; python3 -c 'import pynvml, sklearn, numpy; print(pynvml.__file__,
  sklearn.__version__, numpy.__version__)'; } >"$D/env.txt" 2>&1

# 1. gpu-marked tests (idle GPU)
timeout 120 python3 -m pytest -p no:cacheprovider -n 0 -m gpu -q tests/test_nvml_gpu.py \
    >"$D/pytest_gpu.txt" 2>&1

# 2. watchdog check against gpustat, cold start, idle GPU (five of each, wall seconds)
TIMEFORMAT='%R s wall %U user %S sys'
for i in 1 2 3 4 5; do
  { time watchdog check --json --duration 0 >"$D/check_$i.json" 2>"$D/check_$i.err"; } \
      2>>"$D/check_times.txt"
  echo "  check rc $?" >>"$D/check_times.txt"
  { time python3 -m gpustat --json >"$D/gpustat_$i.json" 2>"$D/gpustat_$i.err"; } \
      2>>"$D/check_times.txt"
  echo "  gpustat rc $?" >>"$D/check_times.txt"
done
watchdog check >"$D/check_human.txt" 2>&1; echo "rc $?" >>"$D/check_human.txt"
# the same from an installed copy (bytecode written at install, as on a real node: the
# image keeps none, and compiling 172 modules was half of check's start on 2026-11-26)
python3 -m pip install -q --no-deps --target /tmp/wdsite .whl/self/*.whl \
    >"$D/pip_self.txt" 2>&1
for i in 1 2 3 4 5; do
  { time PYTHONPATH=/tmp/wdsite:/tmp/site python3 -m watchdog check --json --duration 0 \
      >/dev/null 2>&1; } 2>>"$D/check_installed_times.txt"
  { time python3 -m gpustat --json >/dev/null 2>&1; } 2>>"$D/check_installed_times.txt"
done

# 3. the labelled run: recorders and the agent first, then the workload
nvidia-smi --query-gpu=timestamp,index,uuid,name,pstate,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,power.limit,enforced.power.limit,temperature.gpu,temperature.memory,clocks.sm,clocks.mem,clocks.max.sm,clocks_event_reasons.active,pcie.link.gen.current,pcie.link.width.current \
    --format=csv -lms 1000 >"$D/smi.csv" 2>"$D/smi.err" &
SMI=$!
watchdog record --source nvml --interval 1s --output "$D/run.wdrec" >"$D/record.txt" 2>&1 &
REC=$!
watchdog run --source nvml --interval 1s --state-dir /tmp/wd-state >"$D/agent.log" 2>&1 &
AGENT=$!
sleep 3
python3 bench/gpu_workload.py idle:15 train:120 change:20 train2:120 slow:120 train2:30 \
    >"$D/phases.jsonl" 2>"$D/workload.err" &
WORK=$!
# the agent's cost against gpustat's while the first job trains (the bench's own agent)
sleep 40
timeout 150 python3 bench/agent_bench.py --nvml --duration 60 --warmup 8 \
    >"$D/agent_bench.txt" 2>&1
wait $WORK
echo "workload rc $?" >>"$D/phases.jsonl.rc"
sleep 5
grep -E '^(VmHWM|VmRSS)' /proc/$AGENT/status >"$D/agent_mem.txt" 2>&1
cat /proc/$AGENT/stat >>"$D/agent_mem.txt" 2>&1
getconf CLK_TCK >>"$D/agent_mem.txt"
kill -TERM $AGENT $REC $SMI
( sleep 20; kill -KILL $AGENT $REC 2>/dev/null ) &  # a stop that hangs must not eat the call
wait $AGENT; echo "agent rc $?" >>"$D/agent.log"
wait $REC; echo "record rc $?" >>"$D/record.txt"
cp -r /tmp/wd-state "$D/state" 2>/dev/null

# 4. what replay says of the same run, both recordings
timeout 60 watchdog replay "$D/smi.csv" --json >"$D/replay_smi.json" 2>"$D/replay_smi.err"
echo "rc $?" >>"$D/replay_smi.err"
timeout 60 watchdog replay "$D/run.wdrec" --json >"$D/replay_rec.json" 2>"$D/replay_rec.err"
echo "rc $?" >>"$D/replay_rec.err"
