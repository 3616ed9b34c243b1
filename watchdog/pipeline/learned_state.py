"""What the live agent learned, to and from its state database.

The learned waits of rules and each GPU's learned power levels are saved every minute and
at shutdown, and restored when a detector starts (the agent's start, a reload). Stored
levels are not trusted blindly: levels an older definition taught are dropped and learned
again (:func:`watchdog.detect.learned.trusted_levels`), one log line per GPU.
"""

from __future__ import annotations

import logging

from watchdog.detect import Detector
from watchdog.detect.learned import LEVELS_VERSION, trusted_levels
from watchdog.store.agent import AgentStore

log = logging.getLogger("watchdog.agent")


def restore(store: AgentStore, detector: Detector, host: str | None) -> None:
    """Load what ``store`` (an :class:`~watchdog.store.agent.AgentStore`) kept for
    ``host`` into ``detector``, dropping levels it cannot trust."""
    if host is None:  # no host known: nothing was kept for it
        return
    waits, stored = store.load_learned(host)
    levels, dropped = trusted_levels(stored)
    for line in dropped:
        log.warning("learned power levels of GPU %s: learning them again", line)
    detector.load_learned_state(waits)
    detector.load_learned_levels(levels)
    if waits:
        log.info("learned waits restored: %s", ", ".join(
            f"{rule} {w.get('longest_s') or 0:.0f} s" for rule, w in sorted(waits.items())))


def persist(store: AgentStore, detector: Detector, host: str | None, now: float) -> None:
    """Save ``detector``'s learned waits and levels for ``host`` at ``now`` (POSIX s),
    with the version of the levels' definition."""
    if host is None:
        return
    store.save_learned(host, detector.learned_state(), detector.learned_levels(), now,
                       LEVELS_VERSION)
