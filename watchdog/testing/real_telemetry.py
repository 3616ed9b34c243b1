"""How to read the real GPU logs in the team's shared ``real-telemetry`` folder.

Those logs were recorded by other people (see the folder's README); they are evaluation
data and never part of the package. Two of them use their own column names, so they load
through a ``--map``; the BMC power log holds two nodes' power, read as one pseudo-GPU
per node. Tests, benchmarks and a person at the shell use the same mappings from here.
"""

from __future__ import annotations

from pathlib import Path

NANOGPT = {"index": "gpu_index", "temperature.gpu": "temperature_C",
           "utilization.gpu": "utilization_gpu_percent", "power.draw": "power_W"}
LEO = {"index": "gpu_id", "power.draw": "power_w", "clocks.sm": "sm_clock_mhz",
       "utilization.gpu": "gpu_util_pct", "utilization.memory": "memory_util_pct",
       "memory.used": "memory_used_mb", "memory.total": "memory_total_mb",
       "temperature.gpu": "temperature_c"}
# folder -> one (mapping, host) per way of reading each file in it
READINGS: dict[str, list[tuple[dict[str, str] | None, str | None]]] = {
    "karpathy__nanoGPT": [(NANOGPT, None)],
    "Leo-hxu__training-power-trace-explorer": [(LEO, None)],
    "ciscoaiteam__hpc-mlperf-benchmarks": [({"power.draw": "n1_watts"}, "n1"),
                                           ({"power.draw": "n2_watts"}, "n2")],
}


def data_files(root: Path) -> list[Path]:
    """Every log in ``root`` (``.csv`` and ``.log``; the JSON sidecars are metadata)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".csv", ".log"))


def readings(root: Path) -> list[tuple[str, Path, dict[str, str] | None, str | None]]:
    """``(label, path, mapping, host)`` for every way to read every log in ``root``."""
    out: list[tuple[str, Path, dict[str, str] | None, str | None]] = []
    for path in data_files(root):
        folder = path.parent.name
        ways = READINGS.get(folder) or [(None, None)]
        for mapping, host in ways:
            label = f"{folder}/{path.name}" + (f" {host}" if host else "")
            out.append((label, path, mapping, host))
    return out
