"""The NVML error policy: strings from old and new bindings, start-up messages, lost GPUs."""

from __future__ import annotations

import logging

import pynvml as N
import pytest

from watchdog.sources.nvml.deadline import Lane
from watchdog.sources.nvml.errors import GpuLost, OnceLog, text, unavailable
from watchdog.sources.nvml.reader import DeviceReader


@pytest.mark.parametrize(("raw", "expected"), [
    (b"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),  # nvidia-ml-py < 11.515
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),  # current bindings
    (b"00000000:3B:00.0\x00\x00junk", "00000000:3B:00.0"),  # raw char array
    (bytearray(b"550.90.07 "), "550.90.07"),
    (None, None),
])
def test_text_accepts_bytes_and_str(raw, expected):
    assert text(raw) == expected


@pytest.mark.parametrize(("code", "words"), [
    (N.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found"),
    (N.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
    (N.NVML_ERROR_NO_PERMISSION, "no permission"),
    (N.NVML_ERROR_UNKNOWN, "nvmlInit failed"),
])
def test_startup_errors_are_one_line_with_remedy(code, words):
    err = unavailable(N.NVMLError(code))
    assert words in str(err) and "--source sim" in str(err)
    assert "\n" not in str(err) and err.exit_code == 3


def test_once_log_logs_each_device_field_once(caplog):
    once = OnceLog()
    with caplog.at_level(logging.INFO, logger="watchdog.sources.nvml"):
        assert once(0, "fan.speed", "Not Supported")
        assert not once(0, "fan.speed", "Not Supported")
        assert once(1, "fan.speed", "Not Supported")
    assert len(caplog.records) == 2


def _reader() -> DeviceReader:
    return DeviceReader(N, 0, None, Lane("t"), OnceLog())


def test_classify_missing_error_and_lost():
    r = _reader()
    missing = N.NVMLError(N.NVML_ERROR_NOT_SUPPORTED)
    assert r.classify("fan.speed", "nvmlDeviceGetFanSpeed", missing) is None
    assert r.errors == []
    r.classify("power.draw", "nvmlDeviceGetPowerUsage", N.NVMLError(N.NVML_ERROR_UNKNOWN))
    assert r.errors == ["nvmlDeviceGetPowerUsage: Unknown Error"]  # not lost yet: an error
    with pytest.raises(GpuLost):
        r.classify("power.draw", "nvmlDeviceGetPowerUsage", N.NVMLError(N.NVML_ERROR_GPU_IS_LOST))
    with pytest.raises(GpuLost):  # Unknown once the GPU was seen lost means lost
        r.classify("power.draw", "nvmlDeviceGetPowerUsage", N.NVMLError(N.NVML_ERROR_UNKNOWN))
    r.lane.stop()
