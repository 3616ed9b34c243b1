"""The detection engine: rolling windows, derived signals, the rule language and alert states.

Public API (the contract ``watchdog replay`` and the live agent build on)::

    from watchdog.detect import Detector, load_rules, RuleSet
    from watchdog.pipeline.core import build_detector
    rules = load_rules()                 # shipped defaults (package watchdog.default_rules)
    det = build_detector(rules, host=host, devices=devices, mode="block")  # a Detector
    det.feed_frame(frame, xids)          # replay: a block of many ticks
    det.feed_tick(ts, samples)           # live: one reading of every GPU
    det.drain()                          # [("firing" | "resolved", Incident), ...]
    det.finish()                         # end of input -> every incident so far

The rule file format and the condition language are documented in ``docs/rules.md``.
"""

from watchdog.detect.engine import Detector, DetectorConfig
from watchdog.detect.loader import Rule, RuleSet, load_rules

__all__ = ("Detector", "DetectorConfig", "Rule", "RuleSet", "load_rules")
