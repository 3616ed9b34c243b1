"""Each sink against a real server on loopback: the generic webhook, Slack's Web API
(through the real slack-sdk client), PagerDuty's Events API v2 (through the official
client) and a real Prometheus Alertmanager process where Debian's package is installed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from watchdog.errors import InputError
from watchdog.notify.base import Accepted, Alert, Failed, Notification, Retry
from watchdog.notify.sinks import build_sink
from watchdog.notify.sinks.slack import render_blocks
from watchdog.testing.httpserver import Reply, Request, Server, self_signed_cert

T0 = 1_800_000_000.0


def alert(status: str = "firing", gpus: tuple[str, ...] = ("0", "1"), fp: str = "fp1") -> Alert:
    return Alert(fingerprint=fp, status=status, kind="comm_hang",  # type: ignore[arg-type]
                 severity="critical", host="node7", gpus=gpus,
                 uuids=tuple(f"GPU-{g}" for g in gpus), started_at=T0 - 720, fired_at=T0 - 570,
                 resolved_at=T0 if status == "resolved" else None, rule="comm_hang",
                 summary="job looks hung: 100% util but only 105 W (busy is 690 W)",
                 evidence={"power": 105.0, "busy_w": 690.0, "util": 100.0},
                 runbook_url="https://runbooks.example/comm_hang", job_id="4242")


def note(reason: str = "new", *alerts: Alert, nid: str = "n1") -> Notification:
    al = alerts or (alert(),)
    return Notification(id=nid, sink="s", group_key="node7#abc", reason=reason,  # type: ignore[arg-type]
                        created_at=T0, alerts=al, changed=tuple(a.fingerprint for a in al))


# --- webhook ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("reply", "want"), [
    (Reply(200), Accepted), (Reply(503), Retry), (Reply(400), Failed), (Reply(404), Failed)])
def test_webhook_maps_replies(reply: Reply, want: type) -> None:
    with Server(reply) as srv:
        sink = build_sink("hook", "webhook", {"url": srv.url + "/x"}, "cfg:1")
        assert isinstance(sink.send(note(), {}), want)
    body = (srv.requests or srv.refused)[0].body
    assert body["id"] == "n1" and body["status"] == "firing"
    assert body["alerts"][0]["fingerprint"] == "fp1" and "job looks hung" in body["text"]


def test_webhook_429_retries_after_what_the_server_says() -> None:
    with Server(Reply(429, {"error": "slow down"}, {"Retry-After": "7"})) as srv:
        r = build_sink("hook", "webhook", {"url": srv.url}, "cfg:1").send(note(), {})
    assert isinstance(r, Retry) and r.after == 7.0


def test_webhook_timeout_and_refused_connection_are_retries() -> None:
    with Server(Reply(200, delay=2.0)) as srv:
        r = build_sink("hook", "webhook", {"url": srv.url, "timeout": 0.3}, "c:1").send(note(), {})
    assert isinstance(r, Retry) and "deadline of 0.3 s passed" in r.error
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = build_sink("hook", "webhook", {"url": f"http://127.0.0.1:{port}"}, "c:1").send(note(), {})
    assert isinstance(r, Retry) and r.error == f"127.0.0.1:{port} refused the connection"


def test_secrets_come_from_env_or_file_and_are_never_inline(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match=r"cfg:3\.token: secrets never go in the config"):
        build_sink("s", "slack", {"token": "xoxb-1", "channel": "#a"}, "cfg:3")
    with pytest.raises(InputError, match="environment variable SLACK_TOKEN_X is not set"):
        build_sink("s", "slack", {"token_env": "SLACK_TOKEN_X", "channel": "#a"}, "cfg:3")
    with pytest.raises(InputError, match=r"routing_key_file: cannot read"):
        build_sink("p", "pagerduty", {"routing_key_file": str(tmp_path / "none")}, "cfg:4")
    key = tmp_path / "key"
    key.write_text("R0UTINGKEY\n")
    with pytest.raises(InputError, match=r"cfg:4\.routing_key_file: .*key is readable by others "
                                         r"\(mode 644\); make it 0600"):
        build_sink("p", "pagerduty", {"routing_key_file": str(key)}, "cfg:4")
    key.chmod(0o600)
    assert build_sink("p", "pagerduty", {"routing_key_file": str(key)}, "c").type == "pagerduty"


# --- Slack ----------------------------------------------------------------------------------
class FakeSlack:
    """Slack's Web API as far as the sink uses it: chat.postMessage / chat.update."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []  # type: ignore[type-arg]
        self.fail: list[Reply] = []
        self.n = 0

    def __call__(self, req: Request) -> Reply:
        method = req.path.rsplit("/", 1)[-1]
        if self.fail:
            return self.fail.pop(0)
        body = req.body if isinstance(req.body, dict) else {}
        self.calls.append((method, body))
        self.n += 1
        return Reply(200, {"ok": True, "channel": "C0GPU", "ts": f"1700000000.{self.n:06d}"})


def slack_sink(url: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("T_SLACK", "xoxb-test")
    return build_sink("slack", "slack", {"token_env": "T_SLACK", "channel": "#gpu",
                                          "api_url": url + "/api/"}, "cfg:9")


def test_slack_posts_once_then_updates_and_replies_in_the_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlack()
    with Server(handler=fake) as srv:
        sink = slack_sink(srv.url, monkeypatch)
        r1 = sink.send(note("new"), {})
        assert isinstance(r1, Accepted) and r1.memory["ts"] == "1700000000.000001"
        r2 = sink.send(note("update", alert(gpus=tuple("01234567")), nid="n2"), r1.memory)
        r3 = sink.send(note("resolved", alert("resolved"), nid="n3"), r2.memory)
        assert isinstance(r3, Accepted)
    methods = [m for m, _ in fake.calls]
    assert methods == ["chat.postMessage", "chat.update", "chat.postMessage", "chat.update",
                       "chat.postMessage"]
    assert fake.calls[1][1]["ts"] == "1700000000.000001"
    assert fake.calls[2][1]["thread_ts"] == "1700000000.000001"
    assert "GPUs 0-7" in fake.calls[2][1]["text"]
    assert fake.calls[4][1]["text"].startswith("RESOLVED comm_hang on node7")


def test_slack_429_is_a_retry_after_and_a_bad_channel_is_undeliverable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlack()
    fake.fail = [Reply(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "3"}),
                 Reply(200, {"ok": False, "error": "channel_not_found"})]
    with Server(handler=fake) as srv:
        sink = slack_sink(srv.url, monkeypatch)
        r = sink.send(note(), {})
        assert isinstance(r, Retry) and r.after == 3.0
        r = sink.send(note(), {})
        assert isinstance(r, Failed) and "channel_not_found" in r.error


def test_slack_retry_after_a_half_done_update_does_not_update_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlack()
    with Server(handler=fake) as srv:
        sink = slack_sink(srv.url, monkeypatch)
        mem = sink.send(note("new"), {}).memory
        fake.calls.clear()
        fake.fail = []
        # the update succeeds, the thread reply hits a 500
        orig = fake.__call__
        state = {"n": 0}

        def flaky(req: Request) -> Reply:
            state["n"] += 1
            if state["n"] == 2:
                return Reply(500, {"ok": False, "error": "internal_error"})
            return orig(req)

        srv.handler = flaky
        r = sink.send(note("update", nid="n2"), mem)
        assert isinstance(r, Retry) and r.memory["updated_for"] == "n2"
        r = sink.send(note("update", nid="n2"), r.memory)
        assert isinstance(r, Accepted)
    assert [m for m, _ in fake.calls] == ["chat.update", "chat.postMessage"]


def test_slack_message_reads_well_and_stays_inside_block_kit_limits() -> None:
    msg = render_blocks(note("new", *[alert(fp=f"f{i}", gpus=(str(i),)) for i in range(40)]))
    assert len(msg["blocks"]) <= 50
    assert all(len(b["text"]["text"]) <= 3000 for b in msg["blocks"] if "text" in b)
    head = msg["blocks"][0]["text"]["text"]
    assert head.startswith("CRITICAL comm_hang on node7, GPU 0, for 12 min")
    one = render_blocks(note("new"))
    text = json.dumps(one)
    for must in ("CRITICAL comm_hang on node7, GPUs 0-1, for 12 min", "105 W", "GPU-0",
                 "job 4242", "runbooks.example/comm_hang"):
        assert must in text, must


# --- PagerDuty ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (PagerDuty's client speaks HTTPS only)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the test server's certificate)")
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def pd_sink(url: str, tmp_path: Path, tls: tuple[str, str]):  # type: ignore[no-untyped-def]
    key = tmp_path / "pd.key"
    key.write_text("abcdef0123456789abcdef0123456789")
    key.chmod(0o600)
    return build_sink("pd", "pagerduty", {"routing_key_file": str(key), "url": url,
                                          "ca_file": tls[0]}, "cfg:5")


def test_pagerduty_triggers_and_resolves_by_fingerprint(tmp_path: Path,
                                                        tls: tuple[str, str]) -> None:
    with Server(Reply(202, {"status": "success", "dedup_key": "fp1"}), tls=tls) as srv:
        sink = pd_sink(srv.url, tmp_path, tls)
        m = sink.send(note("new"), {}).memory
        assert isinstance(sink.send(note("repeat", nid="r"), m), Accepted)  # not sent
        assert isinstance(sink.send(note("resolved", alert("resolved"), nid="n3"), m), Accepted)
    events = [r.body for r in srv.requests]
    assert [(e["event_action"], e["dedup_key"]) for e in events] == [
        ("trigger", "fp1"), ("resolve", "fp1")]
    assert events[0]["routing_key"] == "abcdef0123456789abcdef0123456789"
    p = events[0]["payload"]
    assert p["severity"] == "critical" and p["source"] == "node7" and p["class"] == "comm_hang"
    assert p["summary"].startswith("CRITICAL comm_hang on node7")
    assert srv.requests[0].path == "/v2/enqueue"


def test_pagerduty_429_and_400(tmp_path: Path, tls: tuple[str, str]) -> None:
    with Server(Reply(429, {"status": "throttle"}, {"Retry-After": "11"}), tls=tls) as srv:
        r = pd_sink(srv.url, tmp_path, tls).send(note(), {})
    assert isinstance(r, Retry) and r.after == 11.0
    with Server(Reply(400, {"status": "invalid event"}), tls=tls) as srv:
        r = pd_sink(srv.url, tmp_path, tls).send(note(), {})
    assert isinstance(r, Failed) and "400" in r.error


def test_pagerduty_retry_of_a_half_sent_batch_sends_only_the_rest(
        tmp_path: Path, tls: tuple[str, str]) -> None:
    two = note("new", alert(fp="a"), alert(fp="b", gpus=("5",)))
    with Server(tls=tls) as srv:
        srv.script = [Reply(202, {"status": "success", "dedup_key": "a"}),
                      Reply(503, {"status": "down"})]
        srv.default = Reply(202, {"status": "success", "dedup_key": "b"})
        sink = pd_sink(srv.url, tmp_path, tls)
        r = sink.send(two, {})
        assert isinstance(r, Retry) and r.memory["done"] == ["a"]
        assert isinstance(sink.send(two, r.memory), Accepted)
    assert [q.body["dedup_key"] for q in srv.requests] == ["a", "b"]


# --- a real Alertmanager --------------------------------------------------------------------
AM = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def alertmanager(tmp_path: Path):  # type: ignore[no-untyped-def]
    if AM is None:
        pytest.skip("prometheus-alertmanager is not installed (apt-get install "
                    "prometheus-alertmanager; .ci/run installs it)")
    cfg = tmp_path / "am.yml"
    cfg.write_text("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n")
    port, cport = _free_port(), _free_port()
    proc = subprocess.Popen(
        [AM, f"--config.file={cfg}", f"--storage.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
         f"--cluster.advertise-address=127.0.0.1:{cport}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=1)
            break
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode()) from None  # type: ignore[union-attr]
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(10)


def _am_alerts(url: str) -> list[dict]:  # type: ignore[type-arg]
    with urllib.request.urlopen(url + "/api/v2/alerts?active=true&silenced=true&inhibited=true"
                                "&unprocessed=true", timeout=5) as r:
        return json.load(r)


def test_a_real_alertmanager_receives_fires_and_resolves(alertmanager: str) -> None:
    sink = build_sink("am", "alertmanager", {"url": alertmanager}, "cfg:7")
    assert sink.resend_interval == 60.0
    now = time.time()
    live = replace(alert(), started_at=now - 60, fired_at=now - 5)
    firing = Notification(id="n1", sink="am", group_key="g", reason="new", created_at=now,
                          alerts=(live,), changed=("fp1",))
    assert isinstance(sink.send(firing, {}), Accepted)
    got = _am_alerts(alertmanager)
    assert len(got) == 1
    labels = got[0]["labels"]
    assert labels["alertname"] == "comm_hang" and labels["fingerprint"] == "fp1"
    assert labels["host"] == "node7" and "gpus" not in labels  # labels never change
    assert got[0]["annotations"]["gpus"] == "0,1"
    assert "job looks hung" in got[0]["annotations"]["summary"]
    resolved_alert = replace(live, status="resolved", resolved_at=now - 1)
    resolved = Notification(id="n2", sink="am", group_key="g", reason="resolved",
                            created_at=now, alerts=(resolved_alert,), changed=("fp1",))
    assert isinstance(sink.send(resolved, {}), Accepted)
    assert _am_alerts(alertmanager) == []  # ended: no longer active


@pytest.mark.parametrize(("type_", "options"), [
    ("webhook", {"url": "http://127.0.0.1:9/x", "timeout": "soon"}),
    ("webhook", {"url": "http://127.0.0.1:9/x", "rate_per_s": -1}),
    ("alertmanager", {"url": "http://127.0.0.1:9093", "timeout": 0}),
])
def test_a_bad_number_option_is_one_line(type_: str, options: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(InputError, match=r"^cfg:2: notify\.sinks\.x\.(timeout|rate_per_s): must "
                                         r"be a positive number"):
        build_sink("x", type_, options, "cfg:2: notify.sinks.x")


# --- proxies (the guarded transport honours them as urllib did) ------------------------------
class ConnectProxy:
    """A minimal CONNECT proxy on loopback: records each tunnel's target, relays bytes."""

    def __init__(self) -> None:
        import socketserver
        import threading

        outer = self
        self.targets: list[str] = []

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                import select

                line = self.rfile.readline().decode()
                while self.rfile.readline() not in (b"\r\n", b""):
                    pass
                target = line.split()[1]
                outer.targets.append(target)
                host, port = target.rsplit(":", 1)
                up = socket.create_connection((host, int(port)), timeout=5)
                self.wfile.write(b"HTTP/1.0 200 Connection established\r\n\r\n")
                socks = [self.connection, up]
                while True:
                    ready, _, _ = select.select(socks, [], [], 5)
                    if not ready:
                        break
                    for s in ready:
                        data = s.recv(65536)
                        if not data:
                            up.close()
                            return
                        (up if s is self.connection else self.connection).sendall(data)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_an_http_proxy_from_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    with Server(Reply(200)) as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        r = build_sink("hook", "webhook", {"url": "http://hooks.example.invalid/x?y=1"},
                       "c:1").send(note(), {})
        assert isinstance(r, Accepted), r
        assert proxy.requests[0].path == "http://hooks.example.invalid/x?y=1"
        assert proxy.requests[0].headers["Host"] == "hooks.example.invalid"
        monkeypatch.setenv("no_proxy", "hooks.example.invalid")  # bypassed: not resolvable
        r = build_sink("hook", "webhook", {"url": "http://hooks.example.invalid/x"},
                       "c:1").send(note(), {})
        assert isinstance(r, Retry) and "cannot resolve hooks.example.invalid" in r.error
    assert len(proxy.requests) == 1


def test_pagerduty_goes_through_an_https_proxy_tunnel(tmp_path: Path, tls: tuple[str, str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = ConnectProxy()
    try:
        with Server(Reply(202, {"status": "success", "dedup_key": "fp1"}), tls=tls) as srv:
            monkeypatch.setenv("https_proxy", proxy.url)
            monkeypatch.delenv("no_proxy", raising=False)
            monkeypatch.delenv("NO_PROXY", raising=False)
            r = pd_sink(srv.url, tmp_path, tls).send(note("new"), {})
            assert isinstance(r, Accepted), r
        assert proxy.targets == [f"127.0.0.1:{srv.port}"]
        assert srv.requests[0].body["dedup_key"] == "fp1"
    finally:
        proxy.close()
