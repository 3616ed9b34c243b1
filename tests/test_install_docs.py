"""docs/install.md, run: every command line of its console blocks as a real subprocess.

The whole install is relocated into a scratch folder ``ROOT``: ``/opt/nvml-watchdog``,
``/etc/…`` and ``/var/lib/nvml-watchdog`` become ``ROOT/opt/…``, ``ROOT/etc/…`` and
``ROOT/var/lib/…``, in the commands and in a scratch copy of the checkout's ``config/``
(so the `sed` that switches on ``state_dir:`` and the unit's ExecStart still match). The
wheel is built from a copy of the checkout with the real ``pip wheel`` and installed into
a real virtual environment with its dependencies (from the configured package index), so
this is slow. Commands that need a running systemd are listed in :data:`NOT_RUN` with the
reason and what the test does instead: ``systemctl enable --now`` becomes the installed
unit's ExecStart on the fake NVML for a few seconds, so that the documented `watchdog
status` line has a (stopped) agent to report. A command added to the page without a place
here fails :func:`test_every_install_command_runs`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "install.md"
pytestmark = pytest.mark.slow

#: command -> why it is not run here (what is checked instead).
NOT_RUN = {
    "systemctl daemon-reload": "needs systemd as PID 1",
    "systemctl enable --now nvml-watchdog":
        "needs systemd as PID 1: the installed unit's ExecStart runs on the fake NVML instead",
    "systemctl status nvml-watchdog": "needs systemd as PID 1",
    'journalctl -u nvml-watchdog --since "-10min"': "needs the journal of a running systemd",
}


def commands(path: Path = PAGE) -> list[str]:
    """The ``$ …`` and ``# …`` lines of the page's ```console blocks, in order."""
    out: list[str] = []
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```console"
            continue
        if inside and line[:2] in ("$ ", "# "):
            out.append(line[2:].strip())
    return out


def relocate(text: str, root: Path) -> str:
    for prefix in ("/opt/nvml-watchdog", "/var/lib/nvml-watchdog", "/etc/"):
        text = text.replace(prefix, f"{root}{prefix}")
    return text


#: the unit's credentials as the service sees them (LoadCredential=), and where the page
#: keeps them: the test has no systemd to copy one to the other
CREDENTIALS = "/run/credentials/nvml-watchdog.service/"
SLACK_TOKEN = "xoxb-install-docs-0001"
PD_KEY = "0123456789abcdef0123456789abcdef"


def sinks_block(path: Path = PAGE) -> dict[str, object]:
    """The page's ```yaml block that names the sinks in watchdog.yaml."""
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", path.read_text(), re.S)
    (block,) = [b for b in blocks if "notify:" in b]
    return yaml.safe_load(block)


def name_the_sinks(root: Path, slack_url: str, pd_url: str, ca: str) -> None:
    """What the page has the operator do by hand between its commands (section 5): write
    each secret into its file and name the files in watchdog.yaml, as its yaml block shows;
    the test adds only where Slack and PagerDuty are (stand-ins on loopback)."""
    import yaml

    creds = root / "etc/nvml-watchdog/credentials"
    (creds / "slack-token").write_text(SLACK_TOKEN + "\n")
    (creds / "pagerduty-key").write_text(PD_KEY + "\n")
    doc = sinks_block()
    for sink in doc["notify"]["sinks"]:  # type: ignore[index]
        for key, value in list(sink.items()):
            if isinstance(value, str) and value.startswith(CREDENTIALS):
                sink[key] = str(creds / value.removeprefix(CREDENTIALS))
        if sink["type"] == "slack":
            sink["api_url"] = f"{slack_url}/api/"
        else:
            sink.update(url=f"{pd_url}/v2/enqueue", ca_file=ca)
    cfg = root / "etc/nvml-watchdog/watchdog.yaml"
    cfg.write_text(cfg.read_text() + "\n" + yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="module")
def receivers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """Slack's Web API and PagerDuty's Events API stand-ins, for `alerts test`."""
    from watchdog.testing.httpserver import Reply, Server, self_signed_cert

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the PagerDuty stand-in's certificate)")
    cert = self_signed_cert(tmp_path_factory.mktemp("tls"))
    with Server(Reply(200, {"ok": True, "channel": "C1", "ts": "1.0"})) as slack, \
            Server(Reply(202, {"status": "success", "dedup_key": "x"}), tls=cert) as pd:
        yield {"slack": slack, "pd": pd, "ca": cert[0]}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory,
              receivers: dict[str, object]) -> dict[str, object]:
    """Run the page's commands in order; the results by command."""
    tmp = tmp_path_factory.mktemp("install")
    root = tmp / "root"
    for d in ("etc/systemd/system", "var/lib"):  # present on any systemd machine
        (root / d).mkdir(parents=True)
    checkout = tmp / "checkout"
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
        ".ruff_cache", ".hypothesis"))
    for f in (checkout / "config").rglob("*"):
        if f.is_file():
            f.write_text(relocate(f.read_text(), root))
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    # python3 of the system, not of the test environment (as an operator would run it)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if Path(p) != Path(sys.executable).parent)
    results: dict[str, object] = {"root": root, "checkout": checkout, "env": env}
    for cmd in commands():
        if cmd.startswith("install -m 0644 config/nvml-watchdog.service"):  # section 6
            name_the_sinks(root, receivers["slack"].url, receivers["pd"].url,  # type: ignore[attr-defined]
                           str(receivers["ca"]))
        if cmd in NOT_RUN:
            if cmd == "systemctl enable --now nvml-watchdog":
                results[cmd] = start_unit(root, env)
            continue
        line = relocate(cmd, root)
        if line.startswith("systemd-sysusers "):
            if shutil.which("systemd-sysusers") is None:
                results[cmd] = None
                continue
            line = line.replace("systemd-sysusers ", f"systemd-sysusers --root={root} ", 1)
        r = subprocess.run(["bash", "-c", line], cwd=checkout, env=env, capture_output=True,
                           text=True, timeout=900)
        results[cmd] = r
    return results


def start_unit(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The installed unit's ExecStart, on the fake NVML for 3 s, with $STATE_DIRECTORY."""
    unit = (root / "etc/systemd/system/nvml-watchdog.service").read_text()
    (exec_start,) = re.findall(r"^ExecStart=(.*)$", unit, re.M)
    exe, *args = shlex.split(exec_start)
    py = Path(exe).parent / "python"
    state = root / "var/lib/nvml-watchdog"
    return subprocess.run(
        [str(py), "-m", "watchdog.testing.fakenvml", "healthy", "--", "watchdog", *args,
         "--duration", "3s"],
        env={**env, "STATE_DIRECTORY": str(state)}, capture_output=True, text=True,
        timeout=120)


def ok(results: dict[str, object], cmd: str) -> subprocess.CompletedProcess[str]:
    r = results[cmd]
    assert isinstance(r, subprocess.CompletedProcess), f"{cmd!r} was not run"
    assert r.returncode == 0, f"{cmd!r} exit {r.returncode}:\n{r.stdout}{r.stderr}"
    return r


def test_every_install_command_runs(installed: dict[str, object]) -> None:
    cmds = commands()
    assert len(cmds) > 10
    expected_rc = {
        # the agent the line before started ran for 3 s and stopped: status says so, exit 1
        "/opt/nvml-watchdog/bin/watchdog status --config /etc/nvml-watchdog/watchdog.yaml": 1,
    }
    for cmd in cmds:
        if cmd in NOT_RUN and cmd != "systemctl enable --now nvml-watchdog":
            continue
        r = installed[cmd]
        if r is None:  # systemd-sysusers absent: tests/test_unit_file.py says so too
            continue
        assert isinstance(r, subprocess.CompletedProcess), cmd
        assert r.returncode == expected_rc.get(cmd, 0), \
            f"{cmd!r} exit {r.returncode}:\n{r.stdout}{r.stderr}"
        assert "Traceback" not in r.stdout + r.stderr, cmd


def test_the_wheel_installs_into_opt_and_answers(installed: dict[str, object]) -> None:
    root = installed["root"]
    assert isinstance(root, Path)
    assert "nvml-watchdog" in ok(installed, "/opt/nvml-watchdog/bin/watchdog --version").stdout
    check = ok(installed, "/opt/nvml-watchdog/bin/watchdog check --source sim")
    assert "verdict: OK" in check.stdout
    # from the wheel, not from this checkout
    where = subprocess.run(
        [str(root / "opt/nvml-watchdog/bin/python"), "-c",
         "import watchdog; print(watchdog.__file__)"],
        capture_output=True, text=True, cwd=root, check=True).stdout
    assert where.startswith(str(root / "opt/nvml-watchdog"))
    docs = root / "opt/nvml-watchdog/share/doc/nvml-watchdog"
    assert (docs / "install.md").is_file() and (docs / "runbooks" / "gpu_lost.md").is_file()


def test_the_installed_config_names_the_state_dir(installed: dict[str, object]) -> None:
    root = installed["root"]
    assert isinstance(root, Path)
    cfg = root / "etc/nvml-watchdog/watchdog.yaml"
    text = cfg.read_text()
    assert f"\nstate_dir: {root}/var/lib/nvml-watchdog\n" in text
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o644


def test_alerts_test_reaches_every_sink_the_page_names(installed: dict[str, object],
                                                        receivers: dict[str, object]) -> None:
    """The page's `alerts test` line tries the sinks its yaml block names, with the secrets
    its steps install: each is delivered, with that secret, and none is printed."""
    r = ok(installed, "/opt/nvml-watchdog/bin/watchdog alerts test --config "
                      "/etc/nvml-watchdog/watchdog.yaml")
    assert "slack (slack): delivered" in r.stdout, r.stdout
    assert "pagerduty (pagerduty): delivered" in r.stdout, r.stdout
    slack, pd = receivers["slack"], receivers["pd"]
    assert slack.requests[-1].headers["Authorization"] == f"Bearer {SLACK_TOKEN}"  # type: ignore[attr-defined]
    assert pd.requests[0].body["routing_key"] == PD_KEY  # type: ignore[attr-defined]
    assert SLACK_TOKEN not in r.stdout + r.stderr and PD_KEY not in r.stdout + r.stderr


def test_secrets_files_are_root_only(installed: dict[str, object]) -> None:
    root = installed["root"]
    assert isinstance(root, Path)
    d = root / "etc/nvml-watchdog/credentials"
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for f in (d / "slack-token", d / "pagerduty-key", root / "etc/nvml-watchdog/secrets.env"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_the_installed_unit_verifies_and_its_service_ran(installed: dict[str, object]) -> None:
    root = installed["root"]
    assert isinstance(root, Path)
    unit = root / "etc/systemd/system/nvml-watchdog.service"
    assert f"ExecStart={root}/opt/nvml-watchdog/bin/watchdog run" in unit.read_text()
    ran = ok(installed, "systemctl enable --now nvml-watchdog")
    assert "watching 8 GPUs" in ran.stdout + ran.stderr
    status = installed[
        "/opt/nvml-watchdog/bin/watchdog status --config /etc/nvml-watchdog/watchdog.yaml"]
    assert isinstance(status, subprocess.CompletedProcess)
    assert "STOPPED" in status.stdout and "8" in status.stdout, status.stdout + status.stderr
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed")
    r = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None,
                    reason="systemd-sysusers not installed")
def test_the_service_user_exists_in_the_scratch_root(installed: dict[str, object]) -> None:
    root = installed["root"]
    assert isinstance(root, Path)
    assert re.search(r"^nvml-watchdog:x:\d+:\d+:", (root / "etc/passwd").read_text(), re.M)


def test_the_readme_install_block_is_the_guides(installed: dict[str, object]) -> None:
    """The README's short version runs nothing the guide (run above) does not."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Install as a service", 1)[1].split("```bash\n", 1)[1]
    lines = [ln.strip() for ln in block.split("```", 1)[0].splitlines() if ln.strip()]
    assert len(lines) >= 10
    guide = commands()
    for ln in lines:
        assert ln in guide, f"README install line not in docs/install.md: {ln}"
