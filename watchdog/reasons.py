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

# bit -> (short flag name, words for a tired human)
REASONS: dict[int, tuple[str, str]] = {
    GPU_IDLE: ("gpu_idle", "idle"),
    APPLICATIONS_CLOCKS: ("applications_clocks", "clocks locked"),
    SW_POWER_CAP: ("sw_power_cap", "power cap"),
    HW_SLOWDOWN: ("hw_slowdown", "HW slowdown"),
    SYNC_BOOST: ("sync_boost", "sync boost"),
    SW_THERMAL: ("sw_thermal", "SW thermal slowdown"),
    HW_THERMAL: ("hw_thermal", "HW thermal slowdown"),
    HW_POWER_BRAKE: ("hw_power_brake", "power brake"),
    DISPLAY_CLOCKS: ("display_clocks", "display clocks"),
}

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
    """Parse ``0x0000000000000004``, ``4`` or ``Active``-style text; ``ValueError`` if not."""
    t = text.strip()
    if t.lower().startswith("0x"):
        return int(t, 16)
    return int(float(t))
