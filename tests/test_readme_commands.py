"""Every `$ watchdog …` line in the README runs, as a real subprocess, and prints what the
README shows.

The README's console blocks are parsed, not copied: a command added to the README without
a way to run it here fails :func:`test_every_readme_command_is_run`. Commands run in a
scratch folder holding the files the README names (``gpu.csv``, ``gpu_metrics.csv``, …,
written here), with ``rules/`` and ``config/`` from the repository, on the fake NVML
(``healthy``) where they read GPUs. Output lines the README shows under a command must
appear in what it prints (a line with ``…`` is compared up to it). Commands that run until
stopped (``run``, an hour-long ``record``) get SIGINT/SIGTERM after their start line, as an
operator's Ctrl-C or systemd would, and must exit 0 and leave their files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FAKE = f"{sys.executable} -m watchdog.testing.fakenvml healthy --"

#: Commands run by another test, named here so that this one can check it exists.
ELSEWHERE = {
    "watchdog rules test --mutate rules/tests/ --min-score 0.90":
        ("tests/test_rules_mutate.py", "--min-score"),
}
#: Commands that run until stopped: the text to wait for before stopping them.
LONG = {
    "watchdog run --config config/watchdog.yaml": "watching",
    "watchdog record --output node.wdrec --duration 1h": None,
}
#: Exit codes other than 0, and why.
EXPECT_RC = {
    # the agent the line before started has been stopped: status says so and exits 1
    "watchdog status --config config/watchdog.yaml": (1, "agent STOPPED"),
}


@dataclass
class Block:
    """One `$ command` line and the output lines the README shows under it."""

    command: str
    shown: list[str]


def readme_commands(path: Path = REPO / "README.md") -> list[Block]:
    """The `$ …` lines of the README's ```console blocks, with their shown output."""
    blocks: list[Block] = []
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```console"
            continue
        if not inside:
            continue
        if line.startswith("$ "):
            cmd = re.sub(r"\s+#\s.*$", "", line[2:]).strip()
            blocks.append(Block(cmd, []))
        elif blocks:
            blocks[-1].shown.append(line)
    return blocks


def smi_log(path: Path, minutes: int = 12, hang_at: int = 6) -> None:
    """A 2-GPU `nvidia-smi --query-gpu` log at 1 s whose job hangs ``hang_at`` minutes in:
    each GPU stamped a few ms apart, as nvidia-smi writes them."""
    rows = ["timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], "
            "memory.total [MiB], power.draw [W], enforced.power.limit [W], "
            "temperature.gpu, clocks.sm [MHz], clocks.max.sm [MHz], "
            "clocks_event_reasons.active"]
    for s in range(minutes * 60):
        hung = s >= hang_at * 60
        for g in range(2):
            ms = 3 + 7 * g
            t = f"2026/03/01 10:{s // 60:02d}:{s % 60:02d}.{ms:03d}"
            power = 120.0 + g if hung else 600.0 + (s % 7) * 10 - g
            rows.append(f"{t}, {g}, GPU-0000000{g}-aaaa-bbbb-cccc-ddddeeeeffff, NVIDIA H100 "
                        f"80GB HBM3, 100 %, 70000 MiB, 81559 MiB, {power:.2f} W, 700.00 W, "
                        f"{60 if not hung else 45}, 1980 MHz, 1980 MHz, 0x0000000000000000")
    path.write_text("\n".join(rows) + "\n")


def custom_log(path: Path) -> None:
    """A foreign logger's CSV with the column names the README's --map example uses."""
    rows = ["timestamp,gpu_index,power_W,utilization_gpu_percent,temperature_C"]
    for s in range(300):
        for g in range(2):
            rows.append(f"2026-03-01T10:{s // 60:02d}:{s % 60:02d}Z,{g},{400 + g},97,{60 + g}")
    path.write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("readme")
    smi_log(d / "gpu.csv")
    shutil.copy(d / "gpu.csv", d / "old-log.csv")
    custom_log(d / "gpu_metrics.csv")
    (d / "rules").symlink_to(REPO / "rules")
    (d / "config").symlink_to(REPO / "config")
    return d


def env_for(workdir: Path) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "HOME": str(workdir), "STATE_DIRECTORY": str(workdir / "state"),
           "COLUMNS": "400", "PYTHONUNBUFFERED": "1"}
    for k in ("JOURNAL_STREAM", "NOTIFY_SOCKET", "WATCHDOG_USEC"):
        env.pop(k, None)
    return env


def run_line(cmd: str, workdir: Path) -> tuple[int, str]:
    """Run one README line through bash on the fake NVML (GPU commands) or as written."""
    gpu = cmd.startswith("watchdog ") and not re.search(r"--source (sim|\S+\.csv)|replay|"
                                                         r"rules|--list-metrics", cmd)
    full = f"{FAKE} {cmd}" if gpu and "|" not in cmd else cmd
    if cmd in LONG:
        return run_until_started(full, LONG[cmd], workdir)
    p = subprocess.run(["bash", "-o", "pipefail", "-c", full], cwd=workdir, env=env_for(workdir),
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def run_until_started(full: str, needle: str | None, workdir: Path) -> tuple[int, str]:
    """Start a command that runs until stopped; stop it (SIGINT) once ``needle`` is in its
    output, or after 4 s; return its exit code and output."""
    out = workdir / "long.out"
    with out.open("w") as fh:
        p = subprocess.Popen(["bash", "-c", f"exec {full}"], cwd=workdir, env=env_for(workdir),
                             stdout=fh, stderr=subprocess.STDOUT)
        end = time.monotonic() + (60 if needle else 4)
        while time.monotonic() < end and p.poll() is None:
            if needle and needle in out.read_text():
                time.sleep(1.5)
                break
            time.sleep(0.2)
        assert p.poll() is None, f"{full} ended by itself:\n{out.read_text()}"
        p.send_signal(signal.SIGINT)
        rc = p.wait(30)
    return rc, out.read_text()


def shown_lines_appear(shown: list[str], printed: str) -> list[str]:
    """The README's shown output lines missing from what the command printed."""
    norm = [" ".join(x.split()) for x in printed.splitlines()]
    missing = []
    for line in shown:
        want = " ".join(line.split())
        if not want or want == "…":
            continue
        head = want.split("…")[0].strip()
        if not any(got.startswith(head) for got in norm):
            missing.append(line)
    return missing


BLOCKS = readme_commands()


def test_every_readme_command_is_run() -> None:
    """A new README command needs a runner here (or a named test that runs it)."""
    cmds = [b.command for b in BLOCKS]
    assert cmds, "no console blocks found in the README"
    for cmd in cmds:
        assert cmd.startswith(("watchdog ", "echo $?")), f"no runner for README line {cmd!r}"
    for cmd, (test_file, marker) in ELSEWHERE.items():
        assert cmd in cmds, f"{cmd!r} no longer in the README: drop it from ELSEWHERE"
        assert marker in (REPO / test_file).read_text()


#: slow: a command that runs until stopped with no start line to wait for (its full 4 s),
#: and these, which take more than a few seconds and which no later command depends on
SLOW = {"watchdog replay sim:hbm_sag@80m --duration 100m --gpus 4 --model auto --json"}
CASES = [pytest.param(i, marks=pytest.mark.slow)
         if LONG.get(b.command, "") is None or b.command in SLOW else i
         for i, b in enumerate(BLOCKS)]


@pytest.mark.parametrize("index", CASES, ids=[b.command[:60] for b in BLOCKS])
def test_readme_command(index: int, workdir: Path) -> None:
    block = BLOCKS[index]
    if block.command in ELSEWHERE or block.command == "echo $?":
        pytest.skip(f"run by {ELSEWHERE.get(block.command, ('the command before it',))[0]}")
    if "| jq" in block.command and shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    rc, printed = run_line(block.command, workdir)
    following = BLOCKS[index + 1] if index + 1 < len(BLOCKS) else None
    if following is not None and following.command == "echo $?":
        assert str(rc) == following.shown[0].strip(), printed
    else:
        want_rc, want_text = EXPECT_RC.get(block.command, (0, ""))
        assert rc == want_rc, f"{block.command} exited {rc}:\n{printed}"
        assert want_text in printed
    assert not shown_lines_appear(block.shown, printed), (
        f"README shows lines {block.command!r} does not print:\n"
        + "\n".join(shown_lines_appear(block.shown, printed)) + f"\n--- printed:\n{printed}")
    check_artifacts(block.command, printed, workdir)


def check_artifacts(cmd: str, printed: str, workdir: Path) -> None:
    """What each command promises beyond its exit code."""
    if "--plot" in cmd:
        png = workdir / cmd.split("--plot")[1].split()[0]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if "| jq" in cmd:  # (skipped above where jq is missing)
        first = json.loads(printed.split("\n}\n")[0] + "\n}")
        assert first["kind"] == "comm_hang" and first["gpus"]
    out = re.search(r"--output (\S+)", cmd)
    if out and cmd.startswith("watchdog train"):
        assert (workdir / out.group(1)).stat().st_size > 0
    elif out:
        rec = workdir / out.group(1)
        p = subprocess.run([str(BIN / "watchdog"), "replay", str(rec), "--json"], cwd=workdir,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "incidents" in json.loads(p.stdout)
    if cmd.startswith("watchdog run"):
        assert "watching" in printed
