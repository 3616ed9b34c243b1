"""This agent's claim on the node's GPUs (one agent per node).

The claim itself is :mod:`watchdog.store.claims` (a lock per GPU UUID in the runtime
folder); this module takes it when the source first opens: at start where NVML answers,
else at the first open that works, and mutes and stops the agent (exit 2) when another
agent holds the GPUs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from watchdog.clock import Clock
from watchdog.sources import SourceOptions
from watchdog.sources.base import LiveSource
from watchdog.store.claims import Claims
from watchdog.untyped import JsonDoc

log = logging.getLogger("watchdog.agent")


class GpuClaim:
    """This agent's claim on the GPUs it watches (:mod:`watchdog.store.claims`: one agent
    per node). Taken when the source first opens: at start where NVML answers, else at
    the first open that works. A claim refused then (another agent started meanwhile)
    stops this agent with exit 2 and mutes it first (the opener's ``on_refused``)."""

    def __init__(self, info: JsonDoc, wanted: bool) -> None:
        self.info = info
        self.pending = wanted
        self.claims: Claims | None = None

    def take(self, source: LiveSource) -> None:
        """Claim ``source``'s GPUs (once); raises SecondAgent or InputError."""
        from watchdog.store.claims import claim, claims_dir

        if not self.pending:
            return
        self.claims = claim([d.uuid for d in source.devices()], self.info)
        self.pending = False
        if self.claims is None:
            log.warning("GPUs not claimed: cannot create %s, so an agent started later "
                        "cannot see this one (run as root or the service's user)",
                        claims_dir())

    def opener(self, spec: str, options: SourceOptions, first: LiveSource | None,
               on_refused: Callable[[Exception], None]) -> Callable[[float], LiveSource]:
        """The pipeline's source opener: ``first`` (the source opened at start, or None),
        then new ones, each claimed until a claim is held; a claim refused calls
        ``on_refused`` (the agent mutes itself and stops) before the open fails."""
        from watchdog.errors import SourceUnavailable
        from watchdog.sources import open_live
        from watchdog.store.claims import SecondAgent

        handed = [first]

        def open_source(now: float) -> LiveSource:
            given = handed.pop() if handed else None
            handed.clear()
            source = given if given is not None else open_live(spec, options, start=now)
            try:
                self.take(source)
            except SecondAgent as e:
                source.close()
                on_refused(e)
                raise SourceUnavailable(str(e)) from None
            return source

        return open_source

    def release(self) -> None:
        if self.claims is not None:
            self.claims.release()
            self.claims = None


def claim_at_start(spec: str, options: SourceOptions, clock: Clock,
                   gpus: GpuClaim) -> LiveSource | None:
    """Open an nvml source now and claim its GPUs (SecondAgent: refused, exit 2); the
    open source goes to the pipeline. None where NVML does not answer yet: the claim is
    then taken at the first open that works."""
    from watchdog.errors import SourceUnavailable
    from watchdog.sources import open_live

    if not gpus.pending:
        return None
    try:
        source = open_live(spec, options, start=clock.now())
    except SourceUnavailable:
        return None
    try:
        gpus.take(source)
    except BaseException:
        source.close()
        raise
    return source
