"""The agent against a real Slurm (Debian's slurmctld, slurmd and munge on loopback,
:mod:`slurm_helpers`): a real job started with ``srun``, a simulated GPU falling off the
bus under it, the node drained with a ``watchdog:`` reason within one tick of the
incident firing and resumed after it resolved and the hold-down passed; an admin's own
reason never touched; an admin's RESUME not undone; an agent that cannot judge changes
nothing. The job id comes from the shipped Prolog (``config/slurm/prolog.sh``) through
``job: {id_file: …}``.

Runs where the test is root with the binaries installed (CI: ``.ci/run`` installs them);
skips elsewhere, saying why. The agents run simulated nodes at 25x (a tick every 5 s of
the agent's clock, 0.2 s of real time); waits are on what the agent writes in its status,
never on a duration.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from slurm_helpers import Cluster, missing

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]

INTERVAL = 5.0
SPEED = 25.0
HOLD_DOWN = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def clean(cluster):
    """Each test starts and ends with the node in service."""
    cluster.resume_if_drained = lambda: cluster.resume() if "drain" in cluster.state() \
        else None
    cluster.resume_if_drained()
    yield cluster
    cluster.resume_if_drained()


class Agent:
    """``watchdog run`` as a subprocess with a config; reads its status from its state."""

    def __init__(self, cluster: Cluster, tmp: Path, source: str, *, prefix=(),
                 slurm: dict | None = None, job_file: bool = False) -> None:
        self.state_dir = tmp / "state"
        cfg = {"source": source, "interval": f"{INTERVAL:g}s",
               **({"speed": SPEED} if source.startswith("sim") else {}),
               "slurm": {"hold_down": f"{HOLD_DOWN:g}s", "timeout": "10s", **(slurm or {})}}
        if job_file:
            cfg["job"] = {"id_file": str(cluster.job_file)}
        self.config = tmp / "watchdog.yaml"
        self.config.write_text(yaml.safe_dump(cfg))
        self.log = open(tmp / "agent.log", "w")  # noqa: SIM115 - closed by stop()
        command = [*prefix, "watchdog"] if prefix else ["-m", "watchdog"]
        self.proc = subprocess.Popen(
            [sys.executable, *command, "run", "--config", str(self.config), "--state-dir",
             str(self.state_dir)], env=cluster.env, stdout=self.log, stderr=subprocess.STDOUT)

    def status(self) -> dict:
        try:
            conn = sqlite3.connect(f"file:{self.state_dir}/state.db?mode=ro", uri=True)
            try:
                row = conn.execute("SELECT doc FROM agent_status WHERE id = 1").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return {}
        return json.loads(row[0]) if row else {}

    def incidents(self) -> list[dict]:
        conn = sqlite3.connect(f"file:{self.state_dir}/state.db?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT kind, fired_at, resolved_at, evidence FROM incidents "
                                "ORDER BY started_at").fetchall()
        finally:
            conn.close()
        return [{"kind": k, "fired_at": f, "resolved_at": r, "evidence": json.loads(e)}
                for k, f, r, e in rows]

    def wait(self, ok, what: str, timeout: float = 120.0) -> dict:
        """Poll the status until ``ok(status)``; fail (with the agent's log) after
        ``timeout`` real seconds, a bound on a hang, not on the behaviour."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            if st and ok(st):
                return st
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"{what}: not seen; agent log:\n"
                    + Path(self.log.name).read_text()[-3000:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def actions(st: dict, kind: str | None = None) -> list[dict]:
    return [a for a in (st.get("slurm") or {}).get("actions", [])
            if kind is None or a["action"] == kind]


def test_a_lost_gpu_drains_the_node_under_a_real_job_and_resumes_it(clean, tmp_path):
    cluster = clean
    job = subprocess.Popen(["srun", "--job-name=train", "sleep", "8"], env=cluster.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not cluster.job_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    job_id = cluster.job_file.read_text().strip()  # the shipped Prolog wrote it
    assert job_id.isdigit()
    agent = Agent(cluster, tmp_path, "sim:gpu_lost(gpus=2,for=20)@60", job_file=True)
    try:
        st = agent.wait(lambda s: actions(s, "drain"), "a drain")
        state, reason = cluster.node_line()
        assert reason.startswith("watchdog: gpu_lost GPU 2: ") and "drain" in state, \
            (state, reason)
        assert "watchdog: gpu_lost" in cluster.run("sinfo", "-R").stdout  # cut at 20
        assert any(j["id"] == job_id for j in (st.get("job") or {}).get("jobs", [])), st
        assert job.wait(timeout=60) == 0  # a drain lets the running job finish
        st = agent.wait(lambda s: actions(s, "resume"), "a resume after the hold-down",
                        timeout=180)
        assert cluster.state() == "idle" and cluster.node_line()[1] == "none"
        incs = [i for i in agent.incidents() if i["kind"] in ("gpu_lost", "xid")]
        lost = next(i for i in incs if i["kind"] == "gpu_lost")
        drain, resume = actions(st, "drain")[0], actions(st, "resume")[0]
        ticks = (drain["at"] - lost["fired_at"]) / INTERVAL
        print(f"drain latency: {ticks:.2f} ticks ({drain['at'] - lost['fired_at']:.2f} s "
              f"of the agent's clock at {INTERVAL:g} s a tick)")
        assert 0 <= ticks <= 1.0
        last_resolved = max(i["resolved_at"] for i in incs)
        assert resume["at"] - last_resolved >= HOLD_DOWN
        assert any("drain node" in e for e in lost["evidence"].get("slurm", []))
        assert st["slurm"]["drains"] == 1 and st["slurm"]["resumes"] == 1
    finally:
        agent.stop()
        if job.poll() is None:
            job.kill()
        job.communicate()
    assert not cluster.job_file.exists()  # the Epilog removed it


def test_an_admins_reason_is_never_touched(clean, tmp_path):
    cluster = clean
    cluster.drain("fan replacement (ops-123)")
    agent = Agent(cluster, tmp_path, "sim:gpu_lost(gpus=1,for=10)@20")
    try:
        agent.wait(lambda s: actions(s, "skipped"), "the admin's reason seen and kept")
        # past the fault, its resolve and the hold-down: the agent still leaves it alone
        agent.wait(lambda s: not s.get("active_incidents") and s["now"] - s["started_at"]
                   > 20 + 10 + 30 + 300 + HOLD_DOWN + 4 * INTERVAL, "the hold-down passed",
                   timeout=180)
        assert cluster.node_line()[1] == "fan replacement (ops-123)"
        st = agent.status()
        assert not actions(st, "drain") and not actions(st, "resume")
    finally:
        agent.stop()


def test_an_admins_resume_is_not_undone(clean, tmp_path):
    cluster = clean
    agent = Agent(cluster, tmp_path, "sim:gpu_lost(gpus=0)@20")  # lost for good
    try:
        agent.wait(lambda s: actions(s, "drain"), "a drain")
        cluster.resume()  # the admin: this node runs jobs on its other GPUs
        st = agent.wait(lambda s: actions(s, "respected"), "the admin's resume seen")
        seen = st["slurm"]["checked_at"]
        agent.wait(lambda s: s["slurm"]["checked_at"] > seen + 10 * INTERVAL,
                   "more looks at the node")
        assert "drain" not in cluster.state()
        st = agent.status()
        assert st["slurm"]["drains"] == 1 and len(actions(st, "drain")) == 1
        assert st["active_incidents"] and st["active_incidents"][0]["kind"] == "gpu_lost"
    finally:
        agent.stop()


@pytest.mark.parametrize("judging", [False, True])
def test_an_agent_that_cannot_judge_changes_nothing(clean, tmp_path, judging):
    """A drain of the agent's own left from an earlier run: an agent without NVML (it
    cannot judge) keeps it, however long; one that reads its GPUs resumes it after the
    hold-down (the control: without the judging rule the first would too)."""
    cluster = clean
    cluster.drain("watchdog: ecc GPU 1: uncorrectable ECC (an earlier run)")
    prefix = () if judging else ("-m", "watchdog.testing.fakenvml", "no_library", "--")
    agent = Agent(cluster, tmp_path, "sim:healthy" if judging else "nvml", prefix=prefix,
                  slurm={"hold_down": "0s"})
    try:
        if judging:
            agent.wait(lambda s: actions(s, "resume"), "the earlier drain resumed")
            assert "drain" not in cluster.state()
            return
        st = agent.wait(lambda s: s.get("slurm") and not s["slurm"]["judging"],
                        "the agent unable to judge")
        seen = st["slurm"]["checked_at"]
        agent.wait(lambda s: s["slurm"]["checked_at"] > seen + 10, "more looks")
        assert cluster.node_line() == (
            "drained", "watchdog: ecc GPU 1: uncorrectable ECC (an earlier run)")
        assert not actions(agent.status())
    finally:
        agent.stop()


def test_the_prolog_never_fails_a_job(tmp_path):
    """The shipped Prolog and Epilog exit 0 even where they cannot write (a failing
    Prolog drains the node)."""
    script = tmp_path / "prolog.sh"
    script.write_text(Path(__file__).resolve().parent.parent.joinpath(
        "config", "slurm", "prolog.sh").read_text().replace(
        "JOB_FILE=/run/nvml-watchdog/slurm-job", "JOB_FILE=/proc/no/such/dir/job"))
    script.chmod(0o755)
    env = {**os.environ, "SLURM_JOB_ID": "42"}
    assert subprocess.run([str(script)], env=env, capture_output=True, check=False
                          ).returncode == 0


def test_a_dry_run_says_what_it_would_do_and_does_nothing(clean, tmp_path):
    cluster = clean
    agent = Agent(cluster, tmp_path, "sim:gpu_lost(gpus=4,for=10)@20",
                  slurm={"dry_run": True, "hold_down": "0s"})
    try:
        st = agent.wait(lambda s: actions(s, "drain"), "a drain it would make")
        assert actions(st, "drain")[0]["dry_run"] is True
        assert "drain" not in cluster.state()
        st = agent.wait(lambda s: actions(s, "resume"), "a resume it would make",
                        timeout=180)
        assert actions(st, "resume")[0]["dry_run"] is True
        assert st["slurm"]["drains"] == 0 and st["slurm"]["resumes"] == 0
        assert "would drain" in Path(agent.log.name).read_text()
    finally:
        agent.stop()
    assert "drain" not in cluster.state()
