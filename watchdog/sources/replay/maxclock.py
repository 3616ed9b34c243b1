"""Maximum SM clock (MHz) by GPU model, for logs without ``clocks.max.sm``.

A throttle summary quotes the SM clock as a percentage of the GPU's maximum. Without the
maximum in the log the detector would learn it from the clocks it sees, and a GPU
throttled from the first line reads "100 % of max". The values are what
``nvidia-smi --query-gpu=clocks.max.sm`` reports for each part (NVIDIA datasheet boost
clocks); a model not listed leaves the maximum unknown, and the percentage is then
left out of summaries rather than guessed.
"""

from __future__ import annotations

# (substring of nvidia-smi's ``name``, max SM clock MHz); the first match wins, so a
# more specific name comes before a shorter one it contains.
MAX_SM_MHZ: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 1755.0),
    ("H100 NVL", 1785.0),
    ("H100", 1980.0),  # SXM5 (H100 80GB HBM3)
    ("H200", 1980.0),
    ("H800", 1980.0),
    ("H20", 1980.0),
    ("GH200", 1980.0),
    ("A100", 1410.0),
    ("A800", 1410.0),
    ("A10G", 1710.0),
    ("A30", 1440.0),
    ("A40", 1740.0),
    ("A10", 1695.0),
    ("L40S", 2520.0),
    ("L40", 2490.0),
    ("L4", 2040.0),
    ("V100", 1530.0),
    ("T4", 1590.0),
)


def max_sm_mhz(name: str | None) -> float | None:
    """The known maximum SM clock of the model called ``name`` (MHz), or None."""
    if not name:
        return None
    for key, mhz in MAX_SM_MHZ:
        if key.lower() in name.lower():
            return mhz
    return None
