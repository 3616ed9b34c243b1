"""``watchdog check --source sim:…``: every injected fault the probe is meant to see gives
its exit code and check; faults only a duration can reveal (stall, straggler) do not fail a
2-second probe. Also: the check path for nvml and sim never imports pandas or sklearn."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from watchdog.cli import main


def check(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(["check", "--json", *argv])
    out, err = capsys.readouterr()
    assert err == ""
    return rc, json.loads(out)


@pytest.mark.parametrize(("spec", "rc", "kind"), [
    ("sim", 0, None),
    ("sim:comm_hang", 1, "comm_hang"),  # the rule's critical, unconfirmed in a burst
    ("sim:thermal_throttle", 1, "thermal_throttle"),  # the rule's warning, as in replay
    ("sim:hw_slowdown", 2, "hw_slowdown"),
    # a leak needs 15 minutes of growth: `watchdog run`; a burst sees memory held
    ("sim:memory_pressure", 0, None),
    ("sim:gpu_lost", 2, "gpu_lost"),
    ("sim:xid", 1, "xid"),
    ("sim:xid(code=79)", 2, "xid"),
    ("sim:ecc", 2, "ecc"),
    ("sim:pcie_degraded", 1, "pcie_degraded"),
    ("sim:stall", 0, None),  # looks like a checkpoint pause in a burst: `watchdog run`
    ("sim:straggler", 0, None),  # 2-minute means against peers: not in a burst
])
def test_injected_faults(capsys, spec, rc, kind):
    got, doc = check(capsys, "--source", spec)
    assert got == doc["exit_code"] and got in (rc if isinstance(rc, tuple) else (rc,))
    assert {p["check"] for p in doc["problems"]} == ({kind} if kind else set())
    assert doc["source"] == spec and doc["gpu_count"] == 8


def test_whole_node_hang_names_every_gpu(capsys):
    _, doc = check(capsys, "--source", "sim:comm_hang")
    assert sorted(p["gpu"] for p in doc["problems"]) == list(range(8))
    assert all(p["severity"] == "WARNING" for p in doc["problems"])


def test_hang_on_a100_without_gpm(capsys):
    rc, doc = check(capsys, "--source", "sim:comm_hang", "--gpu-model", "a100-pcie", "--gpus", "4")
    assert rc == 1 and {p["check"] for p in doc["problems"]} == {"comm_hang"}
    assert doc["gpus"][0]["metrics"].get("gpm.sm_activity") is None


def test_at_chooses_the_judged_moment(capsys):
    """Before the default onset (300 s) the hung node still looks healthy."""
    rc, _ = check(capsys, "--source", "sim:comm_hang", "--at", "100s")
    assert rc == 0
    rc, _ = check(capsys, "--source", "sim:comm_hang@60", "--at", "2m")
    assert rc == 1


def test_bad_sim_spec_is_unknown(capsys):
    rc = main(["check", "--source", "sim:no_such_fault"])
    out, err = capsys.readouterr()
    assert rc == 3 and out.startswith("WATCHDOG UNKNOWN") and "no_such_fault" in err


def _imported(argv: list[str]) -> tuple[set[str], dict]:
    """Top-level packages a fresh interpreter imports to run ``argv`` (-X importtime)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True,
                          text=True, timeout=60, check=False)
    mods = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            mods.update({name.split(".")[0], name})
    assert "watchdog" in mods, proc.stderr[-500:]
    return mods, json.loads(proc.stdout)


@pytest.mark.parametrize("argv", [
    ["-m", "watchdog", "check", "--source", "sim:comm_hang", "--json"],
    ["-m", "watchdog.testing.fakenvml", "healthy", "--", "watchdog", "check", "--json",
     "--duration", "0"],
])
def test_check_does_not_import_pandas_or_sklearn(argv):
    """Nor numpy's masked arrays, which ``np.unique`` loads on first use (numpy 2): 6 ms
    here, about 50 ms on an image that keeps no bytecode (an H100 node's, 2026-11-26),
    on every probe of every node."""
    mods, doc = _imported(argv)
    assert doc["gpu_count"] == 8
    assert not mods & {"pandas", "sklearn", "matplotlib", "scipy", "numpy.ma"}


_MODULES_AFTER = """
import io, json, sys, contextlib
from watchdog.testing import fakenvml
fakenvml.install("healthy")
from watchdog.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def test_a_probe_loads_only_its_own_command_and_no_simulator():
    """``watchdog check`` registers only the check command (importing all nine command
    modules cost 16 ms of every probe) and, probing NVML, loads no simulator; a typo
    still gets the full parser's error naming every command."""
    proc = subprocess.run([sys.executable, "-c", _MODULES_AFTER, "check", "--json",
                           "--duration", "0"], capture_output=True, text=True, timeout=60,
                          check=False)
    doc = json.loads(proc.stdout)
    assert doc["rc"] == 0, proc.stderr
    commands = {m for m in doc["modules"] if m.startswith("watchdog.commands.")}
    assert commands == {"watchdog.commands.check", "watchdog.commands.common"}
    assert not [m for m in doc["modules"] if m.startswith("watchdog.sources.sim")]
    typo = subprocess.run([sys.executable, "-m", "watchdog", "chekc"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert typo.returncode == 2
    assert "invalid choice: 'chekc'" in typo.stderr and "'silence'" in typo.stderr


def test_the_command_line_caps_math_library_threads_before_numpy_loads():
    """On a many-core host OpenBLAS would start a thread per core when numpy loads: the
    command line caps every math-library pool at one thread first (a value the user set
    is kept), so a check on a 64-core node costs what it costs on a 2-core one."""
    probe = ("import json, os, watchdog.cli, numpy, threadpoolctl; "
             "print(json.dumps([os.environ.get('OPENBLAS_NUM_THREADS'), "
             "[p['num_threads'] for p in threadpoolctl.threadpool_info()]]))")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, timeout=60, check=True).stdout
    var, pools = json.loads(out)
    assert var == "1" and pools and all(n == 1 for n in pools), (var, pools)
    env["OPENBLAS_NUM_THREADS"] = "2"  # the user's own setting wins
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, timeout=60, check=True).stdout
    assert json.loads(out)[0] == "2"
