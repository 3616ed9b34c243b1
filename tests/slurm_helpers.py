"""A real one-node Slurm cluster on loopback for the tests: Debian's munge, slurmctld and
slurmd (22.05), started as root without systemd, each with its own key, socket, ports,
state and log files in a scratch folder; stopped (SIGTERM, then SIGKILL) at the end.

``proctrack/linuxproc`` and ``task/none`` (no cgroups), no accounting, one node named
``hostname -s`` (slurmd registers under the machine's short name), non-default ports taken
free at start. ``env`` (``SLURM_CONF``) is what every Slurm command of the test, and the
agent, run with. ``.ci/run`` installs the packages; where the test is not root or a
binary is missing, the tests skip and say which.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "srun", "scontrol", "sinfo")
PROLOG = Path(__file__).resolve().parent.parent / "config" / "slurm" / "prolog.sh"


def missing() -> str | None:
    """Why a real Slurm cannot be started here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (slurmd runs jobs as their users; munged and slurmd as root)"
    absent = [b for b in BINARIES if shutil.which(b, path=os.environ.get("PATH", "") +
                                                  ":/usr/sbin:/sbin") is None]
    if absent:
        return f"not installed: {', '.join(absent)} (apt-get install slurmctld slurmd munge)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _which(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    assert found is not None, name
    return found


class Cluster:
    """munged + slurmctld + slurmd in ``root``; :meth:`start`, :meth:`stop`, commands."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.job_file = root / "run" / "slurm-job"
        self.procs: list[subprocess.Popen] = []
        self._files: list = []

    def _write(self) -> None:
        r = self.root
        for d in ("munge", "state", "spool", "log", "run"):
            (r / d).mkdir(mode=0o700 if d == "munge" else 0o755, exist_ok=True)
        (r / "munge").chmod(0o755)  # the socket must be reachable by every job's user
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        prolog = r / "nvml-watchdog-prolog.sh"
        prolog.write_text(PROLOG.read_text().replace(
            "JOB_FILE=/run/nvml-watchdog/slurm-job", f"JOB_FILE={self.job_file}"))
        prolog.chmod(0o755)
        epilog = r / "nvml-watchdog-epilog.sh"
        epilog.symlink_to(prolog.name)
        ncpu = os.cpu_count() or 1
        self.conf.write_text(f"""\
ClusterName=wdtest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge/sock
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
Prolog={prolog}
Epilog={epilog}
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={ncpu} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def start(self, timeout: float = 60.0) -> None:
        self._write()
        r = self.root
        self.procs.append(subprocess.Popen(
            [_which("munged"), "-F", "-f", f"--key-file={r}/munge/munge.key",
             f"--socket={r}/munge/sock", f"--pid-file={r}/munge/pid",
             f"--log-file={r}/log/munged.log", f"--seed-file={r}/munge/seed"],
            stdout=subprocess.DEVNULL, stderr=self._log("munged.out")))
        self._wait(lambda: (r / "munge" / "sock").exists(), timeout, "munged")
        for daemon, args in (("slurmctld", ["-D", "-i"]), ("slurmd", ["-D"])):
            self.procs.append(subprocess.Popen(
                [_which(daemon), *args], env=self.env, stdout=subprocess.DEVNULL,
                stderr=self._log(f"{daemon}.out")))
        self._wait(lambda: self.state() in ("idle", "mixed", "allocated"), timeout,
                   "slurmd registered")

    def _log(self, name: str):
        f = open(self.root / "log" / name, "w")  # noqa: SIM115 - closed by stop()
        self._files.append(f)
        return f

    def _wait(self, ok, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited {p.returncode}: {self.logs()}")
            time.sleep(0.2)
        raise RuntimeError(f"{what}: not within {timeout:.0f} s: {self.logs()}")

    def logs(self) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")):
            out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-1500:])
        return "\n".join(out)

    def run(self, *argv: str, timeout: float = 60.0, check: bool = True
            ) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=check)

    def node_line(self) -> tuple[str, str]:
        """``(state, reason)`` as ``sinfo`` shows them (reason ``none`` when none)."""
        out = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T|%E").stdout
        state, _, reason = out.strip().partition("|")
        return state.rstrip("*"), reason

    def state(self) -> str:
        try:
            return self.node_line()[0]
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return ""

    def drain(self, reason: str) -> None:
        self.run("scontrol", "update", f"NodeName={self.node}", "State=DRAIN",
                 f"Reason={reason}")

    def resume(self) -> None:
        self.run("scontrol", "update", f"NodeName={self.node}", "State=RESUME")

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        for f in self._files:
            f.close()
