"""A sink can never hurt the agent (issue 16, hostile conditions).

Every sink type against a loopback endpoint that misbehaves on purpose (``watchdog.testing.
httpserver``): a redirect to another host, a reply trickled one byte at a time, an endless
body, an absurd ``Retry-After``, each way a connection can fail, a refusing endpoint while
every logger prints at DEBUG, and ``watchdog alerts test`` against a PagerDuty stand-in.
The real client libraries run (slack-sdk, PagerDuty's client); only the network is fake.
"""

from __future__ import annotations

import io
import logging
import queue
import shutil
import socket
import time
import tracemalloc
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import budget
from hostile_helpers import run as run_watchdog

from watchdog.logs import SecretFilter, redact
from watchdog.notify import store as st
from watchdog.notify.base import Accepted, Alert, Failed, Notification, Retry
from watchdog.notify.deliver import RETRY_AFTER_MAX_S, Worker
from watchdog.notify.sinks import build_sink
from watchdog.notify.sinks.common import retry_after
from watchdog.store import connect
from watchdog.testing.httpserver import (
    Reply,
    Server,
    huge,
    redirect,
    self_signed_cert,
    trickle,
)
from watchdog.testing.httpserver import retry_after as retry_after_reply

T0 = 1_800_000_000.0
TOKEN = "tok-0123456789-secret"
ROUTING_KEY = "abcdef0123456789abcdef0123456789"
#: what a webhook URL's secret part looks like (Slack's incoming webhooks: the path)
HOOK_PATH = "/services/T000/B000/XsEcReTxXsEcReTxXsEcReT"


def alert() -> Alert:
    return Alert(fingerprint="fp1", status="firing", kind="comm_hang", severity="critical",
                 host="node7", gpus=("0",), uuids=("GPU-0",), started_at=T0 - 600,
                 fired_at=T0 - 300, resolved_at=None, rule="comm_hang", summary="hung",
                 evidence={"power": 105.0})


def note(nid: str = "n1") -> Notification:
    return Notification(id=nid, sink="s", group_key="node7#abc", reason="new", created_at=T0,
                        alerts=(alert(),), changed=("fp1",))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the test servers' certificates)")
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def other_cert(tmp_path_factory: pytest.TempPathFactory, tls: tuple[str, str]) -> str:
    """A second self-signed certificate: the wrong ``ca_file`` for the first."""
    return self_signed_cert(tmp_path_factory.mktemp("tls2"))[0]


def secret_file(folder: Path, name: str, value: str) -> str:
    p = folder / name
    p.write_text(value)
    p.chmod(0o600)
    return str(p)


def make_sink(kind: str, url: str, folder: Path, ca: str | None = None,
              timeout: float = 1.0) -> Any:
    """A sink of ``kind`` aimed at ``url`` (a loopback server's base URL), with a secret."""
    extra = {"ca_file": ca} if ca else {}
    if kind == "webhook":
        return build_sink("hook", "webhook", {
            "url": url + "/hook?sig=XsEcReT", "timeout": timeout,
            "token_file": secret_file(folder, "tok", TOKEN), **extra}, "cfg:1")
    if kind == "alertmanager":
        return build_sink("am", "alertmanager", {
            "url": url, "timeout": timeout,
            "token_file": secret_file(folder, "tok", TOKEN), **extra}, "cfg:1")
    if kind == "slack":
        return build_sink("slack", "slack", {
            "token_file": secret_file(folder, "tok", "xoxb-" + TOKEN), "channel": "#gpu",
            "api_url": url + "/api/", "timeout": timeout, **extra}, "cfg:1")
    if kind == "slack-webhook":
        return build_sink("slackhook", "slack", {
            "webhook_url_file": secret_file(folder, "url", url + HOOK_PATH),
            "timeout": timeout, **extra}, "cfg:1")
    if kind == "pagerduty":
        return build_sink("pd", "pagerduty", {
            "routing_key_file": secret_file(folder, "key", ROUTING_KEY), "url": url,
            "timeout": timeout, **extra}, "cfg:1")
    raise AssertionError(kind)


SINKS = ["webhook", "alertmanager", "slack", "slack-webhook", "pagerduty"]
PREFIX = {"webhook": "", "alertmanager": "", "slack": "slack: ",
          "slack-webhook": "slack webhook: ", "pagerduty": "pagerduty: "}


def server_for(kind: str, reply: Reply, tls: tuple[str, str]) -> Server:
    """PagerDuty's client speaks https only: its stand-in has a certificate."""
    return Server(reply, tls=tls if kind == "pagerduty" else None)


def ca_for(kind: str, tls: tuple[str, str]) -> str | None:
    return tls[0] if kind == "pagerduty" else None


def outbox_after(tmp_path: Path, result: Any, fail_after: float = 600.0,
                 sink: str = "hook") -> tuple[str, float, list[tuple[str, str, str]]]:
    """``result`` recorded by a delivery worker for a queued row, as after a real send:
    the row's state, how long until its next try (s), and the events reported."""
    conn = connect(tmp_path / "state")
    st.open_store(conn)
    n = note()
    conn.execute("INSERT INTO notify_outbox (sink, group_key, reason, doc, created_at) "
                 "VALUES (?, ?, ?, ?, ?)", (sink, n.group_key, n.reason,
                                             st.notification_to_json(n), time.time()))
    rid = conn.execute("SELECT MAX(id) FROM notify_outbox").fetchone()[0]
    events: queue.Queue[tuple[str, str, str]] = queue.Queue()
    fake = type("S", (), {"name": sink, "rate_per_s": None})()
    worker = Worker(fake, None, events, fail_after)  # type: ignore[arg-type]
    now = time.time()
    worker._record(conn, rid, n.group_key, 0, result)
    state, next_at = conn.execute("SELECT state, next_at FROM notify_outbox WHERE id = ?",
                                  (rid,)).fetchone()
    conn.close()
    got = []
    while not events.empty():
        got.append(events.get_nowait())
    return state, next_at - now, got


# --- 1. redirects ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", SINKS)
def test_a_redirect_to_another_host_is_not_followed(kind: str, tmp_path: Path,
                                                    tls: tuple[str, str]) -> None:
    """sink: a 302 to another host is not followed and never carries the token"""
    with Server() as other, server_for(kind, Reply(), tls) as srv:
        # "localhost" is another host name than the configured 127.0.0.1
        srv.default = redirect(f"http://localhost:{other.port}/steal")
        r = make_sink(kind, srv.url, tmp_path, ca_for(kind, tls)).send(note(), {})
    assert isinstance(r, Failed), r
    assert r.error == (f"{PREFIX[kind]}HTTP 302 redirect to localhost: not followed (put the "
                       "final URL in the config)")
    assert other.connections == 0 and other.requests == other.refused == []
    assert len(srv.refused) == 1  # it did ask the configured host, once
    assert TOKEN not in r.error and "steal" not in r.error
    if kind == "webhook":  # the outbox row is undeliverable, not sent
        state, _, events = outbox_after(tmp_path, r)
        assert state == "failed" and events[0][0] == "failed"


# --- 2. one deadline per request ------------------------------------------------------------
@pytest.mark.parametrize("kind", SINKS)
def test_a_trickling_reply_is_abandoned_at_the_deadline(kind: str, tmp_path: Path,
                                                        tls: tuple[str, str]) -> None:
    """sink: a reply trickled one byte at a time is abandoned at the sink's timeout

    Through the real slack-sdk and PagerDuty clients: this also fails loudly if a client
    release stops sending through the guarded transport (it would wait for minutes)."""
    with server_for(kind, trickle(0.2), tls) as srv:
        sink = make_sink(kind, srv.url, tmp_path, ca_for(kind, tls), timeout=1.0)
        t0 = time.monotonic()
        r = sink.send(note(), {})
        took = time.monotonic() - t0
    assert isinstance(r, Retry), r
    assert "deadline of 1 s passed" in r.error and "127.0.0.1" in r.error, r.error
    assert took >= 0.9, took  # not before the deadline (a busy machine only adds time)
    if kind == "webhook":
        state, wait, _ = outbox_after(tmp_path, r)
        assert state == "pending" and wait > 0


def test_the_deadline_covers_a_reply_that_never_starts(tmp_path: Path) -> None:
    """sink: a server that accepts the connection and never answers is left at the deadline"""
    with Server(Reply(200, delay=5.0)) as srv:
        r = make_sink("webhook", srv.url, tmp_path, timeout=0.5).send(note(), {})
    # the 200 would have come after 5 s: a Retry means the sink gave up at its deadline
    assert isinstance(r, Retry) and "deadline of 0.5 s passed while waiting for the reply" \
        in r.error, r


# --- 3. bounded replies ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["webhook", "slack", "slack-webhook", "pagerduty"])
@pytest.mark.parametrize("reply", [huge(), huge(1 << 30, length=True)],
                         ids=["endless", "1GB-announced"])
def test_an_endless_reply_body_is_read_only_up_to_the_cap(kind: str, reply: Reply,
                                                          tmp_path: Path,
                                                          tls: tuple[str, str]) -> None:
    """sink: a 1 GB (or endless) reply is read up to 64 KiB, then refused as an error"""
    with server_for(kind, reply, tls) as srv:
        sink = make_sink(kind, srv.url, tmp_path, ca_for(kind, tls), timeout=2.0)
        tracemalloc.start()
        try:
            r = sink.send(note(), {})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert isinstance(r, Retry), r
    assert r.error == f"{PREFIX[kind]}127.0.0.1:{srv.port}: reply larger than 64 KiB (not " \
                      "read further)"
    assert peak < 2 << 20, f"{peak / 2**20:.1f} MiB allocated while reading the reply"


def test_the_real_command_stays_small_against_an_endless_reply(tmp_path: Path) -> None:
    """alerts test: an endless reply body keeps `watchdog alerts test` far below MemoryMax
    (the budget bench/hostile.py measures)"""
    with Server(huge()) as srv:
        cfg = tmp_path / "w.yaml"
        cfg.write_text(f'notify:\n  sinks:\n    hook: {{type: webhook, url: "{srv.url}/x", '
                       f'timeout: 2}}\n')
        out = run_watchdog(["alerts", "test", "--config", str(cfg)], timeout=30)
    assert out.rc == 1, out
    assert "hook (webhook): retry: " in out.stdout and "reply larger than 64 KiB" in out.stdout
    budget(out)


# --- 4. Retry-After -------------------------------------------------------------------------
def test_an_absurd_retry_after_is_capped_and_reported_at_once(tmp_path: Path) -> None:
    """sink: Retry-After of 31 years is retried after 1 h and reported as failing at once"""
    with Server(retry_after_reply("999999999")) as srv:
        r = make_sink("webhook", srv.url, tmp_path).send(note(), {})
    assert isinstance(r, Retry) and r.after == 999999999.0
    state, wait, events = outbox_after(tmp_path, r)
    assert state == "pending"
    assert RETRY_AFTER_MAX_S == 3600.0 and 3599 <= wait <= 3601
    assert len(events) == 1
    kind, sink, text = events[0]
    assert (kind, sink) == ("failing", "hook")
    assert text.startswith("sink hook asks to wait 32 years (Retry-After); retrying in 1 h "
                           "instead: HTTP 429"), text


def test_a_sane_retry_after_is_honoured_and_not_reported(tmp_path: Path) -> None:
    """sink: Retry-After as an HTTP date 30 s ahead is honoured and reported only later"""
    date = formatdate(time.time() + 30, usegmt=True)
    with Server(retry_after_reply(date, status=503)) as srv:
        r = make_sink("webhook", srv.url, tmp_path).send(note(), {})
    assert isinstance(r, Retry) and r.after is not None and 27 <= r.after <= 31
    state, wait, events = outbox_after(tmp_path, r)
    assert state == "pending" and 27 <= wait <= 31 and events == []


@pytest.mark.parametrize(("value", "want"), [
    ("7", 7.0), (" 7 ", 7.0), ("-5", 0.0), ("0", 0.0), ("NaN", None), ("nan", None),
    ("inf", None), ("1e999", float("inf")), ("9" * 5000, float("inf")), ("soon", None),
    ("", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("Wed, 99 Foo 99999 99:99:99 GMT", None),
    ("Fri, 31 Dec 9999 23:59:59 GMT", "huge"), ("1_000", None), ("0x10", None),
])
def test_any_retry_after_is_understood_or_ignored(value: str, want: Any,
                                                  tmp_path: Path) -> None:
    """sink: a negative, NaN, huge or garbled Retry-After never crashes and never parks a row
    for longer than 1 h"""
    got = retry_after(value)
    if want == "huge":
        assert got is not None and got > 200 * 365 * 86400
    else:
        assert got == want
    state, wait, _ = outbox_after(tmp_path, Retry("HTTP 429", got))
    assert state == "pending" and 0 <= wait <= RETRY_AFTER_MAX_S + 1


# --- 5. a message per failure mode ----------------------------------------------------------
def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_every_failure_mode_has_its_own_message(tmp_path: Path, tls: tuple[str, str],
                                                other_cert: str) -> None:
    """sink: DNS, refused, untrusted certificate, TLS, deadline, reset, too large and redirect
    each say what happened, naming the host only"""
    got: dict[str, str] = {}

    def send(name: str, url: str, ca: str | None = None, timeout: float = 1.0) -> None:
        r = make_sink("webhook", url, tmp_path, ca, timeout).send(note(), {})
        assert not isinstance(r, Accepted), name
        got[name] = r.error

    send("dns", "http://no-such-host.invalid")
    port = _closed_port()
    send("refused", f"http://127.0.0.1:{port}")
    with Server(tls=tls) as srv:
        send("tls_verify", srv.url, other_cert)
        send("tls_verify_no_ca", srv.url)  # the system's CAs do not know it either
    with Server() as srv:
        send("tls", srv.url.replace("http://", "https://"))
        srv.default = Reply(200, delay=3.0)
        send("deadline", srv.url, timeout=0.5)
        srv.default = Reply(200, {"ok": True, "pad": "x" * 1000}, cut=10)
        send("reset", srv.url)
        srv.default = huge()
        send("too_large", srv.url)
        srv.default = redirect("https://elsewhere.example/x?token=1")
        send("redirect", srv.url)
        where = f"127.0.0.1:{srv.port}"
    if "while resolving" in got["dns"]:
        pytest.skip("this machine's resolver does not answer within the deadline")
    assert got["dns"].startswith("cannot resolve no-such-host.invalid")
    assert got["refused"] == f"127.0.0.1:{port} refused the connection"
    assert got["tls_verify"].startswith("TLS: 127.0.0.1's certificate is not trusted: ")
    assert got["tls_verify"].endswith("; check ca_file")
    assert got["tls_verify_no_ca"].startswith("TLS: 127.0.0.1's certificate is not trusted: ")
    assert got["tls"].startswith(f"TLS with {where} failed: ")
    assert got["deadline"] == (f"{where}: deadline of 0.5 s passed while waiting for the "
                               "reply (request abandoned)")
    assert got["reset"] == f"{where} closed the connection while reading the reply"
    assert got["too_large"] == f"{where}: reply larger than 64 KiB (not read further)"
    assert got["redirect"] == ("HTTP 302 redirect to elsewhere.example: not followed (put the "
                               "final URL in the config)")
    modes = {k: v for k, v in got.items() if k != "tls_verify_no_ca"}
    assert len(set(modes.values())) == len(modes)  # no two modes read alike
    for name, text in got.items():  # host only: never the path or query, never the token
        assert "/hook" not in text and "XsEcReT" not in text and TOKEN not in text, name
        assert "\n" not in text and len(text) < 300, name


def test_pagerduty_tells_a_wrong_ca_file_from_a_closed_port(tmp_path: Path,
                                                           tls: tuple[str, str],
                                                           other_cert: str) -> None:
    """sink: PagerDuty with a wrong ca_file says the certificate is not trusted, not "down\""""
    with Server(Reply(202, {"status": "success", "dedup_key": "fp1"}), tls=tls) as srv:
        wrong = make_sink("pagerduty", srv.url, tmp_path, other_cert).send(note(), {})
    port = _closed_port()
    closed = make_sink("pagerduty", f"https://127.0.0.1:{port}", tmp_path,
                       tls[0]).send(note(), {})
    assert isinstance(wrong, Retry) and isinstance(closed, Retry)
    assert wrong.error.startswith("pagerduty: TLS: 127.0.0.1's certificate is not trusted: ")
    assert wrong.error.endswith("check ca_file")
    assert closed.error == f"pagerduty: 127.0.0.1:{port} refused the connection"


# --- 6. secrets never logged ----------------------------------------------------------------
@pytest.fixture
def debug_log() -> Any:
    """Every logger at DEBUG into one buffer, through the daemon's SecretFilter."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(SecretFilter())
    root = logging.getLogger()
    names = ["", "slack_sdk", "slack_sdk.webhook", "slack_sdk.webhook.client",
             "slack_sdk.web.base_client", "pagerduty", "httpx2", "httpx", "httpcore",
             "urllib3", "watchdog", "watchdog.notify"]
    saved = {n: logging.getLogger(n).level for n in names}
    old_handlers = list(root.handlers)
    root.handlers = [handler]
    for n in names:
        logging.getLogger(n).setLevel(logging.DEBUG)
    try:
        yield buf
    finally:
        root.handlers = old_handlers
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)


@pytest.mark.parametrize("refusal", ["404", "refused"])
def test_a_refusing_slack_webhook_never_prints_its_url(refusal: str, tmp_path: Path,
                                                       debug_log: io.StringIO) -> None:
    """sink: a refusing Slack incoming webhook never shows its URL (the secret) in a log line
    or an error message, even with every logger at DEBUG"""
    if refusal == "404":
        with Server(Reply(404, f"no_service for {HOOK_PATH}")) as srv:
            sink = make_sink("slack-webhook", srv.url, tmp_path)
            r = sink.send(note(), {})
    else:
        sink = make_sink("slack-webhook", f"http://127.0.0.1:{_closed_port()}", tmp_path)
        r = sink.send(note(), {})
    logging.getLogger("watchdog.notify").warning("sink %s: %s", sink.name, r.error)
    assert isinstance(r, Failed if refusal == "404" else Retry), r
    text = debug_log.getvalue()
    assert "***" in text, text  # slack-sdk did log the URL, and the filter removed it
    assert HOOK_PATH not in text and "XsEcReT" not in text, text
    assert HOOK_PATH not in r.error and "XsEcReT" not in r.error, r.error  # no filter needed


def test_every_secret_read_is_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         debug_log: io.StringIO) -> None:
    """sink: tokens, routing keys and webhook URLs (inline ones too) are blanked in every log
    line"""
    monkeypatch.setenv("T_HOSTILE_TOKEN", "xoxb-registered-token-1")
    build_sink("s", "slack", {"token_env": "T_HOSTILE_TOKEN", "channel": "#a"}, "c")
    make_sink("pagerduty", "https://127.0.0.1:9", tmp_path)
    inline = "https://hooks.example.org/inline/XsEcReTinline"
    build_sink("h", "webhook", {"url": inline}, "c")
    for value in ("xoxb-registered-token-1", ROUTING_KEY, inline):
        assert redact(f"x {value} y") == "x *** y"
        logging.getLogger("some.library").debug("sending to %s", value)
    assert "registered-token" not in debug_log.getvalue()
    assert ROUTING_KEY not in debug_log.getvalue() and "XsEcReT" not in debug_log.getvalue()


# --- 7. alerts test leaves no PagerDuty incident open ---------------------------------------
def _pd_config(tmp_path: Path, url: str, ca: str) -> Path:
    cfg = tmp_path / "w.yaml"
    key = secret_file(tmp_path, "pd.key", ROUTING_KEY)
    cfg.write_text(f"notify:\n  sinks:\n    pd: {{type: pagerduty, routing_key_file: {key}, "
                   f"url: \"{url}/v2/enqueue\", ca_file: {ca}, timeout: 2}}\n")
    return cfg


def test_alerts_test_triggers_then_resolves_the_pagerduty_test_incident(
        tmp_path: Path, tls: tuple[str, str]) -> None:
    """alerts test: the PagerDuty test incident is triggered, then resolved with the same key"""
    with Server(Reply(202, {"status": "success", "dedup_key": "x"}), tls=tls) as pd:
        out = run_watchdog(["alerts", "test", "--config", str(_pd_config(tmp_path, pd.url,
                                                                          tls[0]))],
                           timeout=30)
    assert out.rc == 0, out
    assert "pd (pagerduty): delivered" in out.stdout
    events = [(q.body["event_action"], q.body["dedup_key"]) for q in pd.requests]
    assert [a for a, _ in events] == ["trigger", "resolve"], events
    assert events[0][1] == events[1][1] and events[0][1].startswith("watchdog-test-")
    assert pd.requests[0].body["payload"]["severity"] == "info"
    assert ROUTING_KEY not in out.stdout + out.stderr


def test_alerts_test_is_not_delivered_until_the_resolve_is_accepted(
        tmp_path: Path, tls: tuple[str, str]) -> None:
    """alerts test: a PagerDuty test whose resolve keeps failing is not "delivered" and says
    the test incident is still open"""
    with Server(tls=tls) as pd:
        pd.script = [Reply(202, {"status": "success", "dedup_key": "x"})]
        pd.default = Reply(503, {"status": "down"})
        out = run_watchdog(["alerts", "test", "--config", str(_pd_config(tmp_path, pd.url,
                                                                          tls[0]))],
                           timeout=30)
    assert out.rc == 1, out
    assert "pd (pagerduty): retry: pagerduty: HTTP 503; the test incident watchdog-test-" \
        in out.stdout and "resolve it in PagerDuty" in out.stdout, out.stdout
    actions = [q.body["event_action"] for q in pd.requests + pd.refused]
    assert actions == ["trigger", "resolve", "resolve"], actions  # one more try, not forever
