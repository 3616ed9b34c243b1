"""`watchdog replay`: JSON contract, table, blocks == ticks, logs and sim, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from watchdog import cli
from watchdog.commands.replay import plot_paths
from watchdog.detect import Detector, load_rules
from watchdog.pipeline.replay import detect
from watchdog.sources.sim.frames import simulate

T0 = 1_763_712_000.0  # 2025-11-21T08:00:00Z


def smi_log(path: Path, *, ticks: int = 420, hang_at: int | None = 60, gpus: int = 2) -> Path:
    """A small `nvidia-smi --format=csv,nounits` log: busy at 650 W, then a hang (100 W)."""
    lines = ["timestamp, index, uuid, utilization.gpu [%], power.draw [W], power.limit [W], "
             "clocks.sm [MHz], clocks_throttle_reasons.active"]
    for k in range(ticks):
        hung = hang_at is not None and k >= hang_at
        stamp = f"2025/11/21 08:{k // 60:02d}:{k % 60:02d}.000"
        for g in range(gpus):
            power = 100.0 + g if hung else 650.0 + g
            lines.append(f"{stamp}, {g}, GPU-{g:04d}, 100, {power:.2f}, 700.00, 1980, "
                         f"0x{0 if hung else 4:016x}")
    path.write_text("\n".join(lines) + "\n")
    return path


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert cli.main(["replay", *argv, "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object, one line
    return json.loads(out)


def test_json_document_has_the_contract_shape(tmp_path, capsys):
    doc = run_json([str(smi_log(tmp_path / "node7.csv"))], capsys)
    assert set(doc) == {"incidents", "sources", "rules", "coverage"}
    assert doc["rules"] == len(load_rules())
    # what the log let the rules judge: this log has no clocks, reasons or limit columns
    assert all(set(c) >= {"path", "rule", "judged", "note"} for c in doc["coverage"])
    assert {c["path"] for c in doc["coverage"]} == {str(tmp_path / "node7.csv")}
    (src,) = doc["sources"]
    assert src == {"path": str(tmp_path / "node7.csv"), "host": "node7", "gpus": 2,
                   "samples": 840, "start": "2025-11-21T08:00:00.000+00:00",
                   "end": "2025-11-21T08:06:59.000+00:00"}
    (inc,) = doc["incidents"]
    assert {"kind", "severity", "host", "gpus", "uuids", "started_at", "fired_at",
            "resolved_at", "rule", "summary", "evidence"} <= set(inc)
    assert (inc["kind"], inc["host"], inc["gpus"]) == ("comm_hang", "node7", ["0", "1"])
    assert inc["uuids"] == ["GPU-0000", "GPU-0001"]
    assert inc["resolved_at"] is None
    assert inc["started_at"].endswith("+00:00") and inc["fired_at"].startswith("2025-11-21T08:0")


def test_healthy_log_gives_no_incident_and_exit_0_even_with_fail_on(tmp_path, capsys):
    log = str(smi_log(tmp_path / "ok.csv", hang_at=None))
    assert cli.main(["replay", log, "--fail-on", "warning"]) == 0
    assert "no incidents" in capsys.readouterr().out


def test_fail_on_exits_1_when_an_incident_is_severe_enough(tmp_path, capsys):
    log = str(smi_log(tmp_path / "bad.csv"))
    assert cli.main(["replay", log]) == 0  # incidents alone are not a failure
    assert cli.main(["replay", log, "--fail-on", "critical"]) == 1
    capsys.readouterr()


def test_table_lists_the_incident_with_utc_times(tmp_path, capsys):
    assert cli.main(["replay", str(smi_log(tmp_path / "n1.csv"))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{tmp_path / 'n1.csv'}: host n1, 2 GPUs, 840 samples")
    assert out[1].split()[:5] == ["KIND", "SEVERITY", "GPUS", "START", "(UTC)"]
    assert out[2].split()[:3] == ["comm_hang", "critical", "0-1"]
    assert "2025-11-21 08:01:" in out[2] and "active at end" in out[2]


def test_several_paths_are_replayed_separately_and_concatenated(tmp_path, capsys):
    a = smi_log(tmp_path / "nodea.csv")
    b = smi_log(tmp_path / "nodeb.csv", hang_at=120)
    doc = run_json([str(a), str(b)], capsys)
    assert [s["host"] for s in doc["sources"]] == ["nodea", "nodeb"]
    assert [i["host"] for i in doc["incidents"]] == ["nodea", "nodeb"]
    starts = [i["started_at"] for i in doc["incidents"]]
    assert starts[0] < starts[1]  # nodeb hung a minute later


def test_block_replay_equals_tick_by_tick(tmp_path):
    """Blocks of any size (even splitting ticks) give the incidents of live evaluation."""
    rec, _ = simulate("sim:comm_hang@20,xid(code=48)@100", duration=250, interval=5.0,
                      gpus=3, seed=3)
    rules = load_rules()
    ref = [i.to_json() for i in detect(rec, rules, block_rows=50_000)]
    assert {i["kind"] for i in ref} == {"comm_hang", "xid"}
    for rows in (5, 7, 100):  # 5 and 7 rows end mid-tick: blocks are cut at tick ends
        assert [i.to_json() for i in detect(rec, rules, block_rows=rows)] == ref
    live = Detector(rules, host=rec.host, devices=rec.devices())
    for ts, samples in rec.ticks():
        live.feed_tick(ts, samples)
    assert [i.to_json() for i in live.finish()] == ref


def test_xid_events_reach_the_detector_in_the_right_block():
    rec, src = simulate("sim:xid(code=79)@30", duration=90, interval=5.0, gpus=2)
    (truth,) = src.ground_truth()
    for rows in (2, 50_000):  # one tick per block, or everything at once
        (inc,) = detect(rec, load_rules(), block_rows=rows)
        assert (inc.kind, inc.gpus, inc.fired_at) == ("xid", ["1"], truth.onset)


def test_sim_path_replays_a_simulated_node(capsys):
    doc = run_json(["sim:stall@35m", "--duration", "45m", "--gpus", "4", "--interval", "5s"],
                   capsys)
    assert doc["sources"][0]["samples"] == 4 * 540
    (inc,) = doc["incidents"]
    assert (inc["kind"], inc["gpus"]) == ("stall", ["0", "1", "2", "3"])


def test_plot_files_for_one_and_several_inputs(tmp_path, capsys):
    a, b = smi_log(tmp_path / "a.csv"), smi_log(tmp_path / "b.csv")
    assert cli.main(["replay", str(a), str(b), "--json", "--plot",
                     str(tmp_path / "t.png")]) == 0
    assert json.loads(capsys.readouterr().out)["incidents"]
    for p in (tmp_path / "t.png", tmp_path / "t-2.png"):
        assert p.read_bytes()[:4] == b"\x89PNG"
    assert plot_paths("x/t.png", 3) == [Path("x/t.png"), Path("x/t-2.png"), Path("x/t-3.png")]


@pytest.mark.parametrize("argv, message", [
    (["nope.csv"], "nope.csv: no such file"),
    (["--rules", "missing-rules.yaml", "sim"], "missing-rules.yaml"),
    (["sim:no_such_scenario"], "unknown scenario"),
    (["sim", "--duration", "soon"], "--duration"),
    (["--block-rows", "0", "sim"], "--block-rows"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["replay", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("watchdog: error: ") and err.count("\n") == 1
    assert message in err


def test_tz_reads_naive_log_times_in_that_zone(tmp_path, capsys):
    """nvidia-smi writes the logging host's local time: --tz says which zone that was."""
    log = str(smi_log(tmp_path / "berlin.csv"))
    utc = run_json([log], capsys)
    berlin = run_json([log, "--tz", "Europe/Berlin"], capsys)  # UTC+1 in November
    assert utc["sources"][0]["start"] == "2025-11-21T08:00:00.000+00:00"
    assert berlin["sources"][0]["start"] == "2025-11-21T07:00:00.000+00:00"
    (a,), (b,) = utc["incidents"], berlin["incidents"]
    assert a["fired_at"].replace("T08:", "T07:") == b["fired_at"]


def test_unknown_tz_is_one_line_and_exit_2(tmp_path, capsys):
    log = str(smi_log(tmp_path / "x.csv"))
    assert cli.main(["replay", log, "--tz", "Mars/Olympus"]) == 2
    err = capsys.readouterr().err
    assert "--tz Mars/Olympus: unknown time zone" in err and "Traceback" not in err
