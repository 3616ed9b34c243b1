"""Clock-event (formerly "throttle") reason bits, as NVML and DCGM define them.

``nvmlDeviceGetCurrentClocksEventReasons`` returns a bitmask; ``nvidia-smi`` logs it as
hex (``0x0000000000000004``). Decoding natively avoids the PromQL modulo tricks people
use with dcgm-exporter.
"""

from __future__ import annotations

GPU_IDLE = 0x1
APPLICATIONS_CLOCKS = 0x2  # locked/application clocks (nvidia-smi -lgc / -ac)
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8  # set together with HW_THERMAL and/or HW_POWER_BRAKE
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCKS = 0x100

# The one table: bit -> (short flag name, words for a tired human, nvidia-smi column
# suffix of the individual ``clocks_event_reasons.<suffix>`` / ``clocks_throttle_reasons.``
# column). Everything else (REASONS, SMI_COLUMNS) is derived from it.
TABLE: tuple[tuple[int, str, str, str], ...] = (
    (GPU_IDLE, "gpu_idle", "idle", "gpu_idle"),
    (APPLICATIONS_CLOCKS, "applications_clocks", "clocks locked",
     "applications_clocks_setting"),
    (SW_POWER_CAP, "sw_power_cap", "power cap", "sw_power_cap"),
    (HW_SLOWDOWN, "hw_slowdown", "HW slowdown", "hw_slowdown"),
    (SYNC_BOOST, "sync_boost", "sync boost", "sync_boost"),
    (SW_THERMAL, "sw_thermal", "SW thermal slowdown", "sw_thermal_slowdown"),
    (HW_THERMAL, "hw_thermal", "HW thermal slowdown", "hw_thermal_slowdown"),
    (HW_POWER_BRAKE, "hw_power_brake", "power brake", "hw_power_brake_slowdown"),
    (DISPLAY_CLOCKS, "display_clocks", "display clocks", "display_clock_setting"),
)

# bit -> (short flag name, words for a tired human)
REASONS: dict[int, tuple[str, str]] = {bit: (name, words) for bit, name, words, _ in TABLE}
# nvidia-smi individual reason column suffix -> bit
SMI_COLUMNS: dict[str, int] = {smi: bit for bit, _, _, smi in TABLE}

# Bits that are normal on a busy or idle GPU and never a problem on their own.
BENIGN = GPU_IDLE | APPLICATIONS_CLOCKS | SW_POWER_CAP | SYNC_BOOST | DISPLAY_CLOCKS
THERMAL = SW_THERMAL | HW_THERMAL
HARDWARE = HW_SLOWDOWN | HW_POWER_BRAKE


def decode(mask: int | float | None) -> list[str]:
    """Human words for the bits set in ``mask``, lowest bit first; ``[]`` for None/NaN."""
    if mask is None or mask != mask:  # None or NaN
        return []
    m = int(mask)
    return [words for bit, (_, words) in REASONS.items() if m & bit]


def flags(mask: int | float | None) -> list[str]:
    """Short flag names (``sw_power_cap``...) for the bits set in ``mask``."""
    if mask is None or mask != mask:
        return []
    m = int(mask)
    return [name for bit, (name, _) in REASONS.items() if m & bit]


def parse_mask(text: str) -> int:
    """Parse ``0x0000000000000004`` (hex, as nvidia-smi logs it) or a decimal ``4``.

    The one mask parser: replay's column conversion and the probe both use it. Raises
    ``ValueError`` on anything else (the caller decides what missing text means).
    """
    t = text.strip()
    if t.lower().startswith("0x"):
        return int(t, 16)
    return int(float(t))
