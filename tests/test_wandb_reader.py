"""The W&B run-file reader on small files the tests write (tests/wandb_helpers.py):
framing, the protobuf fields, key mapping, bounds on hostile input, console lines."""

from __future__ import annotations

import math
import os
import struct

import numpy as np
import pytest
from wandb_helpers import (
    BLOCK,
    T0,
    exit_record,
    field,
    frame,
    history,
    node,
    output,
    stats,
    write_run,
)

from watchdog.errors import InputError
from watchdog.sources.replay import open_log
from watchdog.sources.wandb import console, convert, framing, proto, read_run


def _file(tmp_path, payloads, **kw):
    return str(write_run(tmp_path, records=payloads, **kw))


def test_framing_reads_full_and_pieced_payloads_across_blocks(tmp_path):
    big = history(3 * BLOCK)  # FIRST, MIDDLE..., LAST
    recs = [stats(T0, {"gpu.0.gpu": 5.0}), big, *[stats(T0 + 10 * k, {"gpu.0.gpu": 7.0})
                                                for k in range(1, 2000)]]
    data = frame(recs)
    got = list(framing.Frames("x", data).payloads())
    assert got == recs  # every payload, the pieced one joined, block trailers skipped
    assert len(data) > 4 * BLOCK


def test_a_damaged_block_is_skipped_with_one_line_and_the_rest_read(tmp_path):
    recs = [stats(T0 + 10 * k, {"gpu.0.gpu": 50.0, "gpu.0.temp": 60.0})
            for k in range(3000)]
    data = bytearray(frame(recs))
    data[BLOCK + 100] ^= 0xFF  # a flipped byte in the second block: its CRC fails
    f = _file(tmp_path, None, data=bytes(data))
    rec = read_run(f)
    lines = [w for w in rec.warnings if "damaged block" in w]
    assert len(lines) == 1 and "1 damaged block(s)" in lines[0]
    per_block = BLOCK // len(recs[0])
    assert 3000 - 2 * per_block < len(rec.frame) < 3000  # one block's records lost


def test_a_file_cut_mid_record_keeps_what_came_before(tmp_path):
    recs = [stats(T0 + 10 * k, {"gpu.0.gpu": 50.0}) for k in range(500)]
    data = frame(recs)
    f = _file(tmp_path, None, data=data[:-20])  # a crashed run: the last record cut
    rec = read_run(f)
    assert len(rec.frame) == 499
    assert any("ends inside a record" in w for w in rec.warnings)
    in_header = data[:len(data) - len(recs[-1]) - 3]  # cut 4 bytes into its header
    rec = read_run(_file(tmp_path / "h", None, data=in_header))
    assert len(rec.frame) == 499
    assert any("ends inside a record" in w for w in rec.warnings)


@pytest.mark.parametrize(("data", "says"), [
    (b"", "not a W&B run file"),
    (b":W&B", "not a W&B run file"),
    (b"PK\x03\x04" + b"\x00" * 100, "not a W&B run file"),
    (b":W&B\x00\x00\x00" + b"\x01" * 100, "header magic 0x0000"),
    (b":W&B\xe1\xbe\x07", "version 7"),
    (b":W&B\xe1\xbe\x00" + bytes(range(256)) * 400, "no readable records"),
    (frame([history(100)]), "no GPU system metrics"),
])
def test_files_that_leave_nothing_to_replay_are_one_line_errors(tmp_path, data, says):
    f = tmp_path / "run-x.wandb"
    f.write_bytes(data)
    with pytest.raises(InputError, match=says) as e:
        open_log(f)
    assert "\n" not in str(e.value) and str(f) in str(e.value)


def test_a_record_length_past_its_block_and_an_unknown_type_are_damage(tmp_path):
    good = [stats(T0 + 10 * k, {"gpu.0.gpu": 1.0}) for k in range(2000)]
    data = bytearray(frame(good))
    struct.pack_into("<IHB", data, 7, 0, 40000, 1)  # length > block: first block lost
    rec = read_run(_file(tmp_path, None, data=bytes(data)))
    assert any("damaged" in w for w in rec.warnings) and 0 < len(rec.frame) < 2000
    data = bytearray(frame(good))
    data[7 + 6] = 9  # type 9
    rec2 = read_run(_file(tmp_path / "b", None, data=bytes(data)))
    assert any("damaged" in w for w in rec2.warnings)


def test_a_payload_over_the_bound_is_dropped_without_being_held(tmp_path, monkeypatch):
    monkeypatch.setattr(framing, "MAX_PAYLOAD", 50_000)
    recs = [stats(T0, {"gpu.0.gpu": 1.0}), history(200_000), stats(T0 + 10, {"gpu.0.gpu": 2.0})]
    fr = framing.Frames("x", frame(recs))
    assert list(fr.payloads()) == [recs[0], recs[2]]
    assert fr.too_big == 1 and "over 0 MiB skipped" in fr.warnings[0]


def test_records_that_do_not_decode_are_counted(tmp_path):
    bad_varint = field(7, b"\xff" * 11)  # a varint of 11 bytes inside the stats record
    past_end = field(7, b"\x1a\x7f")  # item of 127 bytes in a 2-byte message
    recs = [stats(T0, {"gpu.0.gpu": 1.0}), bad_varint, past_end, b"\x0b\x00"]  # group
    rec = read_run(_file(tmp_path, recs))
    assert len(rec.frame) == 1
    assert any("3 record(s) that do not decode" in w for w in rec.warnings)


def test_gpu_index_and_item_count_bounds(tmp_path, monkeypatch):
    rec = read_run(_file(tmp_path, [stats(T0, {"gpu.0.gpu": 1.0, "gpu.1024.gpu": 5.0,
                                               "gpu.99999999.temp": 3.0,
                                               "gpu.1023.gpu": 2.0})]))
    assert sorted(rec.frame["index"].tolist()) == [0, 1023]
    assert any("2 value(s) for a GPU index over 1023" in w for w in rec.warnings)
    monkeypatch.setattr(proto, "MAX_ITEMS", 10)
    many = {f"gpu.{g}.gpu": 1.0 for g in range(11)}
    rec = read_run(_file(tmp_path / "b", [stats(T0, many), stats(T0 + 10, {"gpu.0.gpu": 1.0})]))
    assert len(rec.frame) == 1 and any("do not decode" in w for w in rec.warnings)


def test_old_keys_derive_the_limit_and_memory_and_leave_the_rest_nan(tmp_path):
    """An older W&B run: no clocks, no enforced limit; powerPercent gives the limit,
    allocated bytes and percent give used and total; what is absent is NaN, not 0."""
    items = {"gpu.0.gpu": 90.0, "gpu.0.memory": 30.0, "gpu.0.temp": 65.0,
             "gpu.0.powerWatts": 200.0, "gpu.0.powerPercent": 80.0,
             "gpu.0.memoryAllocated": 50.0, "gpu.0.memoryAllocatedBytes": 20 * 2**30,
             "gpu.process.0.gpu": 11.0, "gpu.0.encoderUtilization": 3.0}
    f = _file(tmp_path, [stats(T0, items), stats(T0 + 30, items)], new_meta=False)
    rec = read_run(f)
    row = rec.frame.iloc[0]
    assert row["utilization.gpu"] == 90.0 and row["utilization.memory"] == 30.0
    assert row["enforced.power.limit"] == 250.0  # 200 W at 80 %
    assert row["memory.used"] == 20 * 1024 and row["memory.total"] == 40 * 1024
    assert "clocks.sm" not in rec.frame.columns
    assert rec.inventory[0].name == "NVIDIA A100-SXM4-80GB"
    assert set(rec.frame["index"]) == {0}  # gpu.process.0 is not a GPU of its own
    # a zero percent gives no limit (NaN), never 0 or infinity
    z = dict(items, **{"gpu.0.powerWatts": 0.0, "gpu.0.powerPercent": 0.0})
    rec = read_run(_file(tmp_path / "z", [stats(T0, z)]))
    assert math.isnan(rec.frame["enforced.power.limit"].iloc[0])


def test_new_keys_with_labels_and_split_records_make_one_tick(tmp_path):
    """Newer W&B writes each device group as its own record, microseconds apart, and may
    append /l:<label> to a key: one reading of the node, keys without the label."""
    recs = []
    for k in range(3):
        t = T0 + 15 * k
        recs += [stats(t, {"network.sent": 5.0}),
                 stats(t + 0.0002, {"gpu.0.gpu/l:NVIDIA H100": 99.0, "gpu.1.gpu": 98.0}),
                 stats(t + 0.0004, {"gpu.0.smClock/l:NVIDIA H100": 1980.0,
                                    "gpu.1.smClock": 1975.0})]
    rec = read_run(_file(tmp_path, recs))
    assert len(rec.frame) == 6
    assert rec.frame["ts"].tolist() == [T0 + 0.0, T0, T0 + 15, T0 + 15, T0 + 30, T0 + 30]
    assert rec.frame["clocks.sm"].tolist() == [1980.0, 1975.0] * 3
    assert convert.parse_key("system.gpu.3.temp/l:x") == (3, "temp")
    assert convert.parse_key("gpu.process.0.gpu") is None


def test_console_lines_are_cleaned_bounded_and_chosen_near_an_incident():
    assert console.clean("50%|###  \r\x1b[31mRuntimeError: boom\x1b[0m\x07") == \
        "RuntimeError: boom"
    assert len(console.clean("Error " + "x" * 5000)) == console.MAX_CHARS
    k = console.Keeper()
    for r in range(8):  # the same traceback from every rank: once
        k.add(T0 + 1, "stderr", f"[rank{r}]: torch.OutOfMemoryError: CUDA out of memory")
    k.add(T0 + 2, "stdout", "step 5 loss 0.1")  # not notable
    k.add(T0 + 3, "stdout", "Saving checkpoint to /ckpt/step_5")
    k.add(T0 + 3600, "stdout", "Saving checkpoint to /ckpt/step_6")
    assert [ln.what for ln in k.lines] == ["error", "checkpoint", "checkpoint"]
    assert k.seen == 11
    near = console.nearby(k.lines, T0 + 60, T0 + 120)
    assert [ln.text for ln in near] == ["[rank0]: torch.OutOfMemoryError: CUDA out of "
                                        "memory", "Saving checkpoint to /ckpt/step_5"]
    many = [console.ConsoleLine(T0 + s, "stdout", f"saved {s}", "checkpoint")
            for s in range(100)] + [console.ConsoleLine(T0 + 90, "stderr", "Error", "error")]
    got = console.nearby(many, T0, T0)
    assert len(got) == console.PER_INCIDENT and "Error" in [g.text for g in got]
    assert [g.ts for g in got] == sorted(g.ts for g in got)


def test_the_run_file_carries_the_exit_code_and_notable_console(tmp_path):
    rec = read_run(str(write_run(tmp_path)))
    assert rec.exit_code == 1 and rec.console[-1].stream == "exit"
    assert rec.console[-1].text == "the job exited with code 1"
    texts = [ln.text for ln in rec.console]
    assert "Saving checkpoint to ckpt/step_300" in texts  # colour codes gone
    assert not any("loss" in t for t in texts)  # progress output is not kept
    neg = read_run(_file(tmp_path / "n", [stats(T0, {"gpu.0.gpu": 1.0}), exit_record(-9)]))
    assert neg.exit_code == -9


def test_a_wide_table_gives_the_frame_of_its_run_file(tmp_path):
    """The API export's shape (system.gpu.<i>.<key>, _timestamp, _runtime, an index
    column) and the derived shape (timestamp_unix) read as the run file does."""
    recs = node(gpus=2, minutes=5)
    f = write_run(tmp_path, records=recs)
    want = read_run(str(f)).frame
    rows = []
    for p in recs:
        got = proto.record(p)
        if got and got[0] == proto.STATS:
            ts, items = proto.stats(got[1])
            rows.append((ts, {k.decode(): float(v) for k, v in items
                              if k.startswith(b"gpu.")}))
    keys = sorted({k for _, r in rows for k in r})
    api = tmp_path / "api" / "system.csv"
    api.parent.mkdir()
    lines = [",_runtime,_timestamp," + ",".join(f"system.{k}" for k in keys)]
    lines += [f"{n},{ts - T0},{ts!r}," + ",".join(repr(r[k]) if k in r else "" for k in keys)
              for n, (ts, r) in enumerate(rows)]
    api.write_text("\n".join(lines) + "\n")
    (api.parent / "wandb-metadata.json").symlink_to(f.parent / "files" / "wandb-metadata.json")
    got = open_log(api).frame
    assert got.drop(columns="uuid").equals(want.drop(columns="uuid"))
    assert open_log(api).inventory[0].name == "NVIDIA A100-SXM4-80GB"
    derived = tmp_path / "run-abc123.system-metrics.csv"
    derived.write_text("timestamp_unix,timestamp_utc," + ",".join(keys) + "\n" + "\n".join(
        f"{ts:.3f},x," + ",".join(repr(r[k]) if k in r else "" for k in keys)
        for ts, r in rows) + "\n")
    got = open_log(derived)
    assert got.host == "run-abc123" and got.frame.equals(
        want.assign(uuid=want["uuid"]))
    assert np.isnan(got.frame["clocks.gr"]).all() if "clocks.gr" in got.frame else True


def test_discovery_of_runs_in_folders(tmp_path):
    from watchdog.sources.wandb import runs_in

    a = write_run(tmp_path / "wandb", "aaa111")
    b = write_run(tmp_path / "wandb", "bbb222")
    (tmp_path / "wandb" / "latest-run").symlink_to(b.parent)  # W&B's own link
    assert runs_in(str(tmp_path)) == [str(a), str(b)]
    (tmp_path / "wandb" / "copy.wandb").symlink_to(a)  # the same file by another name
    got = runs_in(str(tmp_path))
    assert len(got) == 2 and {os.path.realpath(p) for p in got} == {str(a), str(b)}
    assert runs_in(str(b.parent)) == [str(b)]
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no W&B run file"):
        runs_in(str(tmp_path / "empty"))
    with pytest.raises(InputError, match="a folder of 2 W&B runs; name one run"):
        open_log(tmp_path / "wandb")
    assert open_log(b.parent).host == "run-bbb222"


def test_metadata_private_fields_never_reach_the_recording(tmp_path):
    rec = read_run(str(write_run(tmp_path)))
    text = repr(rec.inventory) + repr(rec.warnings) + rec.host + repr(rec.frame["uuid"].unique())
    assert "secret" not in text and "someone" not in text
    bad = write_run(tmp_path / "bad")
    (bad.parent / "files" / "wandb-metadata.json").write_text('{"host": "secret-x", ')
    rec = read_run(str(bad))
    assert rec.inventory[0].name is None
    assert any("metadata not read" in w for w in rec.warnings)
    assert "secret" not in repr(rec.warnings)


def test_output_records_of_both_kinds_are_read(tmp_path):
    recs = [stats(T0, {"gpu.0.gpu": 1.0}),
            output(T0 + 1, "RuntimeError: a", raw=False),
            output(T0 + 2, "ValueError: b\nSaving checkpoint c\n", raw=True)]
    rec = read_run(_file(tmp_path, recs))
    assert [ln.text for ln in rec.console] == ["RuntimeError: a", "ValueError: b",
                                               "Saving checkpoint c"]
    assert rec.exit_code is None
