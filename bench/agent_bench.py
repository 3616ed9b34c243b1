"""Live cost: CPU per tick and peak RSS of ``watchdog run`` against ``gpustat.new_query()``.

Both run on the same fake NVML (below nvidia-ml-py, so both go through the real binding)
with the same GPU count, at the same time, each in its own process::

    python -m watchdog.testing.fakenvml healthy:8 -- watchdog run --source nvml --interval 1s \\
        --duration 60s

The agent's CPU (user + system, all threads: each thread's ``schedstat``, or
``/proc/PID/stat`` in clock ticks where the kernel keeps no scheduler statistics, which is
why the default run is a minute long) is read after a warm-up (start-up, imports and the
first ticks excluded) and again just before the run ends; divided by the ticks in between
it is the CPU per tick (sampling + detection). Peak RSS is ``VmHWM`` from
``/proc/PID/status``. gpustat's CPU per query is ``time.process_time()`` around each
``gpustat.new_query()`` in a child process with the fake installed (one untimed warm-up
query first), one query a second (or as often as its own 0.1 s sleep per GPU allows)
during the agent's measurement window: the two see the same machine, which on a shared
VM moves by a quarter from one minute to the next. The budget (DESIGN.md, issue 7): agent
CPU/tick <= gpustat CPU/query, RSS <= 150 MB (checked for every GPU count; the budget
names 8).

Usage: ``python bench/agent_bench.py [--gpus 8,64] [--duration 60] [--warmup 8]
[--model FILE|own] [--nvml]``; ``--quick``: 8 GPUs, 7 s run, 3 s warm-up (a smoke run; the
figures are noisy). ``--model FILE|own`` measures the agent a second time ("full"):
scoring with a trained anomaly model and with alerting on (a log sink), since DESIGN's
budget counts sampling, detection, model and alerting together; ``own`` first trains the
model on 2 h of the fake node's own healthy readings (a manual clock: seconds, not hours),
as ``model: auto`` would on a node, so the model sees the node it was fitted on (a model
of another node can flag every GPU, which measures incident handling, not the steady
state); ``--nvml`` measures on this machine's real GPUs instead of the fake.
Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

RSS_BUDGET_MB = 150.0
OWN_MODEL_HOURS = 2.0  # the fake's healthy readings a ``--model own`` is trained on
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Row:
    """One GPU count: the agent's and gpustat's figures (CPU in ms)."""

    gpus: int
    label: str  # "rules", or "full": rules, model and alerting
    agent_ms_per_tick: float
    ticks: float
    agent_rss_mb: float
    gpustat_ms_per_query: float

    @property
    def ratio(self) -> float:
        return self.agent_ms_per_tick / self.gpustat_ms_per_query

    @property
    def passed(self) -> bool:
        return self.ratio <= 1.0 and self.agent_rss_mb <= RSS_BUDGET_MB


def fake_command(scenario: str | None, *tool: str) -> list[str]:
    """``tool`` under the fake NVML for ``scenario``; ``None`` = the real NVML (``--nvml``)."""
    if scenario is None:
        return [sys.executable, "-m", "watchdog", *tool[1:]] if tool[0] == "watchdog" \
            else list(tool)
    return [sys.executable, "-m", "watchdog.testing.fakenvml", scenario, "--", *tool]


def proc_cpu(pid: int) -> float:
    """CPU seconds ``pid`` has run so far, all threads.

    From each thread's ``/proc/PID/task/TID/schedstat`` (nanoseconds on the CPU) where the
    kernel has it: ``/proc/PID/stat``'s utime + stime count in clock ticks (10 ms), too
    coarse for a few milliseconds a second (the agent's threads live as long as it does).
    Where schedstat reads zero (kernels without scheduler statistics), ``stat``'s total."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = (int(fields[11]) + int(fields[12])) / _TICKS  # fields 14 and 15 of stat(5)
    ns = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns += int(f.read().split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return ticks
    return ns / 1e9 if ns else ticks


def proc_hwm_mb(pid: int) -> float:
    """Peak resident set (VmHWM) of ``pid`` in MB (10^6 bytes)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def measure_agent(gpus: int | None, duration: float, warmup: float,
                  model: str | None = None) -> tuple[float, float, float, float, int]:
    """(CPU seconds per tick, ticks measured, peak RSS MB, gpustat's CPU seconds per
    query, GPUs gpustat saw) of a 1 Hz ``watchdog run``, with gpustat queried once a
    second in its own process during the same measurement window: both see the same
    machine (on a shared VM the load moves by a quarter between minutes).

    ``gpus`` None: the real NVML. ``model``: a trained model file the agent scores with
    (config ``model:``), with alerting on (a ``log`` sink), so the figure covers all that
    DESIGN's budget counts: sampling, detection, the model and alerting."""
    import shutil
    import tempfile

    state = tempfile.mkdtemp(prefix="agent-bench-")  # never the user's real agent state
    extra: list[str] = []
    if model is not None:
        cfg = os.path.join(state, "watchdog.yaml")
        with open(cfg, "w") as f:
            f.write(f"source: nvml\nmodel: {json.dumps(os.path.abspath(model))}\n"
                    "notify:\n  sinks:\n    - {name: journal, type: log}\n")
        extra = ["--config", cfg]
    scenario = None if gpus is None else f"healthy:{gpus}"
    cmd = fake_command(scenario, "watchdog", "run", *extra, "--source", "nvml",
                       "--interval", "1s", "--duration", f"{duration:g}s", "--state-dir", state)
    # its own claims folder: the bench's agent may run beside the node's own on purpose
    # (bench/gpu_checks.sh), where one sharing /run/nvml-watchdog would be refused
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "RUNTIME_DIRECTORY": state})
    window = max(duration - warmup - 1.5, 1.0)
    gp = None
    try:
        time.sleep(1.0)  # gpustat's child imports while the agent starts, not in the window
        # gpustat sleeps 0.1 s per GPU inside each query (its process CPU percentages):
        # at 64 GPUs a query takes 6.5 s of wall time, so pace it to fit the window
        pace = max(1.0, 0.1 * (gpus or 8) + 0.2)
        gp = start_gpustat(gpus, max(2, int(window / pace) - 1), delay=warmup - 0.5,
                           pace=pace)
        time.sleep(warmup - 1.0)
        if proc.poll() is not None:
            raise SystemExit(f"agent exited early (rc {proc.returncode}): "
                             f"{proc.stderr.read().strip()[-400:]}")
        c0, t0 = proc_cpu(proc.pid), time.monotonic()
        time.sleep(window)
        if proc.poll() is not None:
            raise SystemExit(f"agent exited before the end of the measurement "
                             f"(rc {proc.returncode}): {proc.stderr.read().strip()[-400:]}")
        c1, t1 = proc_cpu(proc.pid), time.monotonic()
        rss = proc_hwm_mb(proc.pid)
        _, err = proc.communicate(timeout=duration + 30)
    except BaseException:
        if gp is not None:
            gp.kill()
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(state, ignore_errors=True)
    assert gp is not None
    g, seen = finish_gpustat(gp, gpus)
    if proc.returncode != 0:
        raise SystemExit(f"agent failed (rc {proc.returncode}): {err.strip()[-400:]}")
    if model is not None and f"anomaly model {os.path.abspath(model)} loaded" not in err:
        raise SystemExit(f"the agent did not say it loaded the model: {err.strip()[-400:]}")
    ticks = t1 - t0  # 1 Hz: one tick per second of the window
    return (c1 - c0) / ticks, ticks, rss, g, seen


_GPUSTAT_CHILD = """
import json, sys, time
if sys.argv[1] != "nvml":
    from watchdog.testing import fakenvml
    fakenvml.install(sys.argv[1])
import gpustat
gpustat.new_query()
n, delay, pace = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
due, cpu = time.monotonic() + delay, 0.0
for _ in range(n):
    time.sleep(max(0.0, due - time.monotonic()))
    due += pace
    c0 = time.process_time()
    q = gpustat.new_query()
    cpu += time.process_time() - c0
print(json.dumps({"cpu": cpu / n, "gpus": len(q.gpus)}))
"""


def start_gpustat(gpus: int | None, queries: int, delay: float = 0.0,
                  pace: float = 0.0) -> subprocess.Popen[str]:
    """A child timing ``queries`` calls of ``gpustat.new_query()`` (after one untimed
    warm-up), the first ``delay`` s after it starts and then one every ``pace`` s, on the
    fake with ``gpus`` GPUs or on the real NVML for ``None``."""
    return subprocess.Popen([sys.executable, "-c", _GPUSTAT_CHILD,
                             "nvml" if gpus is None else f"healthy:{gpus}", str(queries),
                             str(delay), str(pace)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_gpustat(child: subprocess.Popen[str], gpus: int | None) -> tuple[float, int]:
    """(CPU seconds per query, GPUs gpustat saw) from a :func:`start_gpustat` child."""
    out, err = child.communicate(timeout=600)
    if child.returncode != 0:
        raise SystemExit(f"gpustat child failed (rc {child.returncode}): {err.strip()[-400:]}")
    doc = json.loads(out.strip().splitlines()[-1])
    if gpus is not None and doc["gpus"] != gpus:
        raise SystemExit(f"gpustat saw {doc['gpus']} GPUs, expected {gpus}")
    return float(doc["cpu"]), int(doc["gpus"])


_RECORD_CHILD = """
import sys
from watchdog.clock import ManualClock
from watchdog.testing import fakenvml
clock = ManualClock(1_767_225_600.0)
fakenvml.install(sys.argv[1], time_fn=clock.now)
from watchdog.commands.record import record_live
from watchdog.sources import SourceOptions
record_live("nvml", SourceOptions(), sys.argv[2], duration=float(sys.argv[3]), interval=1.0,
            clock=clock)
"""


def own_model(gpus: int, hours: float, directory: str) -> str:
    """A model of the fake node's own normal, as ``model: auto`` would fit on the node:
    ``hours`` of the fake's healthy readings recorded on a manual clock (seconds of CPU,
    not hours), then ``watchdog train`` on that recording. Returns the model's path."""
    rec, out = os.path.join(directory, "own.wdrec"), os.path.join(directory, "own.wdm")
    for cmd in ([sys.executable, "-c", _RECORD_CHILD, f"healthy:{gpus}", rec,
                 str(hours * 3600.0)],
                [sys.executable, "-m", "watchdog", "train", "--source", rec,
                 "--output", out]):
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"training the node's own model failed (rc {done.returncode}): "
                             f"{done.stderr.strip()[-400:]}")
    return out


def run(gpu_counts: list[int | None], duration: float, warmup: float,
        model: str | None = None) -> list[Row]:
    """Measure gpustat then the agent (and the agent with ``model``: a file, or ``own``
    for one trained on each fake node's own readings) for each GPU count."""
    import shutil
    import tempfile

    rows = []
    for n in gpu_counts:
        for label, m in (("rules", None), ("full", model)):
            if label == "full" and model is None:
                continue
            tmp = None
            if m == "own":
                assert n is not None
                tmp = tempfile.mkdtemp(prefix="agent-bench-model-")
                m = own_model(n, OWN_MODEL_HOURS, tmp)
            try:
                a, ticks, rss, g, seen = measure_agent(n, duration, warmup, m)
            finally:
                if tmp is not None:
                    shutil.rmtree(tmp, ignore_errors=True)
            rows.append(Row(seen, label, a * 1e3, ticks, rss, g * 1e3))
    return rows


def table(rows: list[Row]) -> str:
    lines = [f"{'GPUs':>5} {'agent ms/tick':>14} {'gpustat ms/query':>17} {'ratio':>6} "
             f"{'RSS MB':>7}  {'verdict':<7} {'agent':<11} (ratio <= 1.0, "
             f"RSS <= {RSS_BUDGET_MB:g} MB)"]
    for r in rows:
        lines.append(f"{r.gpus:>5} {r.agent_ms_per_tick:>14.2f} {r.gpustat_ms_per_query:>17.2f} "
                     f"{r.ratio:>6.2f} {r.agent_rss_mb:>7.1f}  "
                     f"{'PASS' if r.passed else 'FAIL':<7} {r.label:<11}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="8,64", help="comma-separated GPU counts (default 8,64)")
    ap.add_argument("--duration", type=float, default=60.0, help="agent run, seconds")
    ap.add_argument("--warmup", type=float, default=8.0, help="start-up excluded, seconds")
    ap.add_argument("--quick", action="store_true", help="8 GPUs, 7 s run (smoke test)")
    ap.add_argument("--model", metavar="FILE|own", default=None,
                    help="also measure the agent with a trained model and alerting on: a "
                         "model file, or `own` to train one on 2 h of the fake node's own "
                         "healthy readings first (as `model: auto` would on a node)")
    ap.add_argument("--nvml", action="store_true",
                    help="the real GPUs of this machine instead of the fake (--gpus ignored)")
    args = ap.parse_args(argv)
    if args.quick:
        counts, duration, warmup = [8], 7.0, 3.0
    else:
        counts = [int(x) for x in args.gpus.split(",")]
        duration, warmup = args.duration, args.warmup
    if duration < warmup + 2.5:
        ap.error("--duration must exceed --warmup by at least 2.5 s")
    if args.model == "own" and args.nvml:
        ap.error("--model own trains on the fake's readings; with --nvml give a model file "
                 "(`watchdog train --source nvml --duration 2h --output FILE` on the node)")
    if args.model not in (None, "own") and not os.path.isfile(args.model):
        ap.error(f"--model {args.model}: no such file")
    gpu_counts: list[int | None] = [None] if args.nvml else list(counts)
    rows = run(gpu_counts, duration, warmup, args.model)
    print(table(rows))
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
