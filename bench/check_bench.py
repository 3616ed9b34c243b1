"""Cold start to verdict: ``watchdog check --json`` against ``gpustat --json``.

Both run as fresh processes through the same runner, on the same fake NVML scenario (the
fake sits below nvidia-ml-py, so both tools go through the real binding)::

    python -m watchdog.testing.fakenvml healthy -- gpustat --json
    python -m watchdog.testing.fakenvml healthy -- watchdog check --json --duration 0
    python -m watchdog.testing.fakenvml healthy -- watchdog check --json

``--duration 0`` is one reading, like gpustat's one read: the like-for-like comparison the
budget in DESIGN.md is about. The default check samples for 1 s (4 readings) on purpose (counter
deltas, XIDs, sustained conditions); it is timed too, so the cost of the burst is visible.
Runs are interleaved (gpustat, check, check, gpustat, ...) so drift in machine load hits
every command alike. Prints median and min wall time per command, the ratios
check / gpustat (below 1.0 = check is faster), and the median CPU time (user + sys) of the
child process: gpustat sleeps 0.1 s per GPU that has processes (to measure their CPU use),
so its wall time is mostly waiting, and the CPU column shows the work apart from that.
Bounded: about ``runs x 3`` seconds.

``watchdog check --agent --json`` is timed too: the probe of a running agent's judgment
(its state, no NVML), as a scheduler runs it every few seconds, run directly (it loads no
NVML, fake or real); an agent on a simulated node runs beside it meanwhile (at 1x, so
its own cost is small) so there is a status to read. Budget: under 0.3 s of CPU.

Usage: ``python bench/check_bench.py [--runs 15] [--scenario healthy]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def command(scenario: str, *tool: str) -> list[str]:
    return [sys.executable, "-m", "watchdog.testing.fakenvml", scenario, "--", *tool]


def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def once(cmd: list[str], env: dict[str, str]) -> tuple[float, float, dict]:
    """Wall and CPU seconds from process start to exit, and the parsed JSON it printed."""
    cpu0 = _child_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - t0
    cpu = _child_cpu() - cpu0
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{' '.join(cmd[3:])}: no JSON on stdout (rc {proc.returncode}): "
                         f"{proc.stderr.strip()[-300:]}") from None
    return elapsed, cpu, doc


def compiled() -> None:
    """Byte-compile nvml-watchdog as ``pip install`` does for a wheel: gpustat comes from
    site-packages with its ``.pyc`` files, and a checkout run with
    ``PYTHONDONTWRITEBYTECODE`` would otherwise compile ~80 modules from source in every
    run (60 ms of CPU that no installed agent spends)."""
    import compileall
    from pathlib import Path

    import watchdog

    compileall.compile_dir(str(Path(watchdog.__file__).parent), quiet=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="runs per command (default 15)")
    ap.add_argument("--scenario", default="healthy", help="fake NVML scenario (default healthy)")
    args = ap.parse_args(argv)
    env = {**os.environ, "NO_COLOR": "1"}
    compiled()
    import tempfile

    state = tempfile.mkdtemp(prefix="check-bench-")
    agent = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "--source", "sim",
                              "--state-dir", state, "--duration", "1h"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        return _measure(args, env, state)
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def _measure(args: argparse.Namespace, env: dict[str, str], state: str) -> int:
    probe = [sys.executable, "-m", "watchdog", "check", "--agent", "--state-dir", state,
             "--json"]
    for _ in range(600):  # the agent's first status (it writes one every 5 s)
        if json.loads(subprocess.run(probe, capture_output=True, text=True, env=env,
                                     check=False).stdout)["status"] != "UNKNOWN":
            break
        time.sleep(0.1)
    cmds = {
        "gpustat --json": command(args.scenario, "gpustat", "--json"),
        "watchdog check --json --duration 0": command(args.scenario, "watchdog", "check",
                                                       "--json", "--duration", "0"),
        "watchdog check --json (default 1 s burst)": command(args.scenario, "watchdog",
                                                             "check", "--json"),
        "watchdog check --agent --json": probe,
    }
    # One untimed run each: fills the OS file cache alike, and validates the outputs.
    for name, cmd in cmds.items():
        _, _, doc = once(cmd, env)
        if name.startswith("gpustat"):
            print(f"# {name}: {len(doc['gpus'])} GPUs")
        else:
            print(f"# {name}: status {doc['status']}, {doc['gpu_count']} GPUs")
            if doc["status"] == "UNKNOWN":
                print(f"#   could not judge: {doc['problems'][0]['message']}")
    times: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(args.runs):
        for name, cmd in cmds.items():
            wall, cpu, _ = once(cmd, env)
            times[name].append(wall)
            cpus[name].append(cpu)
    base = "gpustat --json"
    base_med, base_min = statistics.median(times[base]), min(times[base])
    base_cpu = statistics.median(cpus[base])
    print(f"# fake NVML scenario {args.scenario!r}, {args.runs} runs each, python "
          f"{sys.version.split()[0]}; wall = cold start to verdict, cpu = user+sys")
    print(f"{'command':42s} {'wall med':>8s} {'wall min':>8s} {'ratio med':>9s} "
          f"{'ratio min':>9s} {'cpu med':>8s} {'cpu ratio':>9s}")
    for name, ts in times.items():
        med, lo, cpu = statistics.median(ts), min(ts), statistics.median(cpus[name])
        print(f"{name:42s} {med:8.3f} {lo:8.3f} {med / base_med:9.2f} {lo / base_min:9.2f} "
              f"{cpu:8.3f} {cpu / base_cpu:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
