"""The names of the derived signals, with no computation: what a rule may name.

The condition language checks names against :data:`SIGNALS` (:mod:`lang`), the engine
and :mod:`prune` read :data:`LEARNING_SIGNALS` and :data:`FLAG_SIGNALS`, and
:mod:`signals` computes each one. The names live here, apart from the computation, so
that the language does not import the signal code (which builds window expressions of the
language for the learned levels). The table of signals is in ``docs/rules.md``.
"""

from __future__ import annotations

from watchdog import reasons

# one 1/0 signal per clock-event reason bit: name -> bit
FLAG_SIGNALS = {name: bit for bit, (name, _) in reasons.REASONS.items()}
SIGNALS: tuple[str, ...] = (
    "power_pct", "power_idle_w", "power_busy_w", "power_rel", "mem_pct", "sm_clock_pct",
    "sm_activity", "tensor_activity", *FLAG_SIGNALS, "throttle_bad", "lost", "xid",
    "xid_count", "pcie_width_max", "pcie_gen_max", "serving",
)
# signals whose computation advances learned per-GPU state (running idle/busy power,
# running max SM clock, the serving rhythm; :mod:`learned`): an expression naming one
# must be evaluated in every block
LEARNING_SIGNALS = frozenset({"power_idle_w", "power_busy_w", "power_rel", "sm_clock_pct",
                              "serving"})
