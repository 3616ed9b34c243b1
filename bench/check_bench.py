"""Cold start to verdict: ``watchdog check --json`` against ``gpustat --json``.

Both run as fresh processes through the same runner, on the same fake NVML scenario (the
fake sits below nvidia-ml-py, so both tools go through the real binding)::

    python -m watchdog.testing.fakenvml healthy -- gpustat --json
    python -m watchdog.testing.fakenvml healthy -- watchdog check --json --duration 0
    python -m watchdog.testing.fakenvml healthy -- watchdog check --json

``--duration 0`` is one reading, like gpustat's one read: the like-for-like comparison the
budget in DESIGN.md is about. The default check samples for up to 2 s on purpose (counter
deltas, XIDs, sustained conditions); it is timed too, so the cost of the burst is visible.
Runs are interleaved (gpustat, check, check, gpustat, ...) so drift in machine load hits
every command alike. Prints median and min wall time per command and the ratios
check / gpustat (below 1.0 = check is faster). Bounded: about ``runs x 3`` seconds.

Usage: ``python bench/check_bench.py [--runs 15] [--scenario healthy]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def command(scenario: str, *tool: str) -> list[str]:
    return [sys.executable, "-m", "watchdog.testing.fakenvml", scenario, "--", *tool]


def once(cmd: list[str], env: dict[str, str]) -> tuple[float, dict]:
    """Wall seconds from process start to exit, and the parsed JSON it printed."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - t0
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{' '.join(cmd[3:])}: no JSON on stdout (rc {proc.returncode}): "
                         f"{proc.stderr.strip()[-300:]}") from None
    return elapsed, doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="runs per command (default 15)")
    ap.add_argument("--scenario", default="healthy", help="fake NVML scenario (default healthy)")
    args = ap.parse_args(argv)
    env = {**os.environ, "NO_COLOR": "1"}
    cmds = {
        "gpustat --json": command(args.scenario, "gpustat", "--json"),
        "watchdog check --json --duration 0": command(args.scenario, "watchdog", "check",
                                                       "--json", "--duration", "0"),
        "watchdog check --json (default 2 s burst)": command(args.scenario, "watchdog",
                                                             "check", "--json"),
    }
    # One untimed run each: fills the OS file cache alike, and validates the outputs.
    for name, cmd in cmds.items():
        _, doc = once(cmd, env)
        if name.startswith("gpustat"):
            print(f"# {name}: {len(doc['gpus'])} GPUs")
        else:
            print(f"# {name}: status {doc['status']}, {doc['gpu_count']} GPUs")
            if doc["status"] == "UNKNOWN":
                print(f"#   could not judge: {doc['problems'][0]['message']}")
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(args.runs):
        for name, cmd in cmds.items():
            times[name].append(once(cmd, env)[0])
    base_med = statistics.median(times["gpustat --json"])
    base_min = min(times["gpustat --json"])
    print(f"# fake NVML scenario {args.scenario!r}, {args.runs} runs each, python "
          f"{sys.version.split()[0]}")
    print(f"{'command':44s} {'median s':>9s} {'min s':>7s} {'ratio med':>10s} {'ratio min':>10s}")
    for name, ts in times.items():
        med, lo = statistics.median(ts), min(ts)
        print(f"{name:44s} {med:9.3f} {lo:7.3f} {med / base_med:10.2f} {lo / base_min:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
