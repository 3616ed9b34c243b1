"""``watchdog check --agent``: the running agent's judgment, read from its state.

No NVML, no rules: the verdict is what the agent that watches the node all the time has
concluded (its active incidents, with their severities), so a scheduler probe run every
few seconds and the pages never disagree, and a probe costs a database read. The agent
rewrites its status every 5 s of its clock (:mod:`watchdog.pipeline.live`); the probe reads
that row read-only (or the in-memory status file while the agent's state is in memory
only, :mod:`watchdog.store.runtime`).

Cannot judge (the ``probe`` finding, UNKNOWN): no status in the state directory, the
agent stopped or its status stale (:func:`watchdog.service.status.stale`), or the agent
itself cannot read the GPUs. Imports the SQLite store's connection helpers only.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from watchdog.check.verdict import Problem, Status, Verdict
from watchdog.untyped import JsonDoc

SEVERITY = {"critical": Status.CRITICAL, "warning": Status.WARNING}


def read_doc(state_dir: Path) -> tuple[JsonDoc | None, float | None, str | None]:
    """``(status document, when written, why not)`` of the agent on ``state_dir``."""
    from watchdog.errors import InputError
    from watchdog.store import connect, runtime

    doc = written = None
    why = None
    try:
        conn = connect(state_dir, readonly=True)
    except InputError as e:
        why = str(e)
    else:
        try:
            row = conn.execute("SELECT doc, updated_at FROM agent_status WHERE id = 1"
                               ).fetchone()
            if row:
                doc, written = json.loads(row[0]), float(row[1])
        except (sqlite3.Error, ValueError) as e:
            why = f"{state_dir}: cannot read the agent's status: {e}"
        finally:
            conn.close()
    mem = runtime.read(state_dir)
    if mem is not None and (written is None or (mem.get("status_written_at") or 0) > written):
        doc, written = mem, mem.get("status_written_at")
    if doc is None and why is None:
        why = f"{state_dir}: the agent has not written a status yet"
    return doc, written, why


def verdict(state_dir: Path, now: float, host: str | None = None) -> Verdict:
    """The node's verdict as the agent on ``state_dir`` sees it at ``now`` (POSIX s)."""
    from watchdog.service.status import stale

    doc, written, why = read_doc(state_dir)
    name = host or (doc or {}).get("host") or os.uname().nodename
    v = Verdict(host=str(name), checked_at=now, gpus=[], problems=[], source="agent")
    if doc is None:
        v.problems.append(Problem(Status.UNKNOWN, "probe", f"agent not running? {why}"))
        return v
    if stale(doc, written, now):
        state = "stopped" if doc.get("stopped_at") is not None else "not updating"
        v.problems.append(Problem(Status.UNKNOWN, "probe", f"the agent is {state} "
                                  f"(status {now - float(written or 0):.0f} s old)"))
        return v
    if doc.get("source_state") != "ok":
        v.problems.append(Problem(Status.UNKNOWN, "probe", "the agent cannot read the "
                                  f"GPUs: {doc.get('source_error')}"))
        return v
    for inc in doc.get("active_incidents") or []:
        severity = SEVERITY.get(str(inc.get("severity")))
        if severity is None:
            continue
        gpus = [str(g) for g in inc.get("gpus") or []]
        gpu = int(gpus[0]) if len(gpus) == 1 and gpus[0].isdigit() else None
        where = f"GPUs {','.join(gpus)}: " if len(gpus) > 1 else ""
        v.problems.append(Problem(severity, str(inc.get("kind")),
                                  f"{where}{inc.get('summary') or inc.get('rule')}", gpu))
    return v
