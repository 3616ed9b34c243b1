"""Per-device entry points of the fake NVML (inventory and readings).

Each method has the C function's name and takes exactly the arguments nvidia-ml-py passes
(the conformance test checks the count against the binding's source). Gating by lost GPU,
NOT_SUPPORTED and scripted blocking happens in ``FakeNvml._dispatch`` before these run.
"""

from __future__ import annotations

from watchdog.testing.fakenvml import ctypesfill as cf
from watchdog.testing.fakenvml.ctypesfill import CArg
from watchdog.testing.fakenvml.scenarios import GpuSpec, MiB, readings

OK = 0
NOT_SUPPORTED = 3
INSUFFICIENT_SIZE = 7

# field id -> (readings key, value type: 0 double, 3 unsigned long long)
_FIELDS: dict[int, tuple[str, int]] = {
    3: ("ecc_sbe_vol", 3), 4: ("ecc_dbe_vol", 3), 6: ("ecc_dbe_agg", 3),
    31: ("retired_pending", 1), 38: ("nvlink_crc_flit", 3), 45: ("nvlink_crc_data", 3),
    52: ("nvlink_replay", 3), 59: ("nvlink_recovery", 3), 82: ("temp_mem", 1),
    83: ("energy_mj", 3), 94: ("pcie_replay", 1), 142: ("remap_cor", 1),
    143: ("remap_unc", 1), 144: ("remap_pending", 1), 145: ("remap_failure", 1),
    186: ("power_mw", 1),
}
_NVLINK_FIELDS = frozenset({38, 45, 52, 59})
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 3: "ullVal"}


class DeviceFns:
    """Mixin: needs ``device(handle)``, ``elapsed()`` from the library state."""

    def device(self, handle: CArg) -> tuple[int, GpuSpec]:
        raise NotImplementedError

    def elapsed(self) -> float:
        raise NotImplementedError

    def _now(self, handle: CArg) -> tuple[int, GpuSpec, dict[str, float]]:
        i, g = self.device(handle)
        t = self.elapsed()
        cache: dict[int, tuple[float, dict[str, float]]] = self.__dict__.setdefault("_cache", {})
        hit = cache.get(i)
        if hit is not None and hit[0] == t:  # many calls per tick read the same instant
            return i, g, hit[1]
        r = readings(g, i, t)
        r.update(retired_pending=0.0, remap_cor=0.0, remap_unc=0.0, remap_pending=0.0,
                 remap_failure=0.0)
        cache[i] = (t, r)
        return i, g, r

    def _put(self, handle: CArg, out: CArg, key: str) -> int:
        cf.set_value(out, int(self._now(handle)[2][key]))
        return OK

    def _string(self, handle: CArg, buf: CArg, size: CArg, attr: str) -> int:
        _, g = self.device(handle)
        return OK if cf.write_string(buf, size, getattr(g, attr)) else INSUFFICIENT_SIZE

    # --- inventory ------------------------------------------------------------------------
    def nvmlDeviceGetName(self, h: CArg, buf: CArg, size: CArg) -> int:
        return self._string(h, buf, size, "name")

    def nvmlDeviceGetUUID(self, h: CArg, buf: CArg, size: CArg) -> int:
        return self._string(h, buf, size, "uuid")

    def nvmlDeviceGetSerial(self, h: CArg, buf: CArg, size: CArg) -> int:
        return self._string(h, buf, size, "serial")

    def nvmlDeviceGetVbiosVersion(self, h: CArg, buf: CArg, size: CArg) -> int:
        return self._string(h, buf, size, "vbios")

    def nvmlDeviceGetIndex(self, h: CArg, out: CArg) -> int:
        cf.set_value(out, self.device(h)[0])
        return OK

    def nvmlDeviceGetPciInfo_v3(self, h: CArg, out: CArg) -> int:
        _, g = self.device(h)
        info = cf.target(out)
        dom, bus, rest = g.pci_bus_id.split(":")
        info.busId = g.pci_bus_id.encode()
        info.busIdLegacy = g.pci_bus_id[4:].encode()
        info.domain, info.bus, info.device = int(dom, 16), int(bus, 16), int(rest[:2], 16)
        info.pciDeviceId = 0x233010DE
        return OK

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: CArg, lo: CArg, hi: CArg) -> int:
        _, g = self.device(h)
        cf.set_value(lo, g.power_min_mw)
        cf.set_value(hi, g.power_max_mw)
        return OK

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: CArg, out: CArg) -> int:
        cf.set_value(out, self.device(h)[1].power_limit_mw)
        return OK

    def nvmlDeviceGetEnforcedPowerLimit(self, h: CArg, out: CArg) -> int:
        cf.set_value(out, self.device(h)[1].power_limit_mw)
        return OK

    def nvmlDeviceGetMaxClockInfo(self, h: CArg, kind: CArg, out: CArg) -> int:
        _, g = self.device(h)
        k = cf.as_int(kind)
        cf.set_value(out, g.max_mem_mhz if k == 2 else g.max_sm_mhz)
        return OK

    def nvmlDeviceGetTemperatureThreshold(self, h: CArg, which: CArg, out: CArg) -> int:
        _, g = self.device(h)
        table = {0: g.temp_shutdown, 1: g.temp_slowdown, 3: g.temp_gpu_max, 2: 95}
        w = cf.as_int(which)
        if w not in table:
            return NOT_SUPPORTED
        cf.set_value(out, table[w])
        return OK

    def nvmlDeviceGetMigMode(self, h: CArg, current: CArg, pending: CArg) -> int:
        self.device(h)
        cf.set_value(current, 0)
        cf.set_value(pending, 0)
        return OK

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: CArg, out: CArg) -> int:
        cf.set_value(out, self.device(h)[1].pcie_max_gen)
        return OK

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: CArg, out: CArg) -> int:
        cf.set_value(out, self.device(h)[1].pcie_max_width)
        return OK

    # --- readings -------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, h: CArg, out: CArg) -> int:
        r = self._now(h)[2]
        u = cf.target(out)
        u.gpu, u.memory = int(r["util_gpu"]), int(r["util_mem"])
        return OK

    def _memory(self, h: CArg, out: CArg, v2: bool) -> int:
        _, g, r = self._now(h)
        m = cf.target(out)
        total = g.memory_total_mib * MiB
        reserved = g.memory_reserved_mib * MiB if v2 else 0
        used = int(r["mem_used_mib"] * MiB) + (0 if v2 else g.memory_reserved_mib * MiB)
        m.total, m.used, m.free = total, used, total - used - reserved
        if v2:
            m.reserved = reserved
        return OK

    def nvmlDeviceGetMemoryInfo(self, h: CArg, out: CArg) -> int:
        return self._memory(h, out, v2=False)

    def nvmlDeviceGetMemoryInfo_v2(self, h: CArg, out: CArg) -> int:
        return self._memory(h, out, v2=True)

    def nvmlDeviceGetPowerUsage(self, h: CArg, out: CArg) -> int:
        return self._put(h, out, "power_mw")

    def nvmlDeviceGetTotalEnergyConsumption(self, h: CArg, out: CArg) -> int:
        return self._put(h, out, "energy_mj")

    def nvmlDeviceGetTemperature(self, h: CArg, sensor: CArg, out: CArg) -> int:
        return self._put(h, out, "temp_gpu")

    def nvmlDeviceGetFanSpeed(self, h: CArg, out: CArg) -> int:
        if not self.device(h)[1].fan:
            return NOT_SUPPORTED
        return self._put(h, out, "fan")

    def nvmlDeviceGetClockInfo(self, h: CArg, kind: CArg, out: CArg) -> int:
        key = {0: "gr_mhz", 1: "sm_mhz", 2: "mem_mhz"}.get(cf.as_int(kind))
        return self._put(h, out, key) if key else NOT_SUPPORTED

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: CArg, out: CArg) -> int:
        return self._put(h, out, "reasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: CArg, out: CArg) -> int:
        return self._put(h, out, "reasons")

    def nvmlDeviceGetPerformanceState(self, h: CArg, out: CArg) -> int:
        return self._put(h, out, "pstate")

    def nvmlDeviceGetViolationStatus(self, h: CArg, policy: CArg, out: CArg) -> int:
        key = {0: "viol_power_ns", 1: "viol_thermal_ns", 2: "viol_sync_ns",
               5: "viol_reliability_ns"}.get(cf.as_int(policy))
        if key is None:
            return NOT_SUPPORTED
        r = self._now(h)[2]
        v = cf.target(out)
        v.referenceTime, v.violationTime = int(self.elapsed() * 1e9) + 1, int(r[key])
        return OK

    def nvmlDeviceGetTotalEccErrors(self, h: CArg, etype: CArg, ctype: CArg, out: CArg) -> int:
        r = self._now(h)[2]
        unc, agg = cf.as_int(etype) == 1, cf.as_int(ctype) == 1
        key = ("ecc_dbe_agg" if agg else "ecc_dbe_vol") if unc else "ecc_sbe_vol"
        cf.set_value(out, int(r[key]))
        return OK

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: CArg, out: CArg) -> int:
        return self._put(h, out, "retired_pending")

    def nvmlDeviceGetRetiredPages(self, h: CArg, cause: CArg, count: CArg, pages: CArg) -> int:
        _, g = self.device(h)
        if g.name.startswith("NVIDIA H100") or g.name.startswith("NVIDIA A100"):
            return NOT_SUPPORTED  # page retirement is replaced by row remapping
        cf.set_value(count, 0)
        return OK

    def nvmlDeviceGetRemappedRows(self, h: CArg, cor: CArg, unc: CArg, pend: CArg,
                                  fail: CArg) -> int:
        r = self._now(h)[2]
        for out, key in ((cor, "remap_cor"), (unc, "remap_unc"), (pend, "remap_pending"),
                         (fail, "remap_failure")):
            cf.set_value(out, int(r[key]))
        return OK

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: CArg, out: CArg) -> int:
        return self._put(h, out, "pcie_gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: CArg, out: CArg) -> int:
        return self._put(h, out, "pcie_width")

    def nvmlDeviceGetPcieReplayCounter(self, h: CArg, out: CArg) -> int:
        return self._put(h, out, "pcie_replay")

    def nvmlDeviceGetPcieThroughput(self, h: CArg, counter: CArg, out: CArg) -> int:
        return self._put(h, out, "pcie_rx_kbs" if cf.as_int(counter) == 1 else "pcie_tx_kbs")

    def nvmlDeviceGetEncoderUtilization(self, h: CArg, util: CArg, period: CArg) -> int:
        self.device(h)
        cf.set_value(util, 0)
        cf.set_value(period, 167_000)
        return OK

    def nvmlDeviceGetDecoderUtilization(self, h: CArg, util: CArg, period: CArg) -> int:
        return self.nvmlDeviceGetEncoderUtilization(h, util, period)

    def nvmlDeviceGetFieldValues(self, h: CArg, count: CArg, values: CArg) -> int:
        _, g, r = self._now(h)
        arr = cf.target(values)
        ts = int((self.elapsed()) * 1e6)
        for k in range(cf.as_int(count)):
            fv = arr[k]
            fid = fv.fieldId
            fv.timestamp, fv.latencyUsec = ts, 0
            spec = _FIELDS.get(fid)
            if (spec is None or f"FI:{fid}" in g.unsupported
                    or (fid in _NVLINK_FIELDS and not g.nvlink)):
                fv.nvmlReturn = NOT_SUPPORTED
                continue
            key, vtype = spec
            fv.valueType, fv.nvmlReturn = vtype, OK
            setattr(fv.value, _VALUE_MEMBER[vtype], r[key] if vtype == 0 else int(r[key]))
        return OK

    # --- processes ------------------------------------------------------------------------
    def _procs(self, h: CArg, count: CArg, infos: CArg) -> int:
        _, g = self.device(h)
        n = len(g.processes)
        have = cf.target(count).value
        cf.set_value(count, n)
        if n == 0:
            return OK
        if infos is None or have < n:
            return INSUFFICIENT_SIZE
        for k, (pid, mib) in enumerate(g.processes):
            p = infos[k]
            p.pid, p.usedGpuMemory = pid, mib * MiB
            p.gpuInstanceId = p.computeInstanceId = 0xFFFFFFFF
        return OK

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: CArg, count: CArg, infos: CArg) -> int:
        return self._procs(h, count, infos)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: CArg, count: CArg, infos: CArg) -> int:
        return self._procs(h, count, infos)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: CArg, count: CArg, infos: CArg) -> int:
        self.device(h)
        cf.set_value(count, 0)
        return OK

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: CArg, count: CArg, infos: CArg) -> int:
        return self.nvmlDeviceGetGraphicsRunningProcesses_v3(h, count, infos)
