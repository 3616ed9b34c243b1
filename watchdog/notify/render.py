"""Words for people: the headline and lines every sink builds its message from.

Written for an on-call engineer reading a phone at 3 a.m.: the severity, the kind, the host
and how many GPUs come first; then what the rule saw, in its own summary; then how long,
the job, and where the runbook is. Nothing here is a secret or a wall of JSON.

How long: one definition everywhere
-----------------------------------
Every "how long" a person reads (a page's ``for 12 min``, a resolve's ``after 40 min``, the
console's ``(for 2 min 30 s)`` and ``(lasted 40 min)``, ``watchdog alerts``) is the age of
the *condition*: from ``started_at`` (when the condition began, before the rule's ``for:``
made it fire) to ``now`` on the clock of the agent that raised it, or to ``resolved_at``
once it resolved (:func:`age`). Never from ``fired_at`` and never from when a notification
was made, so Slack, PagerDuty, the console and ``watchdog alerts`` give the same number for
the same moment. ``now`` is the agent's clock, not the wall clock: a simulated node's
incidents live in simulated time (a notification carries it as ``created_at``).
:func:`how_long` is the one format for it.

Evidence: every number with its unit and what it means (:func:`evidence`); internal
signals (``power_rel``, the rule's ``for_s``) are translated or left out, never shown raw.

Every text made here is one line per line, whatever a field holds (a host name, a
summary quoting a driver's message, a job id): :func:`watchdog.escape.line`. A sink
escapes it further for its own medium (Slack's ``mrkdwn``, a label).
"""

from __future__ import annotations

import time
from pathlib import PurePath

from watchdog import incident as records
from watchdog.escape import line
from watchdog.notify.base import Alert, Notification
from watchdog.untyped import JsonDoc


def gpu_list(gpus: tuple[str, ...] | list[str]) -> str:
    """``("0","1","2","5")`` -> ``"GPUs 0-2,5"``; one GPU -> ``"GPU 3"``; none -> ``"node"``."""
    if not gpus:
        return "node"
    return ("GPU " if len(gpus) == 1 else "GPUs ") + records.gpu_list(gpus)


# --- how long ------------------------------------------------------------------------------
def how_long(seconds: float) -> str:
    """The one format of a duration a person reads: ``13 s``, ``2 min 30 s``, ``12 min``,
    ``1 h 30 min``, ``2 d 3 h``. Negative (clock skew) reads as ``0 s``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 600:
        m, r = divmod(s, 60)
        return f"{m} min {r} s" if r else f"{m} min"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"


ago = how_long  # the earlier name


def age(started_at: float, resolved_at: float | None, now: float) -> float:
    """How long the condition has held (or held, once resolved): ``(resolved_at or now) -
    started_at``, never negative. The one definition behind every "for X" / "after X"."""
    end = resolved_at if resolved_at is not None else now
    return max(0.0, end - started_at)


# --- headline ------------------------------------------------------------------------------
def status_word(a: Alert) -> str:
    """``RESOLVED`` for a resolved alert, else its severity: ``CRITICAL``, ``WARNING``."""
    return "RESOLVED" if a.status == "resolved" else a.severity.upper()


def describe(a: Alert, now: float | None = None) -> str:
    """The headline without its status word: ``comm_hang on node7, GPUs 0-7, for 12 min``
    (``after 40 min`` once resolved). For listings that print the state themselves."""
    now = time.time() if now is None else now
    took = how_long(age(a.started_at, a.resolved_at, now))
    how = f"after {took}" if a.status == "resolved" else f"for {took}"
    return line(f"{a.kind} on {a.host}, {gpu_list(a.gpus)}, {how}")


def headline(a: Alert, now: float | None = None) -> str:
    """``CRITICAL comm_hang on node7, GPUs 0-7, for 12 min`` or ``RESOLVED … after 40 min``.

    ``now`` is the agent's clock when the notification was made (``created_at``), not the
    wall clock: a simulated node's incidents live in simulated time. The status word is
    said once: a listing with a state column of its own uses :func:`describe`."""
    return f"{status_word(a)} {describe(a, now)}"


# --- evidence ------------------------------------------------------------------------------
def _num(v: float, unit: str = "") -> str:
    """``105.08`` -> ``105``, ``1.36`` -> ``1.4``, ``0.004`` -> ``0``; unit after a space
    unless it is ``%``."""
    if unit.startswith("%") and 99 < v < 100:  # "at the limit" must not read as 100 %
        text = f"{v:.1f}"
    elif float(v).is_integer() or abs(v) >= 10:
        text = f"{v:.0f}"
    else:
        text = f"{v:.1f}".rstrip("0").rstrip(".")
    if not unit:
        return text
    return f"{text}{unit}" if unit.startswith("%") else f"{text} {unit}"


def _yes(v: object) -> str:
    return "yes" if v else "no"


#: Evidence key -> (words, unit) for plain numbers. Keys in _SKIP are never shown; power
#: and its learned levels are one phrase (_power); anything unknown is shown as its key
#: in words (``peer_gap 3`` -> ``peer gap 3``).
_WORDS: dict[str, tuple[str, str]] = {
    "util": ("utilization", "%"),
    "temp": ("temperature", "C"), "mem_temp": ("HBM temperature", "C"),
    "sm_clock_pct": ("SM clock", "% of max"), "clock": ("SM clock", "% of max"),
    "peer_util": ("its peers' utilization", "%"),
    "peer_clock": ("its peers' SM clock", "% of max"),
    "mem_pct": ("memory used", "%"), "growth": ("memory growth", "MiB/s"),
    "grew_pct": ("memory grew in 15 min", "points"),
    "mib_per_min": ("memory growth", "MiB/min"),
    "full_in_min": ("memory full in about", "min"),
    "sm_activity": ("SM activity", "%"),
    "code": ("XID", ""), "xid": ("XID", ""),
    "width": ("PCIe link width", ""), "gen": ("PCIe generation", ""),
    "replays": ("PCIe replays in 2 min", ""),
    "recovery": ("NVLink recoveries", ""), "replay": ("NVLink replays", ""),
    "crc_flit": ("NVLink flit CRC errors", ""), "crc_data": ("NVLink data CRC errors", ""),
    "failed_calls": ("failed NVML calls", ""),
    "retired": ("retired memory pages", ""),
    "remapped": ("rows remapped for uncorrectable errors", ""),
    "limit_w": ("power limit", "W"), "limit_c": ("slowdown temperature", "C"),
    "work_c": ("hottest while working before", "C"),
    "worked": ("worked before going idle", "% of the job's last 30 min"),
    "unwatched_s": ("not watched for", "s"),
}
_FLAGS: dict[str, str] = {"brake": "power brake", "remap_pending": "row remap pending",
                          "remap_failure": "row remap failed"}
#: Internal or already-said values: the rule's own for: (the headline says how long), the
#: count of learned waits, the serving decision (0/NaN), the anomaly bookkeeping, the
#: error text an nvml_error summary already quotes.
_SKIP = frozenset({"for_s", "learned_episodes", "serving", "features", "method", "threshold",
                   "error"})
#: Power and the GPU's learned levels: one phrase (_power).
_POWER = frozenset({"power", "power_rel", "idle_w", "busy_w"})


#: Every evidence key said in words (a test holds every shipped rule's keys to it).
KNOWN_EVIDENCE = frozenset({*_WORDS, *_FLAGS, *_SKIP, *_POWER, "used", "total",
                            "uncorrected", "new_uncorrected", "score", "learned_longest_s"})


def _power(ev: JsonDoc) -> str | None:
    """``power 105 W (idle 120 W, busy 690 W)``: the draw against the GPU's own learned
    levels, which is what ``power_rel`` (0 = idle, 100 = busy) measures; without the
    levels, ``power_rel`` in words (``at or below its idle level``), never the raw number."""
    w, idle, busy, rel = (_real(ev.get(k)) for k in ("power", "idle_w", "busy_w", "power_rel"))
    levels = ", ".join(x for x in (f"idle {_num(idle, 'W')}" if idle is not None else "",
                                   f"busy {_num(busy, 'W')}" if busy is not None else "") if x)
    if w is None:
        if rel is None:
            return f"learned power: {levels}" if levels else None
        return f"power {_rel_words(rel)}" + (f" ({levels})" if levels else "")
    text = f"power {_num(w, 'W')}"
    if levels:
        text += f" ({levels})"
    elif rel is not None:
        text += f" ({_rel_words(rel)})"
    return text


def _rel_words(rel: float) -> str:
    """Power between the GPU's own idle (0) and busy (100) levels, in words."""
    if rel < 5:
        return "at or below its idle level"
    if rel > 100:
        return "above its busy level"
    return f"{rel:.0f}% of the way from idle to busy"


def _real(v: object) -> float | None:
    """A finite number, else None (NaN, None, text)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        return None
    return float(v)


def _anomaly_words(key: str) -> str:
    try:  # the model's own feature words (numpy is loaded wherever anomalies exist)
        from watchdog.anomaly.explain import WORDS
    except ImportError:  # pragma: no cover - anomaly extras missing
        return key.replace("_", " ")
    return WORDS[key][0] if key in WORDS else key.replace("_", " ")


def evidence(a: Alert, limit: int = 6) -> str:
    """The numbers the rule decided on, in words with units: ``utilization 100% · power
    105 W (idle 120 W, busy 690 W) · SM clock 100% of max``. Internal signals are
    translated (power against its learned levels) or left out (the rule's ``for:``)."""
    ev = a.evidence
    out: list[str] = []
    done: set[str] = set()
    for k, v in ev.items():
        if len(out) >= limit:
            break
        if k in _POWER:
            if "power" in done:
                continue
            done.add("power")
            text = _power(ev)
        elif k in _SKIP:
            continue
        elif k in ("used", "total"):
            if "memory" in done:
                continue
            done.add("memory")
            used, total = _real(ev.get("used")), _real(ev.get("total"))
            text = (f"memory {_num(used)} of {_num(total, 'MiB')}" if used is not None
                    and total is not None else None)
        elif k in ("uncorrected", "new_uncorrected"):
            if "ecc" in done:
                continue
            done.add("ecc")
            n, new = _real(ev.get("uncorrected")), _real(ev.get("new_uncorrected"))
            text = (f"uncorrectable ECC errors: {_num(n)}" if n is not None else None)
            if text and new is not None:
                text += f" (+{_num(new)} in 10 min)"
        elif k in _FLAGS:
            if _real(v) is None:
                continue
            text = f"{_FLAGS[k]}: {_yes(v)}"
        elif k == "score" and _real(v) is not None:
            thr = _real(ev.get("threshold"))
            text = f"anomaly score {v:.2f}" + (f" (pages over {thr:.2f})" if thr else "")
        elif k == "learned_longest_s":
            text = (f"longest normal wait learned here {how_long(v)}"
                    if _real(v) is not None else None)
        elif isinstance(v, str):
            label = _anomaly_words(k) if a.kind == "anomaly" else k.replace("_", " ")
            text = f"{label} {v}"
        elif _real(v) is not None:
            label, unit = _WORDS.get(k, (k.replace("_", " "), ""))
            text = f"{label} {_num(float(v), unit)}"
        else:
            continue
        if text:
            out.append(text)
    return line(" · ".join(out))


# --- runbook -------------------------------------------------------------------------------
def runbook_link(a: Alert) -> str | None:
    """The runbook as a link a phone can open (http/https), or None."""
    url = a.runbook_url or ""
    return url if url.startswith(("https://", "http://")) else None


def runbook_text(a: Alert) -> str | None:
    """Where the runbook is, in words: ``runbook: https://…`` when ``runbook_url:`` is set;
    else its name and where to read it on the node (a local path is not a link: nobody on
    a phone can open ``/opt/…/comm_hang.md``)."""
    if not a.runbook_url:
        return None
    link = runbook_link(a)
    if link:
        return line(f"runbook: {link}")
    name = PurePath(a.runbook_url).stem
    return line(f"runbook: {name} (a file on {a.host}: {a.runbook_url})")


# --- whole messages ------------------------------------------------------------------------
def alert_lines(a: Alert, now: float | None = None) -> list[str]:
    """Headline, then the summary, numbers, GPU UUIDs, job and runbook, one per line."""
    lines = [headline(a, now), line(a.summary)]
    ev = evidence(a)
    if ev:
        lines.append(f"evidence: {ev}")
    if a.uuids:
        shown = ", ".join(f"{g}={u}" for g, u in zip(a.gpus[:8], a.uuids[:8], strict=False))
        more = f" (+{len(a.uuids) - 8} more)" if len(a.uuids) > 8 else ""
        lines.append(line(f"GPUs: {shown}{more}"))
    if a.job_id:
        lines.append(line(f"job: {a.job_id}"))
    rb = runbook_text(a)
    if rb:
        lines.append(rb)
    return lines


def title(n: Notification, now: float | None = None) -> str:
    """One line for the whole group (a Slack fallback, an email subject)."""
    now = n.created_at if now is None else now
    if n.reason in ("meta", "test"):
        return line(n.text or n.reason)
    firing = [a for a in n.alerts if a.status == "firing"]
    if not firing:
        a = n.alerts[0]
        more = f" (+{len(n.alerts) - 1} more)" if len(n.alerts) > 1 else ""
        return headline(a, now) + more
    worst = sorted(firing, key=lambda a: ("critical", "warning", "info").index(a.severity))[0]
    more = f" (+{len(firing) - 1} more firing)" if len(firing) > 1 else ""
    return headline(worst, now) + more


def as_text(n: Notification, now: float | None = None) -> str:
    """The whole notification as plain text (log sink, webhook ``text``)."""
    now = n.created_at if now is None else now
    if n.reason in ("meta", "test"):
        return line(f"[nvml-watchdog] {n.text}")
    blocks = ["\n".join(alert_lines(a, now)) for a in n.alerts]
    return "\n\n".join(blocks)


def jsonable_alert(a: Alert) -> JsonDoc:
    """The alert as JSON: times as ISO 8601 with zone, each also as ``<name>_epoch``
    (POSIX seconds, null when the time is)."""
    from dataclasses import asdict

    from watchdog.incident import iso

    d = asdict(a)
    for k in ("started_at", "fired_at", "resolved_at"):
        d[f"{k}_epoch"] = d[k]
        d[k] = iso(d[k])
    d["gpus"], d["uuids"] = list(a.gpus), list(a.uuids)
    return d
