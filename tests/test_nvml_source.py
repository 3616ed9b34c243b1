"""NvmlSource against the fake NVML (real nvidia-ml-py code paths, fake C library)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from watchdog.errors import SourceUnavailable
from watchdog.sources.base import LiveSource
from watchdog.sources.nvml import NvmlSource
from watchdog.testing import fakenvml


@pytest.fixture
def fake(clock, request):
    """Install the scenario named by ``@pytest.mark.parametrize('fake', [...], indirect=True)``."""
    f = fakenvml.install(getattr(request, "param", "healthy"), time_fn=clock.now)
    yield f
    fakenvml.uninstall()


@pytest.fixture
def source(fake, tmp_path):
    s = NvmlSource(host="node1", kmsg_path=str(tmp_path / "no-kmsg"))
    yield s
    s.close()


def test_is_a_live_source(source):
    assert isinstance(source, LiveSource)
    assert source.host == "node1"


def test_inventory_of_h100_node(source):
    devs = source.devices()
    assert [d.index for d in devs] == list(range(8))
    d = devs[2]
    assert d.uuid.startswith("GPU-4f1c0002")
    assert d.name == "NVIDIA H100 80GB HBM3"
    assert d.pci_bus_id == "00000000:3A:00.0"
    assert (d.driver_version, d.cuda_version) == ("550.90.07", "12.4")
    assert (d.power_limit_enforced_w, d.power_limit_default_w) == (700.0, 700.0)
    assert (d.power_limit_min_w, d.power_limit_max_w) == (200.0, 700.0)
    assert (d.clocks_max_sm_mhz, d.clocks_max_mem_mhz) == (1980.0, 2619.0)
    assert d.memory_total_mib == 81559.0
    assert (d.temp_slowdown_c, d.temp_shutdown_c, d.temp_max_operating_c) == (87, 92, 85)
    assert (d.mig_mode, d.pcie_max_gen, d.pcie_max_width, d.gpm_supported) == (
        False, 5, 16, True)
    assert d.serial and d.vbios_version


def test_sample_values_in_catalogue_units(source, clock):
    (s0, *rest) = source.sample(clock.now())
    assert len(rest) == 7 and s0.ts == clock.now() and not s0.lost and s0.errors == ()
    v = s0.values
    assert v["power.draw"] == 690.0  # 690000 mW
    assert v["enforced.power.limit"] == 700.0
    assert v["memory.used"] == 72000.0  # v2 API: bytes -> MiB, reserved excluded
    assert v["memory.total"] == 81559.0
    assert v["utilization.gpu"] == 100.0
    assert v["clocks_event_reasons.active"] == 0x14  # SW power cap + sync boost
    assert v["energy.total"] == pytest.approx(5.0e5)  # 5e8 mJ -> J
    assert v["violation.sync_boost"] == 0.0  # ns -> s at t=0
    assert v["temperature.memory"] == 52.0
    assert v["nvlink.errors.crc_flit"] == 0.0
    assert v["ecc.errors.uncorrected.volatile.total"] == 0.0
    assert v["pcie.link.gen.current"] == 5.0
    assert v["fan.speed"] is None  # passive board: NotSupported -> missing, not 0
    assert v["retired_pages.count"] is None  # H100 uses row remapping
    assert s0.processes is not None and s0.processes[0].pid == 41000
    assert s0.processes[0].used_memory_mib == 72000.0


def test_processes_carry_slurm_job_from_proc(fake, clock, tmp_path):
    d = tmp_path / "proc" / "41001"
    d.mkdir(parents=True)
    (d / "comm").write_text("python\n")
    (d / "environ").write_bytes(b"SLURM_JOB_ID=777\0")
    with NvmlSource(proc_root=str(tmp_path / "proc"), kmsg_path=str(tmp_path / "x")) as s:
        p = s.sample(clock.now())[1].processes[0]
    assert (p.pid, p.name, p.job_id, p.used_memory_mib) == (41001, "python", "777", 72000.0)


def test_every_catalogue_metric_is_reported(source, clock):
    from watchdog import catalogue

    for s in source.sample(clock.now()):
        assert set(s.values) == set(catalogue.SOURCE_NAMES)


def test_counters_advance_and_violation_ns_to_s(source, clock):
    a = source.sample(clock.now())[0]
    clock.advance(10.0)
    b = source.sample(clock.now())[0]
    assert b.values["violation.sync_boost"] - a.values["violation.sync_boost"] == \
        pytest.approx(5.0)  # 5e8 ns per s of scenario time
    assert b.values["energy.total"] > a.values["energy.total"]


def test_slow_group_read_every_slow_interval_and_carried_between(source, fake, clock):
    first = source.sample(clock.now())[0]
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 16  # 2 per GPU
    after_first = dict(fake.calls)
    for _ in range(9):  # 9 more ticks at 1 Hz: inside the 10 s slow interval
        clock.advance(1.0)
        later = source.sample(clock.now())[0]
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 16
    assert fake.calls["nvmlDeviceGetViolationStatus"] == 32
    assert fake.calls["nvmlDeviceGetEnforcedPowerLimit"] == \
        after_first["nvmlDeviceGetEnforcedPowerLimit"]
    assert fake.calls["nvmlDeviceGetClockInfo"] == \
        after_first["nvmlDeviceGetClockInfo"] + 9 * 8  # SM; graphics and memory are slow
    assert fake.calls["nvmlDeviceGetCurrPcieLinkWidth"] == 8  # the link: slow group
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 80  # fast reads every tick
    assert later.values["enforced.power.limit"] == first.values["enforced.power.limit"]
    assert later.values["violation.sync_boost"] == first.values["violation.sync_boost"]
    assert later.values["pcie.tx_throughput"] == first.values["pcie.tx_throughput"]
    # field values: the urgent ones every tick (one call per GPU), the counters with the
    # slow group (a second call per GPU, only on its schedule)
    assert fake.calls["nvmlDeviceGetFieldValues"] == 16 + 9 * 8
    assert later.values["energy.total"] == first.values["energy.total"]
    clock.advance(1.0)  # 10 s after the first read: due again
    due = source.sample(clock.now())[0]
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 32
    assert fake.calls["nvmlDeviceGetFieldValues"] == 16 + 10 * 8 + 8
    assert due.values["energy.total"] > first.values["energy.total"]
    assert due.values["violation.sync_boost"] > first.values["violation.sync_boost"]


def test_gpm_needs_two_samples(source, clock):
    first = source.sample(clock.now())[0]
    assert first.values["gpm.sm_activity"] is None
    clock.advance(1.0)
    second = source.sample(clock.now())[0]
    assert second.values["gpm.tensor_activity"] == 62.0
    assert 87.0 < second.values["gpm.sm_activity"] < 89.0


def test_gpm_sampled_every_gpm_interval_and_carried_between(source, fake, clock):
    # the first two samples a tick apart (values from the second read on), then one every
    # GPM_INTERVAL (2 s) whose averages are carried forward until the next
    from watchdog.sources.nvml.source import GPM_INTERVAL

    assert GPM_INTERVAL == 2.0
    seen = []
    for _ in range(8):
        seen.append(source.sample(clock.now())[3].values["gpm.sm_activity"])
        clock.advance(1.0)
    assert seen[0] is None and None not in seen[1:]
    assert fake.calls["nvmlGpmSampleGet"] == 8 * 5  # at 0, 1, 2, 4 and 6 s
    assert fake.calls["nvmlGpmMetricsGet"] == 8 * 4
    assert seen[1] != seen[2] == seen[3] != seen[4] == seen[5] != seen[6] == seen[7]


def test_processes_listed_every_procs_interval_and_carried_between(source, fake, clock):
    from watchdog.sources.nvml.source import PROCS_INTERVAL

    assert PROCS_INTERVAL == 5.0
    seen = []
    for _ in range(11):
        s = source.sample(clock.now())[0]
        seen.append((s.processes, s.values["processes.serving"]))
        clock.advance(1.0)
    # at 0, 5 and 10 s; nvidia-ml-py asks the library twice (the count, then the list)
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2 * 8 * 3
    assert seen[0][0] and all(x == seen[0] for x in seen)  # the same job, carried
    from watchdog.serving import serving_value

    assert seen[0][1] == serving_value(seen[0][0])  # the flag of the listing it carries


def test_field_values_batched_in_one_call(source, fake, clock):
    source.sample(clock.now())
    assert fake.calls["nvmlDeviceGetFieldValues"] == 16  # urgent + slow group, per GPU
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 0


@pytest.mark.parametrize("fake", ["not_supported"], indirect=True)
def test_not_supported_is_none_and_logged_once(source, fake, clock, caplog):
    """clarity: a node whose GPUs lack some metrics says so in ONE line at start-up (which
    metrics, on which GPUs), not a line per GPU per metric; the per-GPU detail is DEBUG."""
    with caplog.at_level(logging.DEBUG, logger="watchdog.sources.nvml"):
        for _ in range(3):
            s = source.sample(clock.now())[0]
            clock.advance(1)
    assert s.values["energy.total"] is None
    assert s.values["temperature.memory"] is None
    assert s.values["gpm.sm_activity"] is None
    assert s.values["power.draw"] is not None and s.errors == ()
    fan_logs = [r for r in caplog.records if "GPU 0: fan.speed" in r.getMessage()]
    assert len(fan_logs) == 1 and fan_logs[0].levelno == logging.DEBUG
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(info) == 1, info
    assert info[0].startswith("metrics not supported on this node (reported as missing): ")
    assert info[0].endswith(" on GPUs 0-1")
    for words in ("fan.speed", "violation.{power,thermal,sync_boost,reliability}", "gpm",
                  "temperature.memory"):
        assert words in info[0]
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 2  # asked once per GPU, then skipped
    assert source.devices()[0].gpm_supported is False
    assert source.devices()[0].mig_mode is None


@pytest.mark.parametrize("fake", ["gpu_lost"], indirect=True)
def test_gpu_lost_mid_run(source, clock):
    before = source.sample(clock.now())
    assert not any(s.lost for s in before)
    clock.advance(31)
    after = source.sample(clock.now())
    assert [s.index for s in after if s.lost] == [3]
    assert after[3].values == {} and after[3].uuid == before[3].uuid
    assert after[2].values["power.draw"] is not None


@pytest.mark.parametrize("fake", ["gpu_lost"], indirect=True)
def test_gpu_lost_before_open_keeps_a_stand_in(fake, clock, tmp_path):
    clock.advance(60)
    with NvmlSource(host="node1", kmsg_path=str(tmp_path / "x")) as s:
        assert s.devices()[3].uuid == "node1/gpu3"
        assert s.sample(clock.now())[3].lost


@pytest.mark.parametrize("fake", ["no_library"], indirect=True)
def test_no_library_is_one_line_with_remedy(fake):
    with pytest.raises(SourceUnavailable) as e:
        NvmlSource()
    msg = str(e.value)
    assert "libnvidia-ml.so.1 not found" in msg and "nvidia-smi" in msg
    assert "--source sim" not in msg and "--source sim" in e.value.hint
    assert "\n" not in msg and e.value.exit_code == 3


@pytest.mark.parametrize("fake", ["init_failure"], indirect=True)
def test_init_failure_is_one_line(fake):
    with pytest.raises(SourceUnavailable, match="driver not loaded"):
        NvmlSource()


@pytest.mark.parametrize("fake", ["blocking_call"], indirect=True)
def test_wedged_call_is_bounded_and_named(fake, clock, tmp_path, monkeypatch):
    s = NvmlSource(call_timeout=0.1, kmsg_path=str(tmp_path / "x"))
    handoffs = _count_handoffs(monkeypatch)
    try:
        first = s.sample(clock.now())  # GPU 2 wedges inside the sweep of all 8
        assert first[2].errors == ("nvmlDeviceGetPowerUsage did not return within 0.1 s",)
        assert first[2].values == {}
        assert first[1].errors == () and first[1].values["power.draw"] is not None
        # the GPUs the sweep had not reached are read in the same tick, on their own lanes
        assert all(x.errors == () and x.values["power.draw"] is not None for x in first[3:])
        assert handoffs == [1 + 5]
        second = s.sample(clock.now())  # still wedged: skipped, not waited for again
        assert "nvmlDeviceGetPowerUsage still outstanding" in second[2].errors[0]
        assert all(x.errors == () for i, x in enumerate(second) if i != 2)
        assert handoffs[-1] == 7  # the sweep is given up: one lane per GPU from now on
        assert fake.calls["nvmlDeviceGetPowerUsage"] == 8 + 7
        fake.release()
        held = s._gpus[2].held
        assert held is not None and held is not s._gpus[2].lane  # the sweep's thread
        while held.busy:  # the stuck call returns, the sweep's thread lets go
            held.wait(held.submit(lambda: None), 5)
        third = s.sample(clock.now())
        assert third[2].errors == () and third[2].values["power.draw"] is not None
        assert handoffs[-1] == 8
    finally:
        fake.release()
        s.close()


def _count_handoffs(monkeypatch) -> list[int]:
    """Jobs handed to NVML lanes per ``sample`` call (appended after each call)."""
    from watchdog.sources.nvml import deadline

    counts: list[int] = []
    submit, sample = deadline.Lane.submit, NvmlSource.sample
    box = [0]

    def counting_submit(self, fn):
        box[0] += 1
        return submit(self, fn)

    def counting_sample(self, now):
        box[0] = 0
        try:
            return sample(self, now)
        finally:
            counts.append(box[0])

    monkeypatch.setattr(deadline.Lane, "submit", counting_submit)
    monkeypatch.setattr(NvmlSource, "sample", counting_sample)
    return counts


@pytest.mark.parametrize(("fake", "handoffs"), [("healthy:1", 1), ("healthy:8", 1),
                                                ("healthy:12", 2), ("healthy:16", 2),
                                                ("healthy:17", 3)], indirect=["fake"])
def test_one_handoff_per_eight_gpus(fake, handoffs, clock, tmp_path, monkeypatch):
    # a tick reads up to 8 GPUs in turn on one lane: one thread wake-up, not one per GPU
    s = NvmlSource(kmsg_path=str(tmp_path / "x"))
    counts = _count_handoffs(monkeypatch)
    try:
        n = len(s.devices())
        for _ in range(3):
            got = s.sample(clock.now())
            assert [x.index for x in got] == list(range(n))
            assert all(x.errors == () and x.values["power.draw"] is not None for x in got)
            clock.advance(1.0)
        assert counts == [handoffs] * 3
    finally:
        s.close()


@pytest.mark.parametrize("fake", ["bytes_strings"], indirect=True)
def test_old_driver_fallbacks(source, fake, clock):
    s = source.sample(clock.now())[0]
    assert s.errors == ()
    assert s.values["clocks_event_reasons.active"] == 0x14  # via ...ThrottleReasons
    assert s.values["memory.used"] == 72000.0 + 527  # v1 API counts the reserved share
    assert s.processes is not None and s.processes[0].pid == 41000  # via _v2
    source.sample(clock.now())
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 4
    assert source.devices()[0].name == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("fake", ["xid"], indirect=True)
def test_xid_events_ride_on_next_sample(source, clock):
    w = source.xid_watcher
    assert w is not None and w.ready.wait(5) and w.mode == "nvml"
    assert w.wait_for_events(5)
    seen: dict[int, int] = {}
    for _ in range(100):  # both scripted XIDs at t=0 arrive; bounded, no sleeping
        for s in source.sample(clock.now()):
            for x in s.xids:
                assert (x.ts, x.uuid, x.source) == (clock.now(), s.uuid, "nvml")
                seen[x.index] = x.code
        if len(seen) == 2:
            break
        w.wait_for_events(1)
    assert seen == {1: 79, 4: 48}
    assert all(not s.xids for s in source.sample(clock.now()))  # handed out once


@pytest.mark.parametrize("fake", ["xid_kmsg"], indirect=True)
def test_xid_kernel_log_fallback(fake, clock, tmp_path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("3,100,1,-;NVRM: Xid (PCI:0000:3a:00): 31, pid=1, old line before start\n")
    with NvmlSource(kmsg_path=str(kmsg)) as s:
        assert s.xid_watcher.ready.wait(5) and s.xid_watcher.mode == "kmsg"
        with kmsg.open("a") as f:
            f.write("4,101,2,-;NVRM: Xid (PCI:0000:3a:00): 79, pid=2231, name=python, "
                    "GPU has fallen off the bus.\n")
            f.write("6,102,3,-;usb 1-1: new device\n")
        samples = s.sample(clock.now())
        assert [(x.index, x.code, x.source) for x in samples[2].xids] == [(2, 79, "kmsg")]
        assert all(not x.xids for i, x in enumerate(samples) if i != 2)


@pytest.mark.parametrize("fake", ["xid_kmsg"], indirect=True)
def test_xid_events_not_supported_is_one_line_for_the_node(fake, tmp_path, caplog):
    """clarity: 8 GPUs refusing XID events are one INFO line ("on GPUs 0-7"), not eight."""
    with (caplog.at_level(logging.INFO, logger="watchdog.sources.nvml"),
          NvmlSource(kmsg_path=str(tmp_path / "x")) as s):
        assert s.xid_watcher.ready.wait(5)
    said = [r.getMessage() for r in caplog.records if "XID events" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("XID events not supported on GPUs 0-7 ("), said


def test_close_shuts_nvml_down_and_is_idempotent(fake, tmp_path):
    s = NvmlSource(kmsg_path=str(tmp_path / "x"))
    assert fake.initialized == 1
    s.close()
    s.close()
    assert fake.initialized == 0
    assert fake.calls["nvmlGpmSampleFree"] == 16


def test_works_after_gpustat_patched_the_binding():
    # gpustat replaces pynvml.nvmlDeviceGetMemoryInfo with a one-argument wrapper
    code = ("import gpustat.nvml; from watchdog.testing import fakenvml;"
            "fakenvml.install('healthy');"
            "from watchdog.sources.nvml import NvmlSource; s = NvmlSource(); x = s.sample(0.0)[0];"
            "s.close(); print(x.errors, x.values['memory.used'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "() 72000.0"


def test_import_and_source_do_not_load_pandas():
    code = ("import sys; from watchdog.testing import fakenvml; fakenvml.install('healthy');"
            "from watchdog.sources.nvml import NvmlSource; s = NvmlSource(); s.sample(0.0);"
            "s.close(); print(sorted(m for m in ('pandas','sklearn','numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_xid_waits_short_slices_first_so_a_one_shot_reader_closes_at_once(fake, tmp_path):
    # `watchdog check` closes the source a second or so after opening it, and close()
    # waits for the XID thread's slice inside nvmlEventSetWait_v2 to end
    # waits for at most one slice: the slices of the first seconds are 100 ms
    s = NvmlSource(kmsg_path=str(tmp_path / "x"))
    w = s.xid_watcher
    assert w is not None and w.ready.wait(5) and w.mode == "nvml"
    while len(fake.wait_ms) < 3:  # a few slices (however slowly a busy machine runs them)
        time.sleep(0.05)
    s.close()
    assert set(fake.wait_ms) == {100}, fake.wait_ms


def test_xid_waits_wait_ms_at_a_time_once_settled(fake, tmp_path, monkeypatch):
    # a long-lived agent pays for a wake-up every 2 s, not every 100 ms
    from watchdog.sources.nvml import xid

    monkeypatch.setattr(xid, "SETTLE_S", 0.0)
    s = NvmlSource(kmsg_path=str(tmp_path / "x"))
    try:
        w = s.xid_watcher
        assert w is not None and w.ready.wait(5) and w.mode == "nvml"
        while not fake.wait_ms:
            time.sleep(0.05)
        assert set(fake.wait_ms) == {2000}, fake.wait_ms  # 2 s slices from the start
    finally:
        s.close()


def test_a_new_nvml_metric_is_one_catalogue_entry(fake, tmp_path, monkeypatch):
    """The reader reads every Call and Field entry from the catalogue alone: a new entry
    (here a second name for the power reading) is read with no change to the reader."""
    from watchdog import catalogue
    from watchdog.sources.nvml import reader

    extra = (catalogue.Metric("power.draw.copy", "W", "gauge",
                              catalogue.Call("nvmlDeviceGetPowerUsage", scale=1e-3), "test"),
             catalogue.Metric("energy.copy", "J", "counter",
                              catalogue.Field(83, scale=1e-3, slow=True), "test"))
    monkeypatch.setattr(catalogue, "METRICS", (*catalogue.METRICS, *extra))
    monkeypatch.setattr(reader, "CALLS", reader._calls(slow=False))
    monkeypatch.setattr(reader, "SLOW_FIELDS", reader._fields(slow=True))
    monkeypatch.setattr(reader, "SLOW_FIELD_IDS", [f[0] for f in reader.SLOW_FIELDS])
    s = NvmlSource(host="node1", kmsg_path=str(tmp_path / "no-kmsg"))
    try:
        for smp in s.sample(1_750_000_001.0):
            assert smp.values["power.draw.copy"] == smp.values["power.draw"] is not None
            assert smp.values["energy.copy"] == smp.values["energy.total"] is not None
    finally:
        s.close()
