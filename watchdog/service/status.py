"""Render the agent's status document (``watchdog status``) for a person.

Every line goes through :func:`watchdog.escape.line`: a GPU's name, a job id, an error a
driver or a sink wrote, cannot start a line, move the cursor or set the terminal's title.
"""

from __future__ import annotations

from datetime import UTC, datetime

from watchdog.escape import line
from watchdog.report.table import duration, gpu_list
from watchdog.untyped import JsonDoc


def stale(doc: JsonDoc, written: float | None, now: float) -> bool:
    """Stopped, or no status written for 3 intervals plus 30 s (the agent writes every 5 s
    of its clock; a simulated node at speed writes in simulated time, so compare with the
    document's own clock where it runs ahead)."""
    if doc.get("stopped_at") is not None or written is None:
        return True
    return now - written > 30.0 + 3 * float(doc.get("interval_s") or 1.0) and \
        now - float(doc.get("now") or 0.0) > 30.0


def down_sinks(doc: JsonDoc) -> list[str]:
    """The alerting sinks that are down (refusing everything, or failing for longer than
    ``sink_fail_after``): ``watchdog status`` exits 1 while there is one."""
    sinks = (doc.get("alerting") or {}).get("sinks") or {}
    return sorted(name for name, s in sinks.items() if s.get("down"))


def _t(ts: float | None) -> str:
    if ts is None:
        return "never"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def render(doc: JsonDoc, now: float) -> str:
    """A short report: state line, GPUs, timing, errors, incidents, learned waits."""
    lines = []
    state = "STOPPED" if doc.get("stopped_at") else "STALE" if doc.get("stale") else "RUNNING"
    if doc.get("shadow"):
        state += " as a SHADOW (--shadow: never notifies)"
    down = down_sinks(doc)
    if down and state.startswith("RUNNING"):
        state += f" but ALERTING DOWN ({', '.join(down)})"
    up = float(doc.get("now") or now) - float(doc.get("started_at") or now)
    lines.append(f"agent {state} on {doc.get('host')} · source {doc.get('source')} "
                 f"({doc.get('source_state')}) · version {doc.get('version')} · up "
                 f"{duration(up)} · state {doc.get('state_dir')}")
    if doc.get("source_error"):
        lines.append(f"  GPUs not readable: {doc['source_error']}")
    lines.extend(_agent_lines(doc))
    gpus = doc.get("gpus") or []
    lines.append(f"GPUs: {len(gpus)}")
    lines.extend(f"  {g['index']}  {g.get('name') or '?'}  {g['uuid']}" for g in gpus)
    if doc.get("job") is not None:
        lines.append(_job_line(doc["job"]))
    lag = doc.get("lag_s") or {}
    det = doc.get("detect_ms") or {}
    lines.append(f"sampling: every {doc.get('interval_s'):g}s · {doc.get('ticks')} ticks · "
                 f"last sample {_t(doc.get('last_sample_at'))} · missed {doc.get('missed_ticks')}"
                 f" · lag last {lag.get('last', 0):.3f}s max {lag.get('max', 0):.3f}s")
    lines.append(f"rule evaluation: last {det.get('last', 0):.1f} ms, max "
                 f"{det.get('max', 0):.1f} ms · tick CPU {doc.get('tick_cpu_ms', 0):.1f} ms")
    errs = doc.get("nvml_errors") or {}
    lines.append(f"NVML errors: {errs.get('total', 0)}" + (
        " (" + ", ".join(f"{u}: {n}" for u, n in sorted(errs.get("by_gpu", {}).items())) + ")"
        if errs.get("by_gpu") else ""))
    active = doc.get("active_incidents") or []
    lines.append(f"active incidents: {len(active)}")
    for inc in active:
        gp = f"GPU {gpu_list(inc['gpus'])}" if inc.get("gpus") else "node"
        lines.append(f"  {inc['severity'].upper():8} {inc['kind']:16} {gp} since "
                     f"{_t(inc.get('started_at'))}: {inc.get('summary')}")
    waits = doc.get("learned_waits") or {}
    if waits:
        lines.append("learned waits: " + ", ".join(
            f"{rule} {duration(w['longest_s'])} over {w.get('episodes', 0)} episodes"
            if w.get("longest_s") is not None else f"{rule} not learned yet"
            for rule, w in sorted(waits.items())))
    md = doc.get("model")
    if md:
        lines.append(_model_line(md))
    m = doc.get("metrics")
    if m:
        lines.append(f"metrics: {m['listen']}" + (f" NOT SERVING: {m['error']}"
                                                  if m.get("error") else ""))
    if doc.get("alerting"):
        lines.extend(_alerting_lines(doc["alerting"]))
    if doc.get("slurm"):
        lines.extend(_slurm_lines(doc["slurm"]))
    lines.append(f"status written {_t(doc.get('status_written_at'))}")
    return "\n".join(line(x) for x in lines)


def _agent_lines(doc: JsonDoc) -> list[str]:
    """The agent's own state: where its database lives, the last reload, the clock."""
    out = []
    db = doc.get("state_db") or {}
    if db.get("mode") == "memory":
        out.append(f"  state: MEMORY ONLY ({db.get('reason')}); written to disk as soon as "
                   "it can be")
    if doc.get("config_error"):
        out.append(f"  config: BROKEN, a reload keeps the running one: {doc['config_error']}")
    rl = doc.get("reload")
    if rl:
        out.append(f"  last reload {_t(rl.get('at'))}: "
                   f"{'ok' if rl.get('ok') else 'FAILED, running config kept'}: "
                   f"{rl.get('message')}")
    off = doc.get("clock_offset_s")
    if off is not None and abs(off) >= 2.0:
        out.append(f"  clock: the system clock is {duration(abs(off))} "
                   f"{'ahead of' if off > 0 else 'behind'} the agent's (stepped since it "
                   "started); timestamps follow the agent's until it restarts, sampling is "
                   "unaffected")
    return out


def _job_line(job: JsonDoc) -> str:
    """``jobs: 4242 (slurm, run 1) on GPUs 0-7 · from the GPUs' processes``: what the node
    runs, which the metrics' ``job_id`` and a job-wide page's identity carry."""
    parts = []
    for j in job.get("jobs") or []:
        what = [j.get("scheduler") or "?"]
        if j.get("run") not in (None, "", "0"):
            what.append(f"run {j['run']}")
        if j.get("namespace") or j.get("pod"):
            what.append(f"pod {j.get('namespace') or '?'}/{j.get('pod') or '?'}")
        gpus = f" on GPU {gpu_list([str(g) for g in j['gpus']])}" if j.get("gpus") else ""
        if j.get("from") == "environ":
            what.append("from a process's environment only: never job-wide")
        parts.append(f"{j['id']} ({', '.join(what)}){gpus}")
    where = ("from the config (" + str(job.get("config")) + ")" if job.get("source") == "config"
             else "from the GPUs' processes" + (f" (the config's {job['config']} gives "
                                                "none now)" if job.get("config") else ""))
    line = f"job: {'; '.join(parts) if parts else 'none'} · {where}"
    if job.get("prometheus"):
        line += f" · job-wide resolves ask Prometheus at {job['prometheus']}"
    if job.get("problem"):
        line += f" · ! {job['problem']}"
    for note in job.get("notes") or []:
        line += f" · ! {note}"
    return line


def _model_line(md: JsonDoc) -> str:
    """``anomaly model: collecting 12/60 busy minutes`` or ``scoring (fitted ...)``."""
    head = f"anomaly model ({md.get('use')}): {md.get('state')}"
    if md.get("state") in ("collecting", "fitting"):
        head += f" {md.get('busy_min', 0):.0f}/{md.get('need_min')} busy minutes"
    if md.get("fitted_at") is not None:
        head += f" · fitted at {_t(md['fitted_at'])}"
    if md.get("threshold") is not None:
        head += f" · threshold {md['threshold']:.3f}"
    if md.get("coarse"):
        head += f" (coarse: refits after another {md.get('need_min')} busy minutes)"
    if md.get("last_score_max") is not None:
        head += f" · last score max {md['last_score_max']:.3f}"
    if md.get("workload_changed_at") is not None:
        head += (f" · workload changed at {_t(md['workload_changed_at'])}: "
                 f"{md.get('workload_change')}"
                 + (" (re-learning its normal)" if md.get("relearning") else ""))
    if md.get("error"):
        head += f" · {md['error']}"
    return head


def _slurm_lines(sl: JsonDoc) -> list[str]:
    """``slurm: node n17 drained by the agent · 1 drain, 0 resumes`` and its last actions."""
    state = ("DRAINED by the agent" + (" (dry run: not really)" if (sl.get("drained") or {})
                                       .get("dry_run") else "")
             if sl.get("drained") else "in service as far as the agent is concerned")
    head = (f"slurm: node {sl.get('node')} {state} · {sl.get('drains', 0)} drains, "
            f"{sl.get('resumes', 0)} resumes · hold-down {duration(sl.get('hold_down_s', 0))}"
            + (" · DRY RUN" if sl.get("dry_run") else "")
            + ("" if sl.get("judging", True) else " · cannot judge: changes nothing"))
    out = [head]
    if sl.get("error"):
        out.append(f"  ! {sl['error']}")
    for a in (sl.get("actions") or [])[-5:]:
        word = f"would {a['action']}" if a.get("dry_run") else a["action"]
        out.append(f"  {_t(a.get('at'))} {word}: {a.get('detail')}")
    return out


def _alerting_lines(al: JsonDoc) -> list[str]:
    """``alerting: 1 firing · 0 silences`` then one line per sink with its queue."""
    out = [f"alerting: {al.get('alerts_firing', 0)} firing · {al.get('silences', 0)} "
           f"silence(s) · {al.get('dropped', 0)} dropped by a full outbox"]
    for name, s in sorted((al.get("sinks") or {}).items()):
        state = "FAILING since " + _t(s["failing_since"]) if s.get("failing_since") else "ok"
        if s.get("refused"):
            state = (f"DOWN: refuses every notification since {_t(s.get('refused_since'))} "
                     f"({s['refused']} refused; pages routed only here are lost)")
        elif s.get("down"):
            state = "DOWN: " + state
        line = (f"  {name} ({s.get('type')}): {state} · sent {s.get('sent', 0)} · pending "
                f"{s.get('pending', 0)}")
        if s.get("oldest_pending_s") is not None:
            line += f" (oldest {duration(s['oldest_pending_s'])})"
        if s.get("undeliverable"):
            line += f" · undeliverable {s['undeliverable']}"
        if s.get("dropped"):
            line += f" · {s['dropped']} superseded dropped (outbox full)"
        if s.get("last_error"):
            line += f" · last error: {s['last_error']}"
        out.append(line)
    for p in al.get("problems") or []:
        out.append(f"  ! {p}")
    return out
