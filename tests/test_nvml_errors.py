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
    """clarity: a production nvml_error page says what to check on the node (the driver,
    `nvidia-smi`, the kernel log), never "use --source sim to try without a GPU"; that
    advice is only the exception's hint for an interactive error line."""
    err = unavailable(N.NVMLError(code))
    assert words in str(err) and "--source sim" not in str(err)
    assert any(w in str(err) for w in ("nvidia-smi", "video group"))
    assert "--source sim" in err.hint and err.cause in str(err) and err.remedy in str(err)
    assert "\n" not in str(err) and err.exit_code == 3


def test_the_driver_remedy_names_the_checks_an_operator_runs():
    """clarity: an NVML failure without a specific cause tells the operator how to check
    the driver: nvidia-smi, the kernel log, the persistence daemon, reload or reinstall."""
    err = unavailable(N.NVMLError(N.NVML_ERROR_UNKNOWN))
    for must in ("`nvidia-smi`", "`dmesg | grep -i nvrm`", "nvidia-persistenced",
                 "reinstall"):
        assert must in str(err), must


def test_once_log_logs_each_device_field_once_then_one_line_for_the_node(caplog):
    """clarity: 8 GPUs without fan.speed and mig_mode are one INFO line (`fan.speed,
    mig_mode on GPUs 0-7`), not 16; each GPU's detail is at DEBUG."""
    once = OnceLog()
    with caplog.at_level(logging.DEBUG, logger="watchdog.sources.nvml"):
        assert once(0, "fan.speed", "Not Supported")
        assert not once(0, "fan.speed", "Not Supported")
        assert once(1, "fan.speed", "Not Supported")
    assert len(caplog.records) == 2
    assert all(r.levelno == logging.DEBUG for r in caplog.records)
    caplog.clear()
    for g in range(2, 8):
        once(g, "fan.speed", "Not Supported")
    for g in range(8):
        once(g, "mig_mode", "Not Supported")
    once(3, "violation.power", "Not Supported")
    once(3, "violation.thermal", "Not Supported")
    with caplog.at_level(logging.INFO, logger="watchdog.sources.nvml"):
        once.flush()
        once.flush()  # nothing new: nothing said
    assert [r.getMessage() for r in caplog.records] == [
        "metrics not supported on this node (reported as missing): fan.speed, mig_mode on "
        "GPUs 0-7; violation.{power,thermal} on GPU 3"]
    once(9, "fan.speed", "Not Supported")
    assert once.summary() == ("more metrics not supported (reported as missing): fan.speed "
                              "on GPU 9")


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
