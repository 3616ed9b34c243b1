"""Hostile W&B input through the real ``watchdog replay`` (listed by bench/hostile.py):
run files cut off, damaged, forged or huge, tables with absurd shapes, folders with
loops. Each gives one clear line and, where nothing can be replayed, exit 2; never a
traceback; its memory budget (far below the unit's bound) is measured by bench/hostile.py."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hostile_helpers import Outcome, budget, run
from wandb_helpers import BLOCK, T0, frame, history, node, stats, write_run

# end to end: every case runs the real command as a subprocess (the whole suite and
# bench/hostile.py run them; `pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow


def _clean(o: Outcome) -> None:
    assert not o.timed_out, "killed by the hang guard: " + o.stderr[-500:]
    assert "Traceback" not in o.stderr and "internal error" not in o.stderr, o.stderr[-2000:]
    budget(o)


def refused(o: Outcome, *words: str) -> str:
    """Exit 2 with one error line holding ``words``."""
    _clean(o)
    assert o.rc == 2, (o.rc, o.stderr[-1000:])
    errors = [x for x in o.stderr.splitlines() if x.startswith("watchdog: error:")]
    assert len(errors) == 1, o.stderr[-2000:]
    for w in words:
        assert w in errors[0], errors[0]
    return errors[0]


def warned(o: Outcome, *words: str) -> str:
    """Replayed (exit 0) with one warning line holding ``words``."""
    _clean(o)
    assert o.rc == 0, (o.rc, o.stderr[-1000:])
    lines = [x for x in o.stderr.splitlines()
             if x.startswith("watchdog: warning:") and all(w in x for w in words)]
    assert len(lines) == 1, o.stderr[-2000:]
    return lines[0]


def test_run_file_of_a_crashed_run_cut_mid_block(tmp_path: Path) -> None:
    """wandb: a run file cut off mid-block (the run crashed) is replayed up to the cut,
    with one line saying where it stopped"""
    data = frame(node(gpus=2))
    f = write_run(tmp_path, data=data[: len(data) * 9 // 10 + 5])
    o = run(["replay", str(f), "--json"], timeout=120)
    warned(o, "ends inside a record")
    assert '"comm_hang"' in o.stdout  # the hang began before the cut


def test_run_file_with_a_corrupt_block(tmp_path: Path) -> None:
    """wandb: a block whose checksum fails is skipped with one line; the rest is read"""
    data = bytearray(frame(node(gpus=2)))
    for at in (BLOCK + 500, 3 * BLOCK + 9):
        data[at] ^= 0x5A
    f = write_run(tmp_path, data=bytes(data))
    warned(run(["replay", str(f)], timeout=120), "2 damaged block(s) skipped")


def test_run_file_of_garbage_after_the_header(tmp_path: Path) -> None:
    """wandb: random bytes after a valid header are refused in one line"""
    f = write_run(tmp_path, data=b":W&B\xe1\xbe\x00" + os.urandom(300_000))
    refused(run(["replay", str(f)], timeout=120), str(f), "nothing to replay")


def test_a_file_named_wandb_that_is_not_one(tmp_path: Path) -> None:
    """wandb: a .wandb file that is not a W&B run file (a zip, an empty file) is refused"""
    f = tmp_path / "run-x.wandb"
    f.write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    refused(run(["replay", str(f)]), str(f), "not a W&B run file")
    f.write_bytes(b"")
    refused(run(["replay", str(f)]), str(f), "not a W&B run file")


def test_run_file_with_a_forged_record_length(tmp_path: Path) -> None:
    """wandb: record headers claiming 65535 bytes in every block are damage, not reads
    past the block"""
    data = bytearray(frame([stats(T0 + 10 * k, {"gpu.0.gpu": 50.0}) for k in range(4000)]))
    for b in range(0, len(data) // BLOCK + 1):
        struct.pack_into("<IHB", data, b * BLOCK + (7 if b == 0 else 0), 0, 65535, 2)
    f = write_run(tmp_path, data=bytes(data))
    refused(run(["replay", str(f)], timeout=120), "nothing to replay")


def test_run_file_with_a_record_over_the_payload_bound(tmp_path: Path) -> None:
    """wandb: a 20 MiB record (over the 16 MiB bound) is skipped piece by piece, never
    held; the metrics around it are read"""
    recs = [stats(T0 + 10 * k, {"gpu.0.gpu": 50.0}) for k in range(30)]
    f = write_run(tmp_path, records=[*recs[:15], history(20 << 20), *recs[15:]])
    line = warned(run(["replay", str(f), "--json"], timeout=120), "over 16 MiB skipped")
    assert "1 record(s)" in line


def test_run_file_naming_absurd_gpu_indices(tmp_path: Path) -> None:
    """wandb: GPU indices past 1023 are dropped with one line; the real GPUs are read"""
    items = {"gpu.0.gpu": 5.0, "gpu.4096.gpu": 1.0, "gpu.123456789.temp": 1.0}
    f = write_run(tmp_path, records=[stats(T0 + 10 * k, items) for k in range(20)])
    o = run(["replay", str(f), "--json"], timeout=120)
    warned(o, "GPU index over 1023 dropped")
    assert '"gpus": 1' in o.stdout


def test_wide_table_with_too_many_columns(tmp_path: Path) -> None:
    """wandb: a W&B table with 30,000 columns is refused in one line (a header line over
    the readers' 64 KiB line bound)"""
    t = tmp_path / "system.csv"
    t.write_text("_timestamp," + ",".join(f"system.gpu.{g}.k{k}" for g in range(1000)
                                          for k in range(30)) + "\n1.7e9" + "," * 30000 + "\n")
    refused(run(["replay", str(t)]), str(t), "a line longer than 64 KiB")


def test_a_folder_whose_link_points_at_itself(tmp_path: Path) -> None:
    """wandb: a folder with a link loop (latest-run pointing at its parent) is walked
    once, not forever"""
    f = write_run(tmp_path / "wandb")
    (tmp_path / "wandb" / "latest-run").symlink_to(tmp_path / "wandb")
    o = run(["replay", str(tmp_path), "--json"], timeout=120)
    _clean(o)
    assert o.rc == 0 and o.stdout.count(str(f)) >= 1


def test_metadata_that_is_not_json_or_huge(tmp_path: Path) -> None:
    """wandb: damaged or 2 MiB metadata leaves the GPU name unknown, with one line that
    quotes nothing of the file"""
    f = write_run(tmp_path)
    meta = f.parent / "files" / "wandb-metadata.json"
    meta.write_text('{"host": "secret-host", "gpu": ')
    line = warned(run(["replay", str(f)], timeout=120), "metadata not read")
    assert "secret" not in line
    meta.write_text('{"gpu": "' + "x" * (2 << 20) + '"}')
    warned(run(["replay", str(f)], timeout=120), "metadata not read (over 1 MiB)")


def test_run_file_from_a_pipe(tmp_path: Path) -> None:
    """wandb: a run file piped on standard input is read like the file"""
    import subprocess
    import sys

    from hostile_helpers import env

    f = write_run(tmp_path)
    p = subprocess.run([sys.executable, "-m", "watchdog", "replay", "-", "--json"],
                       input=f.read_bytes(), capture_output=True, timeout=120, env=env(),
                       check=False)
    assert p.returncode == 0 and b"Traceback" not in p.stderr, p.stderr[-1000:]
    assert b'"comm_hang"' in p.stdout
