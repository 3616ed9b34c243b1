"""XID codes: what each means and how bad it is for a one-shot health probe.

The classification follows the operators' consensus collected in
``reference/anchors-mission.md``:

* DCGM's always-on "devastating" XIDs (``DcgmHealthWatch.cpp`` ``BuildXidMappings``):
  48 (double-bit ECC), 74 (NVLink), 79 (fallen off the bus), 95 (uncontained ECC),
  119/120 (GSP RPC timeout / GSP error), 140 (unrecovered ECC) -> FAIL. DCGM's memory watch
  adds 64 (page retirement / row remap failure) -> FAIL. 94 (contained ECC error) is a WARN
  in DCGM but the GPU needs a reset before it is trusted again, and the issue asks for it
  to be critical, so it is CRITICAL here.
* Application-level XIDs that NVIDIA's k8s-device-plugin does not treat as a device fault
  (13, 31, 43, 45, 68, 109) and DCGM's warn-only XIDs (32, 38, 39, 42, 54, 56, 57, 58, 60,
  61, 62, 63, 78, 92) -> WARNING: worth a look, not a reason to drain the node.
* Any other code -> WARNING: the driver reported an error we do not classify.

Severities are the Nagios words of :mod:`watchdog.check.judge` (``"CRITICAL"``/``"WARNING"``).
"""

from __future__ import annotations

CRITICAL_CODES: frozenset[int] = frozenset({48, 61, 62, 64, 74, 79, 92, 94, 95, 119, 120, 140})
"""The codes of ``rules/xid.yaml``'s ``xid_critical`` (a test keeps the two equal)."""

# code -> short meaning (NVIDIA XID catalogue wording, shortened for a table cell).
MEANING: dict[int, str] = {
    13: "graphics engine exception (usually an application error)",
    31: "GPU memory page fault (usually an application error)",
    32: "invalid or corrupted push buffer stream",
    38: "driver firmware error",
    43: "GPU stopped processing (application error)",
    45: "preemptive cleanup after an earlier error",
    48: "double-bit ECC error",
    54: "auxiliary power is not connected",
    56: "display engine error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remap recorded",
    64: "ECC page retirement or row remap failed",
    68: "video processor exception",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (GPU needs a reset)",
    95: "uncontained ECC error (GPU needs a reset)",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


def severity(code: int) -> str:
    """``"CRITICAL"`` for a device fault that needs the GPU drained, else ``"WARNING"``."""
    return "CRITICAL" if code in CRITICAL_CODES else "WARNING"


def describe(code: int) -> str:
    """``"XID 79 (GPU has fallen off the bus)"``; unknown codes say so."""
    meaning = MEANING.get(code, "unclassified; see NVIDIA's XID catalogue")
    return f"XID {code} ({meaning})"
