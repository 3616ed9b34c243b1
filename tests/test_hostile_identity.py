"""Hostile identity: what a GPU job, a GPU or a log says is untrusted text.

A user's GPU job chooses its own environment: ``SLURM_JOB_ID='<!channel> <http://evil|click
to fix>'`` once put an @channel and a phishing link into the Slack page, a ``\\n`` or an
escape sequence (in it, or in a GPU's name) printed a fake ``CRITICAL … FIRING`` line or
set the terminal's title in ``watchdog status``, and a user could claim another job's id
and with it that job's PagerDuty incident. Now the variables are digits or dropped (with a
note in ``status``), the cgroup's job wins, an id only the environment gave never joins a
job-wide incident, and every writer escapes for its medium (:mod:`watchdog.escape`).

The end-to-end case runs the real agent on the fake NVML with a real process whose
environment is hostile, a GPU whose name and UUID are, and a Slack sink on loopback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from watchdog import escape
from watchdog.incident import Incident
from watchdog.notify.base import Alert, Notification
from watchdog.notify.fingerprint import identity
from watchdog.sources.nvml.procs import describe
from watchdog.testing.httpserver import Reply, Request, Server

EVIL_JOB = "<!channel> <http://evil|click to fix>"
EVIL_NAME = "H100\x1b]0;owned\x07\nCRITICAL xid fake FIRING \u202egnp.exe"
EVIL_UUID = "GPU-<!here>-*bold*-aaaa-0000-000000000000"
#: nothing a terminal or the journal acts on: C0/C1 controls, DEL, bidi overrides
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _proc(root: Path, pid: int, environ: bytes, cgroup: str = "0::/user.slice\n") -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text("python\n")
    (d / "environ").write_bytes(environ)
    (d / "cgroup").write_text(cgroup)


# --- identity from the environment --------------------------------------------------------
def test_a_job_id_that_is_not_digits_is_dropped_with_a_note(tmp_path: Path) -> None:
    """identity: SLURM_JOB_ID '<!channel> <http://…|click to fix>' from a GPU process is
    dropped (digits only), and the note says so"""
    _proc(tmp_path, 7, b"SLURM_JOB_ID=" + EVIL_JOB.encode() + b"\0SLURM_RESTART_COUNT=2\0")
    p = describe(7, 100.0, str(tmp_path))
    assert (p.job_id, p.job_run, p.job_from) == (None, None, None)
    assert p.job_note is not None and "is not a job id (digits only)" in p.job_note


def test_a_restart_count_that_is_not_digits_is_dropped(tmp_path: Path) -> None:
    """identity: SLURM_RESTART_COUNT with a newline is dropped, the job id kept"""
    _proc(tmp_path, 8, b"SLURM_JOB_ID=4242\0SLURM_RESTART_COUNT=1;\nCRITICAL\0")
    p = describe(8, 100.0, str(tmp_path))
    assert (p.job_id, p.job_run, p.job_from) == ("4242", None, "environ")
    assert "SLURM_RESTART_COUNT" in (p.job_note or "")


def test_an_id_only_the_environment_gave_never_joins_a_job_wide_incident(tmp_path: Path) -> None:
    """identity: a process claiming another job's id (SLURM_JOB_ID=4242, no cgroup) labels
    its GPU but never gets that job's comm_hang fingerprint (PagerDuty dedup_key)"""
    from watchdog.records import Sample
    from watchdog.service.jobs import JobTracker

    _proc(tmp_path, 9, b"SLURM_JOB_ID=4242\0")
    _proc(tmp_path, 10, b"", "0::/system.slice/slurmstepd.scope/job_4242/step_0\n")
    claimed, real = describe(9, 1.0, str(tmp_path)), describe(10, 1.0, str(tmp_path))
    t = JobTracker()
    t.observe(0.0, [Sample(ts=0.0, uuid="GPU-a", index=0, values={}, processes=(claimed,)),
                    Sample(ts=0.0, uuid="GPU-b", index=1, values={}, processes=(real,))])
    ja, jb = t.gpu_job("GPU-a"), t.gpu_job("GPU-b")
    assert ja is not None and jb is not None
    assert (ja.id, ja.trusted, jb.id, jb.trusted) == ("4242", False, "4242", True)
    inc = Incident(kind="comm_hang", severity="critical", host="n1", gpus=["0"],
                   uuids=["GPU-a"], started_at=0.0, fired_at=1.0, resolved_at=None,
                   rule="comm_hang", summary="hung")
    fp_claimed, job_claimed = identity(inc, "node", (ja.id, ja.run_id if ja.trusted else None))
    fp_real, _ = identity(inc, "node", (jb.id, jb.run_id))
    assert fp_real.startswith("job-") and not fp_claimed.startswith("job-")
    assert job_claimed == "4242"  # still said on the page, as what the process claimed
    assert t.status()["jobs"][0].get("from") == "environ" or \
        t.status()["jobs"][1].get("from") == "environ"


# --- one escaping function per medium -------------------------------------------------------
def _evil_alert() -> Alert:
    return Alert(fingerprint="f" * 16, status="firing", kind="xid", severity="critical",
                 host="node\n<!everyone>", gpus=("0",), uuids=(EVIL_UUID,), started_at=0.0,
                 fired_at=1.0, resolved_at=None, rule="xid_critical",
                 summary="GPU 0 XID 79 <http://evil|fix> *now*\x1b[2J",
                 evidence={"message": "NVRM: Xid \x1b]0;x\x07 <!here>"},
                 job_id=EVIL_JOB, runbook_url="https://runbooks.example/x?a=1&b=<2>")


def _texts(obj: object, kind: str) -> list[str]:
    """Every text object of type ``kind`` (``mrkdwn`` or ``plain_text``) in Block Kit."""
    out = []
    if isinstance(obj, dict):
        if obj.get("type") == kind:
            out.append(obj["text"])
            if kind == "mrkdwn":  # no bare URL or @mention made a link
                assert obj.get("verbatim") is True, obj
            else:  # no :emoji: either
                assert obj.get("emoji") is False, obj
        for v in obj.values():
            out += _texts(v, kind)
    elif isinstance(obj, list):
        for v in obj:
            out += _texts(v, kind)
    return out


def test_a_slack_page_carries_no_mention_link_or_control_from_any_field() -> None:
    """escape: job id, host, summary, evidence and GPU UUID with <!channel>, links,
    newlines and ESC reach Slack as text: no mention, no link but the runbook, one line each"""
    from watchdog.notify.sinks.slack import change_text, render_blocks

    n = Notification(id="n1", sink="slack", group_key="g", reason="new", created_at=5.0,
                     alerts=(_evil_alert(),))
    msg = render_blocks(n)
    texts = [msg["text"], *_texts(msg["blocks"], "mrkdwn"), change_text(n, 5.0)]
    for t in texts:
        assert "<!" not in t and "<http://evil" not in t, t
        assert not RAW_CONTROL.search(t), t
    (header,) = _texts(msg["blocks"], "plain_text")  # taken literally: one line is enough
    assert not RAW_CONTROL.search(header) and "\n" not in header, header
    joined = "\n".join(texts)
    assert "&lt;!channel&gt;" in joined and "\\x1b" in joined
    # the only link is the runbook's, its own & < > | kept out of Slack's syntax
    links = re.findall(r"<([^>]*)>", joined)
    assert links == ["https://runbooks.example/x?a=1%26b=%3C2%3E|runbook"], links
    assert "node\\n&lt;!everyone&gt;" in joined  # the host's newline shown, not acted on


def test_every_other_medium_gets_one_line_without_controls() -> None:
    """escape: console, log line, PagerDuty, Alertmanager labels, Slurm reason and node
    condition message: no newline, ESC or bidi override from a field survives"""
    from watchdog.notify.console import incident_line
    from watchdog.notify.render import as_text
    from watchdog.notify.sinks.alertmanager import am_alert
    from watchdog.notify.sinks.pagerduty import payload

    a = _evil_alert()
    inc = Incident(kind="xid", severity="critical", host=a.host, gpus=["0"], uuids=[EVIL_UUID],
                   started_at=0.0, fired_at=0.0, resolved_at=None, rule="r",
                   summary=a.summary)
    texts = [incident_line("firing", inc, 1.0)[1], json.dumps(payload(a)),
             *am_alert(a)["labels"].values(), *am_alert(a)["annotations"].values(),
             escape.k8s_message(EVIL_NAME), escape.label(EVIL_NAME)]
    for t in texts:
        assert not RAW_CONTROL.search(t) and "\n" not in t, t
    for block in as_text(Notification(id="n", sink="l", group_key="g", reason="new",
                                      created_at=1.0, alerts=(a,))).split("\n"):
        assert not RAW_CONTROL.search(block) and not block.startswith("CRITICAL xid fake")
    reason = escape.slurm_reason("watchdog: " + EVIL_NAME + ' "|`$(reboot)`')
    assert re.fullmatch(r"[A-Za-z0-9 .,:;_/@+=#()\[\]%-]*", reason), reason
    assert reason.startswith("watchdog: H100")


def test_a_log_line_is_one_line_whatever_a_field_holds(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """escape: a log record quoting a GPU name with a newline and ESC is one journal line"""
    import io

    from watchdog import logs

    buf = io.StringIO()
    logs.setup(stream=buf)
    try:
        logging.getLogger("watchdog.test").error("GPU name %s", EVIL_NAME)
    finally:
        logs.setup()
    out = buf.getvalue()
    assert out.count("\n") == 1 and not RAW_CONTROL.search(out), out
    assert "\\x1b]0;owned\\x07\\nCRITICAL" in out


def test_watchdog_check_shows_a_hostile_gpu_name_escaped(tmp_path: Path) -> None:
    """escape: `watchdog check` on a GPU whose name holds ESC ]0; (terminal title), a newline
    and a fake WATCHDOG OK line prints it escaped, on its own row"""
    sc = tmp_path / "sc.yaml"
    sc.write_text(json.dumps({"name": "evil", "gpus": [{"name": EVIL_NAME + "\nWATCHDOG OK"}]}))
    p = subprocess.run([sys.executable, "-m", "watchdog.testing.fakenvml", str(sc), "--",
                        "watchdog", "check", "--duration", "1s", "--no-color"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "NO_COLOR": "1"})
    assert "Traceback" not in p.stderr, p.stderr
    assert not RAW_CONTROL.search(p.stdout), p.stdout
    assert not any(x.startswith(("WATCHDOG OK", "CRITICAL xid fake")) for x in
                   p.stdout.splitlines()[1:]), p.stdout


# --- end to end: a hostile job on a real agent ----------------------------------------------
@pytest.mark.slow
def test_a_hostile_job_cannot_write_the_page_or_the_status(tmp_path: Path) -> None:
    """identity: a GPU process with SLURM_JOB_ID='<!channel> <http://evil|…>', on a GPU whose
    name holds ESC and a newline and whose UUID holds <!here>: the XID page reaches Slack
    without a mention or a link, `status` shows the dropped id as a note, every line clean"""
    job = subprocess.Popen(["sleep", "120"], env={"PATH": os.environ.get("PATH", ""),
                                                  "SLURM_JOB_ID": EVIL_JOB,
                                                  "SLURM_RESTART_COUNT": "1\n"})
    calls: list[dict[str, object]] = []

    def slack_api(req: Request) -> Reply:
        calls.append(req.body if isinstance(req.body, dict) else {"raw": req.body})
        return Reply(200, {"ok": True, "channel": "C1", "ts": f"1700000000.{len(calls):06d}"})

    try:
        sc = tmp_path / "sc.yaml"
        sc.write_text(json.dumps({"name": "hostile_job", "xids": [[0.0, 0, 79]], "gpus": [
            {"name": EVIL_NAME, "uuid": EVIL_UUID, "processes": [[job.pid, 60000]]}]}))
        with Server(handler=slack_api) as slack:
            cfg = tmp_path / "w.yaml"
            cfg.write_text(f"""state_dir: {tmp_path / 'state'}
notify:
  group_wait: 0s
  sinks:
    slack: {{type: slack, token_env: T_SLACK, channel: "#gpu", api_url: "{slack.url}/api/"}}
""")
            p = subprocess.run(
                [sys.executable, "-m", "watchdog.testing.fakenvml", str(sc), "--", "watchdog",
                 "run", "--config", str(cfg), "--duration", "6s"], capture_output=True,
                text=True, timeout=90, env={**os.environ, "T_SLACK": "xoxb-test-0001",
                                            "NO_COLOR": "1"})
            deadline = time.monotonic() + 10
            while not calls and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        job.kill()
        job.wait()
    assert p.returncode == 0, p.stderr[-2000:]
    for ln in p.stderr.splitlines():
        assert not RAW_CONTROL.search(ln), ln
        assert not ln.startswith("CRITICAL xid fake")
    assert calls, p.stderr[-2000:]
    sent = json.dumps(calls)
    assert "<!channel>" not in sent and "<!here>" not in sent and "<http://evil" not in sent
    assert "\\u001b" not in sent and "H100\\n" not in sent
    st = subprocess.run([sys.executable, "-m", "watchdog", "status", "--config", str(cfg)],
                        capture_output=True, text=True, timeout=60)
    assert not RAW_CONTROL.search(st.stdout), st.stdout
    assert not any(x.startswith("CRITICAL") for x in st.stdout.splitlines()), st.stdout
    assert "H100\\x1b]0;owned\\x07\\nCRITICAL" in st.stdout
    assert "is not a job id (digits only): dropped" in st.stdout, st.stdout


def test_replay_shows_what_a_log_says_escaped(tmp_path: Path) -> None:
    """escape: a log whose column name, host and GPU UUID hold ESC sequences and a newline:
    `watchdog replay` prints its warnings, table and GPU legend escaped"""
    f = tmp_path / "log.csv"
    rows = "".join(f"2024/01/01 00:{m:02d}:00.000, 0, GPU-x\x1b[2J\nCRITICAL, 100, 1, 0x0040\n"
                   for m in range(10))
    f.write_text("timestamp, index, uuid, power.draw [W], \x1b]0;owned\x07col [X], "
                 "clocks_event_reasons.active\n" + rows.replace("\nCRITICAL", "\\nCRITICAL"))
    p = subprocess.run([sys.executable, "-m", "watchdog", "replay", str(f)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "\\x1b]0;owned\\x07col" in p.stderr, p.stderr
    for out in (p.stdout, p.stderr):
        assert not RAW_CONTROL.search(out), out
