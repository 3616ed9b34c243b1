"""The reference signals' chains of fallbacks, and the words a page uses when one fell back.

A log often lacks what a rule compares against: the power limit, an idle period, the
memory total, the temperature at which the GPU slows itself down. Each such reference is
a signal computed through a chain (:mod:`signals`), first source first; alongside its
value the engine keeps the code of the source used at each sample (the hidden signal
``NAME#src``). When a rule fires on a fallback, its page says so in a few words
(:func:`words`), and the incident's evidence lists them under ``fallbacks``.

The chains (``docs/rules.md``, "What each rule uses", is the table for rule writers):

* ``power_limit_w``: the log's enforced limit (``enforced.power.limit`` /
  ``power.limit``); the driver's enforced limit (live: NVML); the board's default limit
  (``power.default_limit``), then its max limit (``power.max_limit``); the catalogue's
  TDP for the GPU's name (:data:`watchdog.catalogue.GPU_MODELS`).
* ``power_idle_w``: the learned idle level; 10 % of a limit from the log or the driver;
  the catalogue's idle figure; 10 % of the catalogue's TDP; :data:`IDLE_OF_BUSY` of the
  learned busy level.
* ``power_busy_w``: the learned busy level; the power limit (any source above).
* ``mem_total_mib``: ``memory.total``; the driver's total (live); ``memory.used`` +
  ``memory.free`` + ``memory.reserved`` (0 where not logged); the catalogue's figure.
* ``temp_limit_c``: ``temperature.gpu`` + ``temperature.gpu.tlimit`` (the max operating
  temperature, T.Limit 0); the driver's max operating threshold (live: NVML), then its
  slowdown threshold; the catalogue's max operating temperature.
"""

from __future__ import annotations

import math

from watchdog import catalogue

# a GPU's idle power, taken as this share of its learned busy level when it was never seen
# idle and no limit or model is known: H100 74 W of a 390-690 W busy level (0.11-0.19),
# A100 PCIe 35 W of 245 W (0.14), a laptop GPU 8.7 W of 58 W (0.15), L40S 38 W of 180 W
# (0.21); the hang rule's lines (under 25 % of the range and 2.5x idle) then sit at 36 %
# of the busy level, below the lowest legitimate busy phase seen (H100 at 390 of 690 W:
# 57 %), above a hang at 1.5x idle on a node whose busy level is low (H100: 110-125 W of
# 390 W: 28-32 %), and above a GPU slowed to 65 % of its 390 W phase (37 %, the anomaly
# model's slowdown on a real 8x H100 log: at 0.20 the line was at 40 % and paged it)
IDLE_OF_BUSY = 0.15
IDLE_OF_LIMIT = 0.10  # of a power limit, until an idle level is learned

LIMIT_COLUMN, LIMIT_DRIVER, LIMIT_DEFAULT, LIMIT_MAX, LIMIT_CATALOGUE = range(5)
IDLE_LEARNED, IDLE_LIMIT, IDLE_CATALOGUE, IDLE_TDP, IDLE_BUSY = range(5)
BUSY_LEARNED, BUSY_LIMIT = range(2)
TOTAL_COLUMN, TOTAL_DRIVER, TOTAL_USED_FREE, TOTAL_CATALOGUE = range(4)
TLIM_COLUMN, TLIM_MAX_OPERATING, TLIM_SLOWDOWN, TLIM_CATALOGUE = range(4)


def _model(name: str | None, field: str) -> str:
    m = catalogue.gpu_model(name)
    if m is None:
        return "this GPU"
    return m.label + ("" if m.figure(field)[1] else ", unverified")


def words(signal: str, code: float, value: float, name: str | None) -> str | None:
    """What a page says about ``signal`` (a chained signal) whose value ``value`` came
    from source ``code`` (NaN: none) on a GPU called ``name``; None when it came from a
    source the log or the driver gives (nothing to say)."""
    known = not math.isnan(code)
    c = int(code) if known else -1
    if signal == "power_limit_w":
        if not known:
            return "no power limit in this log"
        return {LIMIT_DEFAULT: f"power limit: the board's default, {value:.0f} W "
                               "(no enforced limit logged)",
                LIMIT_MAX: f"power limit: the board's maximum, {value:.0f} W "
                           "(no enforced or default limit logged)",
                LIMIT_CATALOGUE: f"no power limit in this log: {value:.0f} W, the "
                                 f"catalogue's TDP for {_model(name, 'tdp_w')}"}.get(c)
    if signal == "power_idle_w":
        # 10 % of a limit the log or the driver gives is the engine's own default (every
        # fresh node starts there): nothing to say; the others stand in for a column
        return {IDLE_CATALOGUE: f"no idle period seen: idle {value:.0f} W, the catalogue's "
                                f"for {_model(name, 'idle_w')}",
                IDLE_TDP: f"no idle period seen: idle taken as {IDLE_OF_LIMIT:.0%} of the "
                          f"catalogue's TDP for {_model(name, 'tdp_w')}",
                IDLE_BUSY: f"no idle period seen: idle taken as {IDLE_OF_BUSY:.0%} of the "
                           "busy level"}.get(c)
    if signal == "power_busy_w":  # the limit stands in until the GPU's work is seen
        return ("no busy level learned yet: the power limit stands in"
                if c == BUSY_LIMIT else None)
    if signal == "mem_total_mib":
        return {TOTAL_USED_FREE: f"no memory.total column: total {value:.0f} MiB = used "
                                 "+ free (+ reserved where logged)",
                TOTAL_CATALOGUE: f"no memory.total column: total {value:.0f} MiB, the "
                                 f"catalogue's for {_model(name, 'memory_mib')}"}.get(c)
    if signal == "temp_limit_c":
        if not known:
            return ("no slowdown temperature known for this GPU: judged against the "
                    "temperatures it showed while working")
        return {TLIM_SLOWDOWN: f"slowdown at {value:.0f} C, the driver's threshold",
                TLIM_CATALOGUE: f"temperature only: slowdown at {value:.0f} C from the "
                                f"catalogue ({_model(name, 'max_operating_c')})"}.get(c)
    return None
