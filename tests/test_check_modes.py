"""``watchdog check --mode slurm|npd`` and ``--agent``: one verdict, each scheduler's
reading of exit codes.

Slurm drains a node on any non-zero Prolog/Epilog exit, so ``slurm`` mode exits non-zero
only for what should drain (a lost GPU, uncorrectable ECC, a fatal XID) and 0 for a
warning, a hung collective or a failure to judge. node-problem-detector reads 0 OK,
1 problem, anything else Unknown, and keeps 80 bytes of the output.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from watchdog.cli import main


def run(capsys, *argv: str) -> tuple[int, str]:
    rc = main(["check", *argv])
    out, _err = capsys.readouterr()
    return rc, out


@pytest.mark.parametrize(("scenario", "nagios", "slurm", "npd"), [
    ("sim:healthy", 0, 0, 0),
    ("sim:gpu_lost", 2, 1, 1),                # drain: the GPU is gone
    ("sim:ecc", 2, 1, 1),                     # drain: uncorrectable ECC, remap pending
    ("sim:xid(code=48)", 2, 1, 1),            # drain: double-bit ECC XID
    ("sim:xid(code=13)", 1, 0, 0),            # an application's XID: a warning
    ("sim:hw_slowdown", 2, 0, 1),             # critical, slow not broken: no drain
    ("sim:comm_hang", 1, 0, 0),               # a hang is not this node's fault
])
def test_each_mode_reads_the_same_verdict_its_own_way(capsys, scenario, nagios, slurm, npd):
    codes = {mode: run(capsys, "--source", scenario, "--mode", mode)[0]
             for mode in ("nagios", "slurm", "npd")}
    assert codes == {"nagios": nagios, "slurm": slurm, "npd": npd}


def test_npd_categories_split_conditions_from_events(capsys):
    """A lost GPU sets GpuWatchdogLost only; an application XID sets no condition and is
    an Event; a hardware slowdown sets GpuWatchdogSlowdown."""
    lost = {c: run(capsys, "--source", "sim:gpu_lost", "--mode", "npd", "--category", c)[0]
            for c in ("lost", "ecc", "xid", "driver", "slowdown", "events")}
    assert lost == {"lost": 1, "ecc": 0, "xid": 0, "driver": 0, "slowdown": 0, "events": 0}
    app = {c: run(capsys, "--source", "sim:xid(code=13)", "--mode", "npd", "--category",
                  c)[0] for c in ("xid", "events")}
    assert app == {"xid": 0, "events": 1}
    assert run(capsys, "--source", "sim:hw_slowdown", "--mode", "npd", "--category",
               "slowdown")[0] == 1


@pytest.mark.parametrize("argv", [["--source", "sim:gpu_lost"], ["--source", "sim:xid(code=13)"],
                                  ["--source", "/no/such/log.csv"], ["--bogus"]])
def test_npd_output_is_one_short_ascii_line(capsys, argv):
    try:
        main(["check", *argv, "--mode", "npd", "--category", "events"])
    except SystemExit:  # a usage error
        pass
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1
    text = out.rstrip("\n")
    assert 0 < len(text) <= 80 and text.isascii() and text.isprintable(), text


def test_a_failure_to_judge_drains_nothing_and_is_unknown_to_npd(capsys):
    """A log that is not there, a bad option: slurm 0 (nothing changes), npd 2."""
    assert run(capsys, "--source", "/no/such/log.csv", "--mode", "slurm")[0] == 0
    assert run(capsys, "--source", "/no/such/log.csv", "--mode", "npd")[0] == 2
    assert run(capsys, "--source", "/no/such/log.csv")[0] == 3
    for mode, code in (("slurm", 0), ("npd", 2), ("nagios", 3)):
        with pytest.raises(SystemExit) as e:
            main(["check", f"--mode={mode}", "--duration", "forever"])
        assert e.value.code == code, mode
        capsys.readouterr()


# --- the running agent's judgment ----------------------------------------------------------

def write_status(state_dir: Path, *, incidents=(), written: float | None = None,
                 source_state: str = "ok", stopped: bool = False) -> None:
    from watchdog.store.agent import AgentStore
    from watchdog.store.store import Store

    now = time.time() if written is None else written
    db = Store(state_dir)
    doc = {"host": "node-7", "interval_s": 1.0, "now": now, "started_at": now - 60,
           "source_state": source_state, "source_error": None if source_state == "ok"
           else "NVML library not found", "active_incidents": list(incidents)}
    if stopped:
        doc["stopped_at"] = now
    AgentStore(db, "nvml").write_status(doc, now)
    db.close()


def incident(kind: str, severity: str, gpus=("3",)) -> dict:
    return {"kind": kind, "severity": severity, "gpus": list(gpus), "rule": kind,
            "started_at": 0, "fired_at": 0, "summary": f"GPU {','.join(gpus)} {kind}"}


@pytest.mark.parametrize(("incidents", "nagios", "slurm", "npd", "events"), [
    ([], 0, 0, 0, 0),
    ([incident("ecc", "critical")], 2, 1, 1, 0),
    ([incident("comm_hang", "critical", ("0", "1"))], 2, 0, 0, 1),
    ([incident("thermal_throttle", "warning")], 1, 0, 0, 1),
    ([incident("nvml_error", "critical")], 2, 0, 1, 0),
])
def test_the_agent_probe_reads_the_agents_incidents(tmp_path, capsys, incidents, nagios,
                                                    slurm, npd, events):
    write_status(tmp_path, incidents=incidents)
    base = ["--agent", "--state-dir", str(tmp_path)]
    got = (run(capsys, *base)[0], run(capsys, *base, "--mode", "slurm")[0],
           run(capsys, *base, "--mode", "npd")[0],
           run(capsys, *base, "--mode", "npd", "--category", "events")[0])
    assert got == (nagios, slurm, npd, events)


@pytest.mark.parametrize("state", ["none", "stale", "stopped", "gpus unreadable"])
def test_an_agent_that_cannot_judge_changes_nothing(tmp_path, capsys, state):
    """No status, a status 10 minutes old, a stopped agent, an agent without NVML: the
    probe cannot judge (UNKNOWN, npd 2) and a Slurm prolog drains nothing, even with a
    critical incident in the last status."""
    crit = [incident("gpu_lost", "critical")]
    if state == "stale":
        write_status(tmp_path, incidents=crit, written=time.time() - 600)
    elif state == "stopped":
        write_status(tmp_path, incidents=crit, stopped=True)
    elif state == "gpus unreadable":
        write_status(tmp_path, incidents=crit, source_state="unavailable")
    base = ["--agent", "--state-dir", str(tmp_path)]
    assert run(capsys, *base)[0] == 3
    rc, out = run(capsys, *base, "--mode", "slurm")
    assert rc == 0 and "cannot judge" in out
    rc, out = run(capsys, *base, "--mode", "npd", "--category", "lost")
    assert rc == 2 and len(out.rstrip("\n")) <= 80


@pytest.mark.parametrize("where", ["--state-dir", "--config"])
def test_the_agent_probe_loads_no_nvml_and_no_detector(tmp_path, where):
    """The probe of the agent's judgment is a database read: nvidia-ml-py, numpy, the rule
    engine and the sources' readers stay unloaded, with the state directory given or read
    from the service's config (which names sinks, a job and Slurm: their code stays
    unloaded too)."""
    write_status(tmp_path, incidents=[incident("ecc", "critical")])
    arg = str(tmp_path)
    if where == "--config":
        cfg = tmp_path / "watchdog.yaml"
        cfg.write_text(f"state_dir: {tmp_path}\njob: {{id: train-7}}\n"
                       "slurm: {drain: [gpu_lost, ecc]}\n"
                       "notify: {sinks: [{name: console, type: log}]}\n")
        arg = str(cfg)
    code = ("import json, sys, io, contextlib\n"
            "from watchdog.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = main(sys.argv[1:])\n"
            "print(json.dumps({'rc': rc, 'modules': sorted(sys.modules)}))\n")
    proc = subprocess.run([sys.executable, "-c", code, "check", "--agent", where, arg,
                           "--mode", "npd"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.stdout, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["rc"] == 1, proc.stderr
    mods = set(doc["modules"])
    assert not {m for m in mods if m.split(".")[0] in ("pynvml", "numpy")}
    assert not {m for m in mods if m.startswith((
        "watchdog.detect", "watchdog.anomaly", "watchdog.sources.nvml",
        "watchdog.sources.replay", "watchdog.sources.wandb"))}
    if where == "--state-dir":  # a config's sections are checked by their own parsers
        assert "yaml" not in mods
        assert not {m for m in mods if m.startswith(("watchdog.sources.", "watchdog.pipeline",
                                                     "watchdog.notify"))}
