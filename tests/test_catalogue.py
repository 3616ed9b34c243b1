import csv
import json
import os
import statistics
from pathlib import Path

import pytest

from watchdog import catalogue, reasons

REPO = Path(__file__).resolve().parent.parent
REAL_WANDB = Path(os.environ.get("WATCHDOG_REAL_WANDB", REPO.parent / "shared" / "real-wandb"))
REAL_GPU = Path(os.environ.get("WATCHDOG_REAL_GPU", REPO.parent / "shared" / "real-gpu"))


def test_names_are_unique_and_aliases_resolve_to_their_metric():
    assert len(set(catalogue.NAMES)) == len(catalogue.NAMES)
    for m in catalogue.METRICS:
        assert catalogue.canonical(m.name) == m.name
        for a in m.aliases:
            assert catalogue.canonical(a) == m.name, a


def test_nvidia_smi_header_spellings_map_to_catalogue_names():
    assert catalogue.canonical(" power.draw [W]") == "power.draw"
    assert catalogue.canonical("clocks_throttle_reasons.active") == "clocks_event_reasons.active"
    assert catalogue.canonical("pcie.link.gen.gpucurrent") == "pcie.link.gen.current"
    assert catalogue.canonical("clocks.current.sm [MHz]") == "clocks.sm"
    assert catalogue.canonical("no.such.metric") is None


def test_reason_bits_decode_into_words():
    assert reasons.decode(0x4 | 0x10) == ["power cap", "sync boost"]
    assert reasons.flags(0x48) == ["hw_slowdown", "hw_thermal"]
    assert reasons.decode(None) == [] and reasons.decode(float("nan")) == []
    assert reasons.parse_mask("0x0000000000000080") == 0x80


def _label(name: str) -> str | None:
    m = catalogue.gpu_model(name)
    return m.label if m is not None else None


def test_gpu_names_match_whole_words_not_a_longer_model_number():
    # each of these names contains another model's key as a substring
    assert _label("NVIDIA RTX A4000") is None  # "a40" inside "a4000"
    assert _label("NVIDIA RTX A1000") is None  # "a10" inside "a1000"
    assert _label("NVIDIA T400") is None  # "t4" inside "t400"
    assert _label("Tesla V100S-PCIE-32GB") != "V100 SXM2"  # "v100" inside "v100s"
    assert _label("NVIDIA L40S") == "L40S" and _label("NVIDIA L40") == "L40"
    assert _label("NVIDIA L4") == "L4" and _label("Tesla T4") == "T4"
    assert _label("NVIDIA A10") == "A10" and _label("NVIDIA A100-PCIE-40GB") == "A100 PCIe 40GB"
    assert _label("Lab GPU") is None and _label("") is None and _label(None) is None


# --- the GPUs of the real corpus (../shared: real-wandb metadata, real-telemetry, real-gpu) --

CORPUS = {  # the names nvidia-smi and W&B's metadata give them -> the catalogue's model
    "NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200", "H200": "H200", "NVIDIA H20": "H20",
    "NVIDIA A100-SXM4-80GB": "A100 SXM 80GB", "NVIDIA A100-SXM4-40GB": "A100 SXM 40GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB", "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "A100": "A100", "L40s": "L40S", "NVIDIA L40S": "L40S",
    "NVIDIA RTX A6000": "RTX A6000", "NVIDIA RTX A5000": "RTX A5000",
    "Tesla V100-SXM2-32GB": "V100 SXM2 32GB", "Tesla V100-PCIE-32GB": "V100 PCIe 32GB",
    "NVIDIA GeForce RTX 3090": "RTX 3090", "NVIDIA GeForce RTX 4090 D": "RTX 4090 D",
    "NVIDIA GeForce RTX 5070 Ti": "RTX 5070 Ti", "NVIDIA A30": "A30",
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_each_gpu_of_the_real_corpus_maps_to_its_model(name):
    assert _label(name) == CORPUS[name]


@pytest.mark.parametrize("name, label", [
    ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA GH200 480GB", "GH200"),  # not the 700 W H200
    ("NVIDIA H20", "H20"), ("NVIDIA H200", "H200"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 4090 D", "RTX 4090 D"),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", "laptop GPU"),
    ("NVIDIA RTX A5000 Laptop GPU", "laptop GPU"),
    ("NVIDIA GeForce RTX 3090 Ti", "RTX 3090 Ti"), ("NVIDIA GeForce RTX 5070", None),
    ("NVIDIA RTX 6000 Ada Generation", None), ("Quadro RTX 6000", None),
    ("NVIDIA GeForce GTX TITAN X", "GTX TITAN X"), ("NVIDIA TITAN X (Pascal)", None),
    ("NVIDIA TITAN Xp", None), ("NVIDIA TITAN V", None),
    ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB"), ("Tesla V100-PCIE-16GB", "V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", "V100S"), ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
])
def test_near_misses_get_their_own_entry_or_none(name, label):
    """A name that contains another model's key is not given that model's figures."""
    assert _label(name) == label


def test_every_figure_names_its_source_and_every_named_figure_is_set():
    for m in catalogue.GPU_MODELS:
        for f in catalogue.FIGURES:
            if getattr(m, f) is not None:
                assert m.source(f), (m.label, f)
        named = {f for names, _ in m.sources for f in names.split()}
        assert named <= set(catalogue.FIGURES), (m.label, named)
        assert all(getattr(m, f) is not None for f in named), (m.label, named)
        # verified: seen on this model in the team's evaluation data, and said where
        assert m.verified <= named, m.label
        for f in m.verified:
            assert any(d in m.source(f) for d in ("real-gpu/", "real-telemetry/",
                                                  "real-wandb/")), (m.label, f)
    assert catalogue.gpu_model("NVIDIA H20").source("slowdown_c") == ""


def test_temperature_thresholds_are_in_nvidias_order():
    """Regulation first, then the hardware slowdown, then the shutdown (a swapped pair of
    figures would move the rules' slowdown point)."""
    for m in catalogue.GPU_MODELS:
        ladder = [v for v in (m.max_operating_c, m.slowdown_c, m.shutdown_c) if v is not None]
        assert ladder == sorted(set(ladder)), m.label
        if m.target_c is not None and m.slowdown_c is not None:
            assert m.target_c < m.slowdown_c, m.label
    a100 = catalogue.gpu_model("NVIDIA A100-SXM4-80GB")
    assert (a100.max_operating_c, a100.slowdown_c, a100.shutdown_c) == (85.0, 89.0, 92.0)


def _wandb_runs() -> list[tuple[str, float, float]]:
    """(GPU name, memory MiB from the metadata, power limit W from the stats) per W&B run
    of ``../shared/real-wandb`` (limit: the enforced one, else power / power percent)."""
    runs = []
    for meta in sorted(REAL_WANDB.glob("*/**/files/wandb-metadata.json")):
        d = json.loads(meta.read_text())
        gpu = (d.get("gpu_nvidia") or d.get("gpu_devices") or [{}])[0]
        mib = float(gpu.get("memoryTotal") or gpu.get("memory_total")) / 2**20
        run = meta.parent.parent.name.rsplit("-", 1)[1]
        derived = next(REAL_WANDB.glob(f"*/derived/run-{run}.system-metrics.csv"))
        limits = []
        with derived.open() as f:
            for row in csv.DictReader(f):
                for i in range(int(d.get("gpu_count") or 1)):
                    enforced, watts, pct = (row.get(f"gpu.{i}.{k}") for k in (
                        "enforcedPowerLimitWatts", "powerWatts", "powerPercent"))
                    if enforced:
                        limits.append(float(enforced))
                    elif watts and pct and float(pct) > 20:
                        limits.append(float(watts) * 100 / float(pct))
        runs.append((d["gpu"], mib, statistics.median(limits)))
    return runs


def test_verified_figures_are_those_of_the_real_runs():
    """A verified memory size or power limit is one a real W&B run of that model shows; a
    verified threshold is the one NVML gave on the team's own H100 and H200."""
    if not REAL_WANDB.is_dir() or not REAL_GPU.is_dir():
        pytest.skip(f"real runs not found at {REAL_WANDB} and {REAL_GPU}")
    seen: dict[str, dict[str, set[float]]] = {}
    for name, mib, limit in _wandb_runs():
        m = catalogue.gpu_model(name)
        assert m is not None, name
        got = seen.setdefault(m.label, {"memory_mib": set(), "tdp_w": set()})
        got["memory_mib"].add(mib)
        got["tdp_w"].add(round(limit))
    checked = 0
    for m in catalogue.GPU_MODELS:
        for f in ("memory_mib", "tdp_w"):
            if f in m.verified and m.label in seen:
                assert getattr(m, f) in seen[m.label][f], (m.label, f, seen[m.label][f])
                checked += 1
    assert checked >= 20
    from watchdog.sources.replay import open_log
    for rec, label in (("h100-spin-hang/a.wdrec", "H100 SXM"), ("h200-spin-hang/g.wdrec", "H200")):
        d = open_log(REAL_GPU / rec).devices()[0]
        m = catalogue.gpu_model(d.name)
        assert m.label == label and {"max_operating_c", "slowdown_c"} <= m.verified
        assert (m.max_operating_c, m.slowdown_c, m.shutdown_c) == (
            d.temp_max_operating_c, d.temp_slowdown_c, d.temp_shutdown_c)
        assert (m.tdp_w, m.memory_mib) == (d.power_limit_default_w, d.memory_total_mib)
