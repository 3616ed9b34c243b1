"""docs/slurm.md and docs/kubernetes.md, run: every command line of their console blocks
is run here as a real subprocess (the ones that install files relocated into a scratch
folder, on the fake NVML), or named in :data:`ELSEWHERE` with the test that runs it, or in
:data:`NOT_RUN` with why not and what is checked instead. A command added to a page
without a place here fails :func:`test_every_command_has_a_place`."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_install_docs import commands

REPO = Path(__file__).resolve().parent.parent
PAGES = (REPO / "docs" / "slurm.md", REPO / "docs" / "kubernetes.md")
BIN = Path(sys.executable).parent
FAKE = [sys.executable, "-m", "watchdog.testing.fakenvml", "healthy", "--"]

#: command -> (the test file that runs it, a text that file holds where it does)
ELSEWHERE = {
    "sinfo -R": ("tests/test_slurm_e2e.py", '"sinfo", "-R"'),
    "watchdog status --config /etc/nvml-watchdog/watchdog.yaml":
        ("tests/test_install_docs.py", "status --config"),
    "python3 -m pip wheel --no-deps -w dist .": ("docs/install.md",
                                                 "python3 -m pip wheel --no-deps -w dist ."),
}
#: command -> why it is not run (and what is checked instead)
NOT_RUN = {
    "sacctmgr -i add user nvml-watchdog account=root adminlevel=operator":
        "needs slurmdbd (the tests' Slurm runs without accounting; the agent there drains "
        "as root)",
    "docker build -f config/kubernetes/Containerfile -t registry.example/nvml-watchdog:0.2.0 .":
        "no container runtime on the test machines; the Containerfile's steps are "
        "docs/install.md's, run by tests/test_install_docs.py",
    "kubectl apply -f config/kubernetes/nvml-watchdog.yaml":
        "needs a cluster; every object is validated against the Kubernetes schemas "
        "instead (tests/test_kubernetes.py)",
}
RUN_HERE = {
    "install -D -m 0755 config/slurm/prolog.sh /etc/slurm/prolog.d/nvml-watchdog.sh",
    "ln -sf ../prolog.d/nvml-watchdog.sh /etc/slurm/epilog.d/nvml-watchdog-epilog.sh",
    "watchdog check --mode slurm --duration 0",
    "watchdog check --agent --config /etc/nvml-watchdog/watchdog.yaml --mode slurm",
}


def all_commands() -> list[str]:
    return [c for page in PAGES for c in commands(page)]


def test_every_command_has_a_place():
    missing = [c for c in all_commands() if c not in ELSEWHERE and c not in NOT_RUN
               and c not in RUN_HERE]
    assert missing == []
    for cmd, (where, text) in ELSEWHERE.items():
        assert text in (REPO / where).read_text(), (cmd, where)


def test_the_prolog_installs_as_documented(tmp_path):
    root = tmp_path / "root"
    (root / "etc" / "slurm" / "epilog.d").mkdir(parents=True)
    for cmd in all_commands():
        if cmd.startswith(("install ", "ln ")):
            argv = [a.replace("/etc/", f"{root}/etc/") for a in shlex.split(cmd)]
            subprocess.run(argv, cwd=REPO, check=True, timeout=30)
    prolog = root / "etc" / "slurm" / "prolog.d" / "nvml-watchdog.sh"
    epilog = root / "etc" / "slurm" / "epilog.d" / "nvml-watchdog-epilog.sh"
    assert os.access(prolog, os.X_OK)
    assert epilog.resolve() == prolog.resolve()  # one script; its name says epilog
    job_file = tmp_path / "slurm-job"
    for script in (prolog, epilog):  # the installed copy, pointed at a scratch job file
        text = script.read_text().replace("JOB_FILE=/run/nvml-watchdog/slurm-job",
                                          f"JOB_FILE={job_file}")
        script.unlink() if script == epilog else script.write_text(text)
    epilog.symlink_to("../prolog.d/nvml-watchdog.sh")
    env = {**os.environ, "SLURM_JOB_ID": "4242"}
    subprocess.run([str(prolog)], env=env, check=True, timeout=30)
    assert job_file.read_text() == "4242\n"
    subprocess.run([str(epilog)], env=env, check=True, timeout=30)
    assert not job_file.exists()


def test_the_documented_probes_run(tmp_path):
    cfg = tmp_path / "etc" / "nvml-watchdog" / "watchdog.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f"state_dir: {tmp_path / 'state'}\n")
    env = {**os.environ, "NO_COLOR": "1"}
    ran = 0
    for cmd in all_commands():
        if not cmd.startswith("watchdog check"):
            continue
        argv = [a.replace("/etc/", f"{tmp_path}/etc/") for a in shlex.split(cmd)]
        proc = subprocess.run([*FAKE, *argv], capture_output=True, text=True, env=env,
                              timeout=120, check=False)
        # the fake node is healthy; no agent runs on tmp_path's state: cannot judge
        assert proc.returncode == 0, (cmd, proc.stdout, proc.stderr)
        assert proc.stdout.count("\n") == 1
        assert ("cannot judge" if "--agent" in cmd else "OK: nothing to drain") in \
            proc.stdout, proc.stdout
        ran += 1
    assert ran == 2


@pytest.mark.parametrize("cmd", sorted(NOT_RUN))
def test_what_is_not_run_is_on_a_page(cmd):
    assert cmd in all_commands()
