"""``watchdog replay`` on W&B runs, as a user runs it: a run file, a run folder, a folder
of runs; the job's console next to incidents; the model's decision per GPU."""

from __future__ import annotations

import json
import subprocess
import sys

from wandb_helpers import T0, node, stats, write_run


def wd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def test_a_folder_of_runs_is_one_result_per_run_with_console_and_exit_codes(tmp_path):
    a = write_run(tmp_path / "wandb", "aaa111")
    write_run(tmp_path / "wandb", "bbb222", records=node(gpus=1, hang_at=999.0))
    r = wd("replay", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [s["host"] for s in doc["sources"]] == ["run-aaa111", "run-bbb222"]
    assert [s["exit_code"] for s in doc["sources"]] == [1, 1]
    hang = [i for i in doc["incidents"] if i["kind"] == "comm_hang"]
    assert len(hang) == 1 and hang[0]["host"] == "run-aaa111"
    said = hang[0]["console"]
    assert [c["kind"] for c in said] == ["error", "exit"]
    assert said[0]["stream"] == "stderr" and "Watchdog caught collective" in said[0]["text"]
    assert said[1] == {"at": said[1]["at"], "stream": "exit", "kind": "exit",
                       "text": "the job exited with code 1"}
    assert "secret" not in r.stdout + r.stderr and "someone" not in r.stdout + r.stderr
    table = wd("replay", str(tmp_path))
    assert table.returncode == 0
    assert "exit code 1" in table.stdout
    assert "The job's console near its incidents (UTC):" in table.stdout
    assert table.stdout.rstrip().endswith("2 inputs replayed: 1 incident (1 critical) in 1 "
                                          "of them")
    one = wd("replay", str(a.parent), "--json")  # the run folder
    assert [s["host"] for s in json.loads(one.stdout)["sources"]] == ["run-aaa111"]


def test_an_unreadable_run_in_a_folder_is_skipped_with_one_line_and_exit_2(tmp_path):
    write_run(tmp_path, "good11")
    write_run(tmp_path, "bad222", data=b":W&B\xe1\xbe\x00" + b"\x17" * 5000)
    r = wd("replay", str(tmp_path), "--json")
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert [s["host"] for s in doc["sources"]] == ["run-good11"]
    assert len(doc["skipped"]) == 1 and "no readable records" in doc["skipped"][0]["error"]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("watchdog: error:")]
    assert len(errors) == 1 and errors[0].endswith("(skipped)")
    assert "Traceback" not in r.stderr
    alone = wd("replay", str(next(tmp_path.glob("*bad222/*.wandb"))))
    assert alone.returncode == 2 and alone.stdout == ""
    assert alone.stderr.count("\n") == 1 and "no readable records" in alone.stderr


def test_model_auto_says_per_gpu_whether_it_fitted_or_declined(tmp_path):
    def record(k: int) -> bytes:
        return stats(T0 + 10 * k, {"gpu.0.gpu": 100.0, "gpu.1.gpu": 0.0,
                                   "gpu.0.powerWatts": 300.0 + k % 7, "gpu.0.temp": 60.0,
                                   "gpu.1.powerWatts": 50.0})
    run = write_run(tmp_path, "short1", records=[record(k) for k in range(360)])  # 1 h
    r = wd("replay", str(run), "--model", "auto", "--json")
    assert r.returncode == 0, r.stderr
    said = json.loads(r.stdout)["model"]
    # the idle GPU does not stop the busy one from being fitted and judged
    assert [(d["gpu"], d["decision"]) for d in said] == [("0", "fitted"), ("1", "declined")]
    assert said[0]["reason"] == "fitted on the first 40 % of its busy time"
    assert 23 <= said[0]["busy_min"] <= 25 and said[0]["fit_until"]  # 40 % of its hour
    assert said[1]["reason"].startswith("declined: 0 busy minutes in the log; a fit needs "
                                        "10 in the first 40 % of a GPU's busy time")
    assert said[1]["busy_min"] == 0.0 and said[1]["fit_until"] is None
    assert said[0]["host"] == "run-short1" and said[0]["path"] == str(run)
    lines = [ln for ln in r.stderr.splitlines() if "--model auto: GPU" in ln]
    assert len(lines) == 2 and all(ln.startswith("watchdog: run-short1.wandb: --model auto")
                                   for ln in lines)
    assert "GPU 0: fitted on the first 40 % of its busy time (to " in lines[0]
    short = write_run(tmp_path / "s", "short2", records=[record(k) for k in range(144)])
    r = wd("replay", str(short), "--model", "auto", "--json")  # 24 min: 9.6 to fit on
    said = json.loads(r.stdout)["model"]
    assert [d["decision"] for d in said] == ["declined", "declined"]
    assert said[0]["reason"].startswith("declined: 23 busy minutes in the log")
    plain = wd("replay", str(short), "--json")
    assert "model" not in json.loads(plain.stdout) and "--model" not in plain.stderr


def test_the_timeline_lists_the_console_lines_near_incidents(tmp_path):
    import io
    from contextlib import redirect_stdout

    from watchdog.report.plot import plot_timeline
    from watchdog.sources.replay import open_log

    f = write_run(tmp_path, "abc123")
    rec = open_log(f)
    with redirect_stdout(io.StringIO()):
        info = plot_timeline(rec.frame, [], tmp_path / "t.png",
                             notes=[(ln.ts, ln.text) for ln in rec.console])
    assert len(info.notes) == len(rec.console) == 3
    assert info.notes[0].startswith("1. ") and "Saving checkpoint" in info.notes[0]
    r = wd("replay", str(f), "--plot", str(tmp_path / "p.png"))
    assert r.returncode == 0 and (tmp_path / "p.png").stat().st_size > 10_000


_PROBE = """
import io, json, sys, contextlib
from watchdog.testing import fakenvml
fakenvml.install("healthy")
from watchdog.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["check", "--json", "--duration", "0"])
print(json.dumps(sorted(sys.modules)))
"""


def test_nothing_wandb_or_pyarrow_loads_on_the_probe_path():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    mods = set(json.loads(out))
    assert "watchdog.check" in mods
    bad = {m for m in mods if m.split(".")[0] in ("wandb", "pyarrow", "google")
           or m.startswith("watchdog.sources.wandb")}
    assert not bad, bad
