"""Write small W&B run files for tests: the LevelDB log framing and the protobuf fields of
W&B's ``Record`` that the reader decodes (field numbers from ``wandb_internal.proto``).

Written from the format's description, not copied from any W&B run: the tests build
exactly the bytes they need (a damaged block, a cut-off end, a payload over a bound).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

BLOCK = 32768


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num: int, value: int | bytes | str) -> bytes:
    """One protobuf field: an int as a varint, bytes or str length-delimited."""
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(num << 3 | 2) + varint(len(data)) + data


def timestamp(ts: float) -> bytes:
    sec = int(ts)
    return field(1, sec) + field(2, round((ts - sec) * 1e9))


def stats(ts: float, items: dict[str, float | str]) -> bytes:
    """A ``Record`` holding a ``StatsRecord`` (field 7) of ``items``."""
    body = field(2, timestamp(ts))
    for k, v in items.items():
        body += field(3, field(1, k) + field(16, v if isinstance(v, str) else json.dumps(v)))
    return field(1, 1) + field(7, body)


def output(ts: float, line: str, stderr: bool = True, raw: bool = True) -> bytes:
    """A ``Record`` holding an ``OutputRawRecord`` (13) or ``OutputRecord`` (4)."""
    body = field(1, 0 if stderr else 1) + field(2, timestamp(ts)) + field(3, line)
    return field(13 if raw else 4, body)


def run(ts: float) -> bytes:
    return field(17, field(1, "abc123") + field(17, timestamp(ts)))


def exit_record(code: int) -> bytes:
    return field(18, field(1, code) + field(2, 60))


def history(n: int) -> bytes:
    """A ``Record`` of another type (history, field 2) of about ``n`` bytes."""
    return field(2, field(1, field(1, "loss") + field(16, "x" * n)))


def frame(payloads: list[bytes], header: bytes = b":W&B\xe1\xbe\x00") -> bytes:
    """The run file of ``payloads``: W&B's header, then LevelDB log blocks."""
    out = bytearray(header)
    for p in payloads:
        first = True
        rest = p
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < 7:
                out += b"\x00" * left
                left = BLOCK
            room = left - 7
            piece, rest = rest[:room], rest[room:]
            if first and not rest:
                kind = 1
            elif first:
                kind = 2
            elif rest:
                kind = 3
            else:
                kind = 4
            crc = zlib.crc32(bytes([kind]) + piece) & 0xFFFFFFFF
            out += struct.pack("<IHB", crc, len(piece), kind) + piece
            first = False
            if not rest:
                break
    return bytes(out)


T0 = 1_750_000_000.0


def node(gpus: int = 2, minutes: float = 40.0, step: float = 10.0, hang_at: float = 25.0,
         new_keys: bool = True) -> list[bytes]:
    """A run's records: ``gpus`` busy GPUs (100 %, 300 W of 400 W), all of them hung
    from ``hang_at`` minutes (100 %, 60 W, clocks up: a hung collective), the console
    saying a checkpoint was saved and, at the end, an NCCL timeout; exit code 1."""
    recs = [run(T0)]
    n = int(minutes * 60 / step)
    for k in range(n):
        t = T0 + k * step
        hung = k * step >= hang_at * 60
        items: dict[str, float | str] = {"cpu": 12.0}
        for g in range(gpus):
            w = 60.0 + g if hung else 300.0 + g
            items |= {f"gpu.{g}.gpu": 100.0, f"gpu.{g}.memory": 0.0 if hung else 40.0,
                      f"gpu.{g}.temp": 50.0 if hung else 70.0, f"gpu.{g}.powerWatts": w,
                      f"gpu.{g}.powerPercent": w / 400.0 * 100.0,
                      f"gpu.{g}.memoryAllocated": 75.0,
                      f"gpu.{g}.memoryAllocatedBytes": 0.75 * 80 * 2**30}
            if new_keys:
                items |= {f"gpu.{g}.enforcedPowerLimitWatts": 400.0,
                          f"gpu.{g}.smClock": 1410.0, f"gpu.{g}.memoryClock": 1593.0}
        recs.append(stats(t, items))
        if k == 30:
            recs.append(output(t + 1, "\x1b[32mSaving checkpoint to ckpt/step_300\x1b[0m"))
        if k % 5 == 0:
            recs.append(output(t + 2, f"step {k}: loss 1.23\r step {k}: loss 1.22",
                               stderr=False))
    end = T0 + n * step
    recs.append(output(end, "[rank0]:[E ProcessGroupNCCL.cpp] Watchdog caught "
                            "collective operation timeout: WorkNCCL(OpType=ALLREDUCE)"))
    recs.append(exit_record(1))
    return recs


PRIVATE = {"host": "secret-host-7f3a", "program": "/home/someone/private/train.py",
           "args": ["--token", "s3cr3t"], "username": "someone"}


def write_run(folder: Path, run_id: str = "abc123", *, records: list[bytes] | None = None,
              gpu: str = "NVIDIA A100-SXM4-80GB", gpus: int = 2, new_meta: bool = True,
              data: bytes | None = None) -> Path:
    """A run folder ``run-20250615_000000-<id>/`` with its file and metadata (holding
    :data:`PRIVATE` fields that must never be printed); returns the run file."""
    d = folder / f"run-20250615_000000-{run_id}"
    (d / "files").mkdir(parents=True)
    meta = dict(PRIVATE, gpu=gpu, gpu_count=gpus)
    if new_meta:
        meta["gpu_nvidia"] = [{"name": gpu, "memoryTotal": str(80 * 2**30)}] * gpus
    else:
        meta["gpu_devices"] = [{"name": gpu, "memory_total": 80 * 2**30}] * gpus
    (d / "files" / "wandb-metadata.json").write_text(json.dumps(meta))
    f = d / f"run-{run_id}.wandb"
    f.write_bytes(data if data is not None else frame(records if records is not None
                                                      else node(gpus)))
    return f
