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
    "power_pct", "power_limit_w", "power_idle_w", "power_busy_w", "power_rel", "mem_pct",
    "mem_total_mib", "sm_clock_pct", "sm_activity", "tensor_activity", *FLAG_SIGNALS,
    "throttle_bad", "lost", "xid", "xid_count", "pcie_width_max", "pcie_gen_max", "serving",
    "temp_limit_c", "temp_work_max_c", "work_before_idle", "watched_s", "power_idle_learned_w",
)
# signals whose computation advances learned per-GPU state (running idle/busy power,
# running max SM clock, the serving rhythm, the temperature seen while working, the work
# before an idle run; :mod:`learned`): an expression naming one must be evaluated in
# every block
LEARNING_SIGNALS = frozenset({"power_idle_w", "power_busy_w", "power_rel", "sm_clock_pct",
                              "serving", "temp_work_max_c", "work_before_idle",
                              "watched_s", "power_idle_learned_w"})
# signals with a chain of fallbacks (``docs/rules.md``, "What each rule uses"): each has
# a hidden companion ``NAME#src``, the code of the source used at each sample, which the
# engine turns into the words of a page (:mod:`fallbacks`)
CHAINED_SIGNALS: tuple[str, ...] = ("power_limit_w", "power_idle_w", "power_busy_w",
                                    "mem_total_mib", "temp_limit_c")
# what a signal is computed from: naming one names these (for the chains above)
DEPENDS: dict[str, tuple[str, ...]] = {
    "power_rel": ("power_idle_w", "power_busy_w"),
    "power_pct": ("power_limit_w",),
    "power_idle_w": ("power_limit_w",),
    "power_busy_w": ("power_limit_w",),
    "mem_pct": ("mem_total_mib",),
}
