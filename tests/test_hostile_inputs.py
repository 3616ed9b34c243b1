"""Hostile inputs: every input is bounded (size, aliases, ranges, decompressed size).

Each case runs the real command as a subprocess (``hostile_helpers.run``: a hang guard
and an address-space ceiling) and checks what an operator sees: the documented exit code
(2: bad input; ``watchdog check`` says UNKNOWN, 3), exactly one ``watchdog: error:``
line naming the problem (never a traceback, never "internal error", exit 70). Each case
states its time and memory budget (``hostile_helpers.budget``: far below the unit's
``MemoryMax``); ``bench/hostile.py`` measures them, not the tests. The bad inputs are made here by
tiny generators (an alias bomb is a few hundred bytes; a 400 MB run of zeros is a
400 KB deflate stream; a 2 GB NUL tail is a sparse file): nothing big is committed or
written to disk.

The SIGHUP path (a bad value must keep the running config) is covered by
``config.load`` raising :class:`InputError` for every bad value: the agent's reload calls
it and keeps the running config on that error.
"""

from __future__ import annotations

import functools
import io
import json
import os
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hostile_helpers import Outcome, budget, run

from watchdog import config
from watchdog.errors import InputError

# end to end: every case runs the real command as a subprocess (the whole suite and
# bench/hostile.py run them; `pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

LOGS = Path(__file__).parent / "fixtures" / "logs"
SMALL_LOG = LOGS / "smi_units_in_values.csv"


def refused(o: Outcome, *words: str, rc: int = 2, work_s: float = 5.0) -> str:
    """The run ended with ``rc`` and one clear error line holding ``words``; returns the
    line. Its budget: ``work_s`` seconds beyond start-up, far below the memory bound
    (measured by ``bench/hostile.py``)."""
    assert "Traceback" not in o.stderr and "internal error" not in o.stderr, o.stderr[-2000:]
    assert o.rc == rc, (o.rc, "killed by the hang guard" if o.timed_out else "",
                        o.stderr[-1000:])
    errors = [x for x in o.stderr.splitlines() if x.startswith("watchdog: error:")]
    assert len(errors) == 1, o.stderr[-2000:]
    line = errors[0]
    for w in words:
        assert w in line, line
    budget(o, work_s=work_s)
    return line


# --- YAML: config, rule files, rule test files -------------------------------------------

def alias_bomb(levels: int = 10, key: str = "notify") -> str:
    """A "billion laughs": each level aliases the previous one nine times (9**levels
    strings from a few hundred bytes)."""
    out = [f"{key}:", '  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        out.append(f"  a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(out) + "\n"


def test_config_alias_bomb_is_refused(tmp_path: Path) -> None:
    """input: a YAML alias bomb in the config is refused in under a second"""
    bomb = tmp_path / "watchdog.yaml"
    bomb.write_text(alias_bomb())
    assert len(bomb.read_bytes()) < 1000
    o = run(["run", "--config", str(bomb), "--state-dir", str(tmp_path / "s")], timeout=20)
    refused(o, str(bomb), "alias", work_s=1.0)
    # the SIGHUP reload reads the file through the same function
    with pytest.raises(InputError, match="alias"):
        config.load(bomb)


@pytest.mark.parametrize("action", ["check", "test"])
def test_rule_file_alias_bomb_is_refused(tmp_path: Path, action: str) -> None:
    """input: a YAML alias bomb in a rule file or a rule test file is refused in under a
    second"""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(key="rules" if action == "check" else "tests"))
    o = run(["rules", action, str(bomb)], timeout=20)
    refused(o, str(bomb), "alias", work_s=1.0)


def test_config_from_dev_zero_is_refused_at_once(tmp_path: Path) -> None:
    """input: --config /dev/zero is refused at once (not a regular file), not read forever"""
    o = run(["run", "--config", "/dev/zero", "--state-dir", str(tmp_path / "s")], timeout=20)
    refused(o, "/dev/zero", "not a regular file", work_s=1.0)


def test_config_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    """input: a config that is a FIFO is refused at once, the daemon does not block on it"""
    fifo = tmp_path / "watchdog.yaml"
    os.mkfifo(fifo)
    o = run(["run", "--config", str(fifo), "--state-dir", str(tmp_path / "s")], timeout=20)
    refused(o, str(fifo), "not a regular file", work_s=1.0)


def test_config_larger_than_the_cap_is_refused(tmp_path: Path) -> None:
    """input: a config file of more than 1 MiB is refused without parsing it"""
    big = tmp_path / "watchdog.yaml"
    big.write_text("# padding\n" * 200_000)
    o = run(["run", "--config", str(big), "--state-dir", str(tmp_path / "s")], timeout=20)
    refused(o, str(big), "1 MiB", work_s=1.0)


@pytest.mark.parametrize(("text", "words"), [
    ("interval: 99999999999999999999999999999999d\n", ("interval", "100 years")),
    ("sim_gpus: -3\nsource: sim:healthy\n", ("sim_gpus", "1 to 256")),
    ("source: sim:comm_hnag\n", ("comm_hnag", "unknown scenario", "comm_hang")),
])
def test_config_value_out_of_range_is_exit_2_not_70(tmp_path: Path, text: str,
                                                    words: tuple[str, ...]) -> None:
    """input: a config value out of its range (an overflowing interval, negative GPUs, a
    scenario typo) stops `watchdog run` at start with one line and exit 2"""
    cfg = tmp_path / "watchdog.yaml"
    cfg.write_text(text)
    o = run(["run", "--config", str(cfg), "--state-dir", str(tmp_path / "s")], timeout=20)
    refused(o, str(cfg), *words, work_s=1.0)


@pytest.mark.parametrize(("text", "words"), [
    ("interval: 99999999999999999999999999999999d", "longer than 100 years"),
    ("interval: 1ms", "out of range (100ms to 1h)"),
    ("interval: 2h", "out of range (100ms to 1h)"),
    ("interval: .inf", "not a duration"),
    ("call_timeout: 10ms", "out of range (100ms to 1m)"),
    ("call_timeout: 5m", "out of range (100ms to 1m)"),
    ("speed: .inf", "not a finite number"),
    ("speed: .nan", "not a finite number"),
    ("speed: 0", "out of range"),
    ("speed: 1001", "out of range"),
    ("speed: true", "not a number"),
    ("sim_gpus: -3", "out of range (1 to 256)"),
    ("sim_gpus: 257", "out of range (1 to 256)"),
    ("sim_seed: -1", "out of range (0 to 4294967295)"),
    ("sim_seed: 4294967296", "out of range"),
    ("sim_seed: 1.5", "not an integer"),
    ("retention: 1m", "out of range (1h to 3650d)"),
    ("retention: 36500d", "out of range"),
    ("record: {dir: /tmp/r, keep: 10s}", "record.keep: '10s' is out of range"),
    ("record: {dir: /tmp/r, keep: 9999d}", "out of range"),
    ("source: sim:comm_hnag", "unknown scenario 'comm_hnag' (valid: healthy, comm_hang"),
    ("source: sim:xid(gpus=300)\nsim_gpus: 4", "GPU 300 does not exist (a simulated node "
                                               "has at most 256 GPUs)"),
    ("source: sim:xid(gpus=4-2)", "runs backwards"),
    ("model: {use: auto, refit: 1ms}", "model.refit: '1ms' is out of range (1h to 90d)"),
    ("model: {use: auto, refit: 100d}", "model.refit: '100d' is out of range (1h to 90d)"),
    ("model: {use: auto, baseline: 60d}", "model.baseline: '60d' is out of range (1h to 30d)"),
    ("model: {use: auto, baseline: 10m}", "model.baseline 10m: at least 1h"),
    ("model: {use: auto, refit: 99999999999999999999999d}", "100 years"),
    ("model: {use: auto, every: 1h}", "model must be none, auto, a model file"),
    ("model: /nonexistent/m.wdm", "model /nonexistent/m.wdm: cannot read"),
    ("source: sim:comm_hang(fr=3m)", "unknown parameter 'fr'"),
    ("source: sim:comm_hang@-3", "onset"),
    ("sim_model: h200", "unknown simulated GPU model"),
    ("notify:\n  group_wait: 2h", "notify.group_wait: '2h' is out of range (0s to 1h)"),
    ("notify:\n  group_interval: 2d", "notify.group_interval"),
    ("notify:\n  repeat_interval: 1s", "notify.repeat_interval"),
    ("notify:\n  repeat_interval: 99999999999999999999999999999999d", "100 years"),
    ("notify:\n  resolve_hold: 2d", "notify.resolve_hold"),
    ("notify:\n  flap_window: 1s", "notify.flap_window"),
    ("notify:\n  flap_hold: 30d", "notify.flap_hold"),
    ("notify:\n  flap_count: 0", "notify.flap_count"),
    ("notify:\n  flap_count: 100000", "notify.flap_count"),
    ("notify:\n  restart_grace: 7d", "notify.restart_grace"),
    ("notify:\n  sink_fail_after: 1s", "notify.sink_fail_after"),
    ("notify:\n  drain_timeout: 1h", "notify.drain_timeout: '1h' is out of range (0s to 1m)"),
    ("notify:\n  outbox_max: 0", "notify.outbox_max"),
    ("notify:\n  outbox_max: 10000000000", "notify.outbox_max"),
    ("notify:\n  routes:\n    - {sinks: 5}", "sinks must be a sink name"),
    ("x: &a [*a]", "recursive"),
    ("x: " + "[" * 70 + "]" * 70, "nested more than 64"),
    ("x: 1" + "0" * 5000, "cannot be read"),
])
def test_config_load_refuses_every_bad_value(tmp_path: Path, text: str, words: str) -> None:
    """input: each bad config value is an InputError from config.load (so a SIGHUP with
    it keeps the running config)"""
    p = tmp_path / "w.yaml"
    p.write_text(text + "\n")
    with pytest.raises(InputError) as e:
        config.load(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(p)) and words in msg, msg


def test_config_ranges_accept_real_values(tmp_path: Path) -> None:
    """input: the ends of every range and the shipped example config still load"""
    p = tmp_path / "w.yaml"
    p.write_text("interval: 100ms\ncall_timeout: 1m\nspeed: 1000\nsim_gpus: 256\n"
                 "sim_seed: 4294967295\nretention: 3650d\nrecord: {dir: /tmp/r, keep: 1h}\n"
                 "source: sim:comm_hang(gpus=0-3,dead=2)@10m,xid(code=48)\n"
                 "notify:\n  group_wait: 0s\n  repeat_interval: 30d\n  drain_timeout: 1m\n"
                 "  outbox_max: 1000000\n  flap_count: 1000\n"
                 "model: {use: auto, baseline: 30d, refit: 90d}\n")
    c = config.load(p)
    assert (c.interval, c.call_timeout, c.speed, c.sim_gpus) == (0.1, 60.0, 1000.0, 256)
    assert c.notify.outbox_max == 1_000_000
    p.write_text("model: {use: auto, baseline: 1h, refit: 1h}\n")
    assert config.load(p).model == {"use": "auto", "baseline": "1h", "refit": "1h"}
    config.load(Path(__file__).resolve().parent.parent / "config" / "watchdog.yaml")


@pytest.mark.parametrize(("args", "words"), [
    (["--interval", "1ms"], ("--interval", "100ms to 1h")),
    (["--interval", "99999999999999999999999999999999d"], ("--interval", "100 years")),
    (["--speed", "inf"], ("--speed", "finite")),
    (["--speed", "5000"], ("--speed", "out of range")),
    (["--gpus", "0"], ("--gpus 0", "1..256")),
    (["--seed", "-1"], ("--seed",)),
    (["--duration", "99999999999999999999999999999999d"], ("--duration", "100 years")),
])
def test_run_options_have_the_config_ranges(tmp_path: Path, args: list[str],
                                            words: tuple[str, ...]) -> None:
    """input: `watchdog run --interval/--speed/--gpus/--duration` out of range is one line,
    exit 2"""
    o = run(["run", "--source", "sim", *args, "--state-dir", str(tmp_path / "s")],
            timeout=20)
    refused(o, *words, work_s=1.0)


# --- simulator specs ----------------------------------------------------------------------

@pytest.mark.parametrize(("command", "rc"), [
    (["run", "--source"], 2), (["replay"], 2), (["check", "--source"], 3)])
def test_sim_scenario_typo_is_refused_at_start(tmp_path: Path, command: list[str],
                                               rc: int) -> None:
    """input: a scenario typo in --source sim:… stops run, replay and check at start with
    one line naming it and the known scenarios (check: UNKNOWN, exit 3)"""
    extra = ["--state-dir", str(tmp_path / "s"), "--duration", "5s"] if "run" in command else []
    o = run([*command, "sim:comm_hnag", *extra], timeout=30)
    refused(o, "unknown scenario 'comm_hnag'", "comm_hang", "thermal_throttle", rc=rc)


@pytest.mark.parametrize("spec", ["sim:comm_hang(gpus=12)", "sim:xid(code=zz)",
                                  "sim:comm_hang@99999999999999999999d", "sim:stall(for=x)"])
def test_sim_spec_parameters_are_checked_at_start(tmp_path: Path, spec: str) -> None:
    """input: a bad scenario parameter or time in --source sim:… stops `watchdog run` at
    start (it used to fail on every tick and exit 0)"""
    o = run(["run", "--source", spec, "--state-dir", str(tmp_path / "s"), "--duration", "5s"],
            timeout=30)
    refused(o, spec.split(":", 1)[1].split("(")[0])


# --- recordings (.wdrec) ------------------------------------------------------------------

def _record(kind: bytes, payload: bytes) -> bytes:
    return struct.pack("<cQ", kind, len(payload)) + payload + struct.pack("<I",
                                                                         zlib.crc32(payload))


def wdrec(chunks: list[bytes], manifest: Any = None) -> bytes:
    """A recording: magic, a manifest, the chunks, an end record; every CRC valid."""
    from watchdog.sources.replay.recording import FORMAT

    if manifest is None:
        manifest = {"format": FORMAT, "version": 1, "host": "h", "source": "test",
                    "devices": [{"index": 0, "uuid": "GPU-0"}]}
    m = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    return (b"WDREC\x00" + _record(b"M", m) + b"".join(_record(b"C", c) for c in chunks)
            + _record(b"E", b'{"rows": 0}'))


def _deflate(raw: bytes, final: bool = True) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(raw) + c.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)


@functools.cache
def _zeros_stream(nbytes: int) -> bytes:
    """A raw deflate stream of ``nbytes`` zeros (made 1 MiB at a time: ~1 KB per MiB)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = bytes(1 << 20)
    out, left = [], nbytes
    while left:
        n = min(left, len(block))
        out.append(c.compress(block if n == len(block) else block[:n]))
        left -= n
    out.append(c.flush())
    return b"".join(out)


@functools.cache
def _crc(header: bytes, nbytes: int) -> int:
    """CRC-32 of ``header`` followed by ``nbytes`` zeros."""
    crc, block, left = zlib.crc32(header), bytes(1 << 20), nbytes
    while left:
        n = min(left, len(block))
        crc = zlib.crc32(block if n == len(block) else block[:n], crc)
        left -= n
    return crc


def npy(arr: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, arr, allow_pickle=False)
    return b.getvalue()


def zeros_member(dtype: str, shape: tuple[int, ...]) -> tuple[bytes, int, int]:
    """A ``.npy`` member of zeros as ``(deflated, crc, size)``: a real deflate stream of
    ``prod(shape)`` zeros (a 400 MB member is a ~400 KB stream)."""
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": np.dtype(dtype).str,
                                             "fortran_order": False, "shape": shape})
    header = b.getvalue()
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    # two deflate streams joined: the header's (flushed, not final), then the zeros'
    return (_deflate(header, final=False) + _zeros_stream(nbytes), _crc(header, nbytes),
            len(header) + nbytes)


def zip_of(members: dict[str, Any]) -> bytes:
    """A zip of ``.npy`` members, written by hand (so a member may be a zero stream):
    each value an ndarray, raw ``.npy`` bytes, or ``(deflated, crc, size)``."""
    out, central = bytearray(), bytearray()
    for name, value in members.items():
        if isinstance(value, np.ndarray):
            value = npy(value)
        if isinstance(value, bytes):
            value = (_deflate(value), zlib.crc32(value), len(value))
        comp, crc, size = value
        nb = f"{name}.npy".encode()
        off = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(comp),
                           size, len(nb), 0) + nb + comp
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc,
                               len(comp), size, len(nb), 0, 0, 0, 0, 0, off) + nb
    cd = len(out)
    out += central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members),
                                 len(central), cd, 0)
    return bytes(out)


def chunk_arrays(n: int = 8) -> dict[str, Any]:
    """The arrays of a valid chunk of ``n`` samples of one GPU."""
    return {"ts": 1.7e9 + np.arange(n, dtype=np.float64), "index": np.zeros(n, np.int64),
            "uuid_code": np.zeros(n, np.int32), "uuids": np.array(["GPU-0"]),
            "lost": np.zeros(n, bool), "v__power.draw": np.full(n, 300.0),
            "meta": np.frombuffer(b'{"errors": [], "processes": [], "xids": []}', np.uint8)}


def replay_refused(tmp_path: Path, data: bytes, *words: str, work_s: float = 5.0) -> str:
    p = tmp_path / "node.wdrec"
    p.write_bytes(data)
    return refused(run(["replay", str(p)], timeout=30), str(p), *words, work_s=work_s)


def test_the_recording_generator_makes_a_valid_recording(tmp_path: Path) -> None:
    """input: (control) the hand-made recording the cases below damage replays fine"""
    from watchdog.sources.replay import open_log

    p = tmp_path / "ok.wdrec"
    p.write_bytes(wdrec([zip_of(chunk_arrays())]))
    rec = open_log(p)
    assert len(rec.frame) == 8 and rec.frame["power.draw"].iloc[0] == 300.0


@pytest.mark.slow
def test_recording_zip_bomb_is_refused_before_decompressing(tmp_path: Path) -> None:
    """input: a recording whose chunk decompresses to 400 M zeros is refused before
    anything is decompressed"""
    a = chunk_arrays()
    a["v__power.draw"] = zeros_member("<f8", (50_000_000,))  # 400 MB of zeros
    data = wdrec([zip_of(a)])
    assert len(data) < 1 << 20
    replay_refused(tmp_path, data, "chunk 1", "power.draw")
    a = {k: zeros_member(v.dtype.str, (50_000_000,)) if k in ("ts", "index") else v
         for k, v in chunk_arrays().items()}  # every column as long: too many rows
    replay_refused(tmp_path, wdrec([zip_of(a)]), "chunk 1")


def test_recording_many_chunks_bomb_is_refused_by_the_total(tmp_path: Path) -> None:
    """input: a small recording of many chunks that together decompress to gigabytes is
    refused before any chunk is decompressed"""
    n = 1 << 20  # the most rows a chunk may have: 8 MiB per column
    a = {k: zeros_member(np.asarray(v).dtype.str, (n,)) for k, v in chunk_arrays().items()
         if k not in ("uuids", "meta")}
    a.update({"uuids": np.array(["GPU-0"]), "meta": chunk_arrays()["meta"]})
    for i in range(30):
        a[f"v__m{i}"] = zeros_member("<f8", (n,))
    chunk = zip_of(a)
    data = wdrec([chunk] * 12)  # 12 chunks x 36 columns x 8 MiB: 3.4 GB declared
    assert len(data) < 4 << 20
    replay_refused(tmp_path, data, "decompression bomb")


@pytest.mark.parametrize(("damage", "words"), [
    ("truncated zip", ("chunk 1", "zip")),
    ("flipped deflate bytes", ("chunk 1",)),
    ("ts as text", ("chunk 1", "'ts'")),
    ("ragged column", ("chunk 1", "ragged")),
    ("uuid_code out of range", ("chunk 1", "uuid_code")),
    ("2-d column", ("chunk 1", "dimensions")),
    ("object array", ("chunk 1", "pickled")),
    ("meta not JSON", ("chunk 1", "meta")),
    ("meta row out of range", ("chunk 1", "meta.errors")),
    ("process of wrong type", ("chunk 1", "ProcessInfo")),
    ("xid of wrong type", ("chunk 1", "XidEvent")),
    ("devices not a list", ("devices",)),
    ("device index a string", ("DeviceInfo.index",)),
    ("manifest a list", ("not an nvml-watchdog recording",)),
    ("manifest nested too deep", ("manifest",)),
    ("version a string", ("version",)),
    ("unknown array", ("chunk 1", "unexpected array")),
    ("metric named like a column", ("chunk 1", "unexpected array 'v__ts'")),
    ("empty dtype", ("chunk 1", "empty dtype")),
])
def test_damaged_recording_with_valid_crcs_is_one_line(tmp_path: Path, damage: str,
                                                      words: tuple[str, ...]) -> None:
    """input: a recording with valid CRCs but a broken zip, wrong types or ragged columns
    is refused with one line (it used to be exit 70)"""
    from watchdog.sources.replay.recording import FORMAT

    a = chunk_arrays()
    manifest: Any = None
    meta = {"errors": [], "processes": [], "xids": []}
    chunk: bytes | None = None
    if damage == "truncated zip":
        chunk = zip_of(a)[:200]
    elif damage == "flipped deflate bytes":
        z = bytearray(zip_of(a))
        z[60:70] = bytes(10)
        chunk = bytes(z)
    elif damage == "ts as text":
        a["ts"] = np.array(["x"] * 8)
    elif damage == "ragged column":
        a["v__power.draw"] = np.full(7, 300.0)
    elif damage == "uuid_code out of range":
        a["uuid_code"] = np.full(8, 5, np.int32)
    elif damage == "2-d column":
        a["lost"] = np.zeros((8, 2), bool)
    elif damage == "object array":
        b = io.BytesIO()
        np.save(b, np.array([{"a": 1}] * 8, dtype=object), allow_pickle=True)
        a["v__power.draw"] = b.getvalue()
    elif damage == "meta not JSON":
        a["meta"] = np.frombuffer(b"{not json", np.uint8)
    elif damage == "meta row out of range":
        meta["errors"] = [[99, ["x"]]]
    elif damage == "process of wrong type":
        meta["processes"] = [[0, [{"pid": "one"}]]]
    elif damage == "xid of wrong type":
        meta["xids"] = [[0, {"ts": 1.0, "uuid": "GPU-0", "index": 0, "code": [48]}]]
    elif damage == "devices not a list":
        manifest = {"format": FORMAT, "version": 1, "devices": "GPU-0"}
    elif damage == "device index a string":
        manifest = {"format": FORMAT, "version": 1, "devices": [{"index": "0", "uuid": "x"}]}
    elif damage == "manifest a list":
        manifest = [1, 2]
    elif damage == "manifest nested too deep":
        manifest = b"[" * 100_000 + b"]" * 100_000
    elif damage == "version a string":
        manifest = {"format": FORMAT, "version": "1"}
    elif damage == "unknown array":
        a["zz"] = np.zeros(8)
    elif damage == "metric named like a column":
        a["v__ts"] = np.zeros(8)
    elif damage == "empty dtype":
        b = io.BytesIO()
        np.lib.format.write_array_header_1_0(b, {"descr": "<U0", "fortran_order": False,
                                                 "shape": (1,)})
        a["uuids"] = b.getvalue()
    if damage.startswith(("meta row", "process", "xid")):
        a["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    replay_refused(tmp_path, wdrec([chunk if chunk is not None else zip_of(a)], manifest),
                   *words)


# --- CSV and dmon logs --------------------------------------------------------------------

def test_csv_header_of_a_million_columns_is_refused_at_once(tmp_path: Path) -> None:
    """input: a CSV log whose header has 10^6 columns is refused in about a second, not
    after minutes and gigabytes"""
    p = tmp_path / "wide.csv"
    with p.open("w") as f:
        f.write(",".join(f"c{i}" for i in range(10**6)) + "\n")
        f.write(",".join("1" for _ in range(10**6)) + "\n")
    refused(run(["replay", str(p)], timeout=30), str(p), "longer than 64 KiB", work_s=1.5)
    q = tmp_path / "wide2.csv"  # within 64 KiB, but 9 000 columns
    q.write_text(",".join(f"c{i}" for i in range(9000)) + "\n" + ",".join("1" * 9000) + "\n")
    refused(run(["replay", str(q)], timeout=30), str(q), "9000 columns", "1024", work_s=1.5)


def sparse_nul_tail(path: Path, text: bytes, tail: int = 2 << 30) -> Path:
    """``text`` then ``tail`` NUL bytes as a hole (no disk used): a crash mid-write."""
    with path.open("wb") as f:
        f.write(text)
        f.truncate(len(text) + tail)
    return path


def test_csv_with_a_2gb_nul_tail_replays_up_to_it(tmp_path: Path) -> None:
    """input: a CSV log with a 2 GB NUL tail (a crash mid-write) replays up to the tail
    with one warning, in bounded time and memory"""
    p = sparse_nul_tail(tmp_path / "crash.csv", SMALL_LOG.read_bytes())
    assert p.stat().st_size > 2 << 30
    o = run(["replay", str(p), "--json"], timeout=30)
    assert o.rc == 0, o.stderr[-1000:]
    assert "Traceback" not in o.stderr
    warn = [x for x in o.stderr.splitlines() if "NUL" in x]
    assert len(warn) == 1 and "2147483648 NUL bytes at the end ignored" in warn[0], o.stderr
    assert json.loads(o.stdout)["incidents"]  # the log before the crash was read
    budget(o, work_s=5.0)


def test_csv_with_a_dense_nul_tail_replays_up_to_it(tmp_path: Path) -> None:
    """input: a CSV log whose NUL tail is written out (not a hole) replays up to it, the
    tail scanned in bounded memory"""
    p = tmp_path / "crash.csv"
    with p.open("wb") as f:
        f.write(SMALL_LOG.read_bytes())
        block = bytes(1 << 20)
        for _ in range(200):
            f.write(block)
    o = run(["replay", str(p)], timeout=30)
    assert o.rc == 0 and "NUL bytes at the end ignored" in o.stderr, o.stderr[-1000:]
    budget(o)


def _big_log(repeat: int = 400) -> bytes:
    lines = SMALL_LOG.read_bytes().split(b"\n")
    return b"\n".join(lines[:3]) + b"\n" + b"\n".join(lines[3:] * repeat)


def test_csv_with_nul_bytes_inside_is_refused(tmp_path: Path) -> None:
    """input: a CSV log with NUL bytes in its middle is refused with one line naming the
    line (not parsed as data)"""
    big = _big_log()
    p = tmp_path / "nul.csv"
    p.write_bytes(big[:100_000] + bytes(5000) + big[100_000:])
    refused(run(["replay", str(p)], timeout=30), str(p), "NUL bytes inside the log")


def test_csv_with_an_endless_line_is_refused(tmp_path: Path) -> None:
    """input: a CSV log with a line of megabytes is refused with one line naming it"""
    big = _big_log()
    cut = big.index(b"\n", 100_000) + 1
    p = tmp_path / "long.csv"
    p.write_bytes(big[:cut] + b"x" * (4 << 20) + big[cut:])
    line = refused(run(["replay", str(p)], timeout=30), str(p), "longer than 64 KiB")
    line_no = big[:cut].count(b"\n") + 1
    assert f"{p}:{line_no}:" in line


def test_dmon_log_with_nul_bytes_inside_is_refused(tmp_path: Path) -> None:
    """input: an nvidia-smi dmon log with NUL bytes in its middle is refused with one line"""
    text = "# gpu    pwr  gtemp\n# Idx      W      C\n" + "".join(
        f"    {g}    {100 + t}     {40 + g}\n" for t in range(5000) for g in range(2))
    p = tmp_path / "dmon.log"
    p.write_bytes(text[:70_000].encode() + bytes(100) + text[70_000:].encode())
    refused(run(["replay", str(p)], timeout=30), str(p), "NUL")


# --- anomaly model files --------------------------------------------------------------------

def model_file(threshold: float = 0.7, trees: Any = None) -> bytes:
    """A model file of one single-leaf tree (valid with the defaults)."""
    import hashlib

    from watchdog.anomaly import features as F
    from watchdog.anomaly.persist import MAGIC

    nf = len(F.FEATURES)
    meta = {"schema": F.FEATURE_SCHEMA, "features": list(F.FEATURES), "gpu_model": "unknown",
            "trained_from": 0.0, "trained_to": 3600.0, "step": 10.0, "window": 60.0,
            "threshold": threshold, "calibration": {}, "max_depth": 1, "norm": 1.0,
            "baseline_uuids": []}
    arrays: dict[str, Any] = trees or {
        "feature": np.full((1, 1), -1, np.int32), "threshold": np.zeros((1, 1)),
        "left": np.zeros((1, 1), np.int32), "right": np.zeros((1, 1), np.int32),
        "leaf_path": np.ones((1, 1))}
    arrays.update({k: np.ones(nf) for k in ("fill", "center", "scale", "lo", "hi", "unit")})
    arrays["base_coef"] = np.zeros((0, 2))
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    payload = zip_of(arrays)
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def test_the_model_generator_makes_a_valid_model() -> None:
    """input: (control) the hand-made model file the cases below damage loads"""
    from watchdog.anomaly import persist

    assert persist.loads(model_file()).threshold == 0.7


@pytest.mark.parametrize(("threshold", "words"), [(float("nan"), "threshold"),
                                                   (float("inf"), "threshold"),
                                                   (-1.0, "threshold")])
def test_model_with_a_nan_threshold_is_refused(tmp_path: Path, threshold: float,
                                               words: str) -> None:
    """input: an anomaly model file with threshold NaN is refused with one line naming the
    file (it used to switch anomaly detection off silently)"""
    m = tmp_path / "bad.wdm"
    m.write_bytes(model_file(threshold))
    o = run(["replay", str(SMALL_LOG), "--model", str(m)], timeout=30)
    refused(o, str(m), words)


def test_model_with_50m_node_trees_is_refused_before_allocating(tmp_path: Path) -> None:
    """input: an anomaly model file declaring 50 M-node trees is refused before any array
    is allocated"""
    shape = (1, 50_000_000)
    trees = {k: zeros_member("<i4" if k in ("feature", "left", "right") else "<f4", shape)
             for k in ("feature", "threshold", "left", "right", "leaf_path")}
    m = tmp_path / "big.wdm"
    m.write_bytes(model_file(trees=trees))
    assert m.stat().st_size < 2 << 20
    o = run(["replay", str(SMALL_LOG), "--model", str(m)], timeout=30)
    refused(o, str(m))


@pytest.mark.parametrize("damage", ["child index", "feature index", "ragged trees"])
def test_model_with_out_of_range_indices_is_refused(tmp_path: Path, damage: str) -> None:
    """input: an anomaly model whose tree points outside itself is refused with one line"""
    from watchdog.anomaly import persist

    t = {"feature": np.array([[0, -1, -1]], np.int32), "threshold": np.zeros((1, 3)),
         "left": np.array([[1, 0, 0]], np.int32), "right": np.array([[2, 0, 0]], np.int32),
         "leaf_path": np.ones((1, 3))}
    assert persist.loads(model_file(trees=dict(t))).forest.feature.shape == (1, 3)
    if damage == "child index":
        t["right"] = np.array([[7, 0, 0]], np.int32)
    elif damage == "feature index":
        t["feature"] = np.array([[999, -1, -1]], np.int32)
    else:
        t["leaf_path"] = np.ones((1, 2))
    m = tmp_path / "bad.wdm"
    m.write_bytes(model_file(trees=t))
    with pytest.raises(persist.ModelFileError) as e:
        persist.load(m)
    assert str(m) in str(e.value) and "\n" not in str(e.value)


def test_model_file_from_dev_zero_is_refused() -> None:
    """input: an anomaly model path that is a device (/dev/zero) is refused without
    reading it"""
    from watchdog.anomaly import persist

    with pytest.raises(persist.ModelFileError, match="not a regular file"):
        persist.load("/dev/zero")


# --- command-line ranges of the simulated and probing commands ------------------------------

@pytest.mark.parametrize(("args", "words", "rc"), [
    (["replay", "sim:healthy", "--duration", "3650d", "--interval", "1ms"],
     ("--duration", "'3650d' is out of range (100ms to 400d)"), 2),
    (["replay", "sim:healthy", "--interval", "1ms"], ("--interval", "(100ms to 1h)"), 2),
    (["replay", "sim:healthy", "--interval", "2h"], ("--interval", "(100ms to 1h)"), 2),
    (["replay", "sim:healthy", "--duration", "99999999999999999999d"], ("100 years",), 2),
    (["record", "--source", "sim", "--chunk", "0"], ("--chunk 0", "1 to 16384"), 2),
    (["record", "--source", "sim", "--chunk", "99999999999"], ("--chunk", "1 to 16384"), 2),
    (["record", "--source", "sim", "--duration", "3650d"], ("--duration", "100ms to 400d"), 2),
    (["record", "--source", "sim", "--interval", "1ms"], ("--interval", "100ms to 1h"), 2),
    (["check", "--source", "sim", "--duration", "1h"], ("--duration 1h", "0s to 10m"), 3),
    (["check", "--source", "sim", "--interval", "1ms"], ("--interval 1ms", "100ms to 1h"), 3),
    (["check", "--source", "sim", "--call-timeout", "5m"], ("--call-timeout 5m", "1m"), 3),
    (["check", "--source", "sim", "--at", "30d"], ("--at 30d", "0s to 1d"), 3),
    (["check", "--source", "sim:comm_hang@300d"], ("--at", "0s to 1d", "the default"), 3),
])
def test_simulated_durations_and_chunks_have_ranges(tmp_path: Path, args: list[str],
                                                    words: tuple[str, ...], rc: int) -> None:
    """input: replay/record of a simulated node for 10 years at 1 ms, a record --chunk of
    10^11 samples, a 1-hour or 300-day `watchdog check` are one line (check: UNKNOWN, 3),
    not hours of work or memory"""
    if args[0] == "record":
        args = [*args, "--output", str(tmp_path / "r.wdrec")]
    o = run(args, timeout=30)
    refused(o, *words, rc=rc, work_s=1.0)
    assert not (tmp_path / "r.wdrec").exists()


def test_the_ends_of_the_command_ranges_still_work(tmp_path: Path) -> None:
    """input: (control) the ends of the new ranges run: a 100 ms replay interval, a 16384
    record chunk, a 10-minute check of a simulated node with a 1-minute call timeout"""
    o = run(["replay", "sim:healthy", "--duration", "10s", "--interval", "100ms", "--gpus",
             "1", "--json"], timeout=60)
    assert o.rc == 0 and json.loads(o.stdout)["sources"][0]["samples"] == 100, o.stderr
    out = tmp_path / "r.wdrec"
    o = run(["record", "--source", "sim", "--duration", "5s", "--chunk", "16384", "--output",
             str(out)], timeout=60)
    assert o.rc == 0 and out.is_file(), o.stderr
    o = run(["check", "--source", "sim", "--duration", "10m", "--interval", "10s",
             "--call-timeout", "1m", "--json"], timeout=60)
    assert o.rc == 0 and json.loads(o.stdout)["status"] == "OK", o.stderr[-1000:]
    assert json.loads(o.stdout)["duration_s"] >= 590


# --- rule test series ------------------------------------------------------------------------

ELEVEN = ("utilization.gpu", "utilization.memory", "memory.used", "power.draw",
          "temperature.gpu", "temperature.memory", "fan.speed", "clocks.sm", "clocks.mem",
          "clocks.gr", "memory.total")


def _rule_test(tmp_path: Path, case: str) -> Path:
    p = tmp_path / "t.yaml"
    p.write_text("tests:\n  - name: hostile\n" + case)
    return p


@pytest.mark.parametrize(("case", "words"), [
    ('    series:\n      0: {utilization.gpu: "0x1000000000"}\n',
     ("'0x1000000000'", "more than 100000 samples")),
    ('    series:\n      0: {utilization.gpu: "1x99999999999999999999999999999999"}\n',
     ("more than 100000 samples",)),
    ('    series:\n      0: {utilization.gpu: "' + "1x50000 " * 3 + '"}\n',
     ("more than 100000 samples",)),
    ('    series:\n      0: {clocks_event_reasons.active: "0x' + "f" * 5000 + 'x1"}\n',
     ("64 bits",)),
    ('    series:\n      "0-99999999": {utilization.gpu: "1x3"}\n',
     ("GPUs '0-99999999' out of range (0 to 255",)),
    ('    series:\n      "0-255": {utilization.gpu: "1x400"}\n',
     ("400 samples x 256 GPUs = 102400 readings", "more than the 100000")),
    ("    series:\n      0: {" + ", ".join(f'{m}: "1x100000"' for m in ELEVEN) + "}\n",
     ("100000 readings x 11 metrics = 1100000 values", "more than the 1000000")),
    ('    interval: 1ms\n    series:\n      0: {utilization.gpu: "1x3"}\n',
     ("interval: '1ms' is out of range (100ms to 1h)",)),
    ('    interval: 2h\n    series:\n      0: {utilization.gpu: "1x3"}\n', ("(100ms to 1h)",)),
    ('    series:\n      0: "1x3"\n', ("a mapping of metric -> values",)),
    ('    series:\n      0: {utilization.gpu: "1x3"}\n    xids: [{gpu: 7, at: 1s, code: 79}]\n',
     ("xids:", "naming a GPU of the test")),
], ids=["billion", "huge count", "segments add up", "hex of 20000 bits", "1e8 GPUs",
        "too many readings", "too many values", "interval 1ms", "interval 2h",
        "series not a mapping", "xid on no GPU"])
def test_rule_test_series_are_bounded(tmp_path: Path, case: str, words: tuple[str, ...]) -> None:
    """input: a rule test series of a billion samples, a GPU range of 10^8 GPUs, a test of
    too many readings or a 1 ms interval is refused with one line naming the file, line and
    test, before anything is expanded"""
    p = _rule_test(tmp_path, case)
    refused(run(["rules", "test", str(p)], timeout=30), f"{p}:2: test hostile", *words,
            work_s=1.0)


def test_rule_test_files_are_bounded_together(tmp_path: Path) -> None:
    """input: a rule test file of many tests at the cap each is refused by the file's total,
    before the first test runs"""
    case = '  - name: big\n    series:\n      0: {utilization.gpu: "1x100000"}\n'
    p = tmp_path / "t.yaml"
    p.write_text("tests:\n" + case * 41)
    refused(run(["rules", "test", str(p)], timeout=30), str(p), "4000000 values",
            work_s=1.0)


def test_rule_test_at_the_caps_runs(tmp_path: Path) -> None:
    """input: (control) a rule test at the caps (100 000 samples of one GPU; 1 560 of 64
    GPUs) runs with the shipped rules in about a second and far below the memory bound"""
    p = tmp_path / "t.yaml"
    p.write_text('tests:\n  - name: long\n    series:\n      0: {utilization.gpu: "50x100000"}\n'
                 '    allow_extra: true\n'
                 '  - name: wide\n    series:\n      "0-63": {utilization.gpu: "50x1560"}\n'
                 '    allow_extra: true\n')
    o = run(["rules", "test", str(p)], timeout=60)
    assert o.rc == 0 and "2 passed" in o.stdout, o.stdout + o.stderr
    budget(o, work_s=3.0)


def test_no_user_yaml_is_read_around_yamlsafe() -> None:
    """input: no module reads YAML except through watchdog.yamlsafe (rule files re-read by
    --mutate, fake NVML scenarios included)"""
    import re

    root = Path(__file__).resolve().parent.parent / "watchdog"
    pattern = re.compile(r"\byaml\.(safe_load|load|full_load|unsafe_load|compose|parse|"
                         r"load_all|safe_load_all|compose_all)\s*\(")
    found = [f"{f.relative_to(root)}:{n}" for f in root.rglob("*.py")
             if f.name != "yamlsafe.py"
             for n, line in enumerate(f.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


@pytest.mark.parametrize("reader", ["mutate", "fakenvml"])
def test_yaml_re_read_by_mutate_and_fakenvml_is_bounded(tmp_path: Path, reader: str) -> None:
    """input: an alias bomb in a rule file re-read by `rules test --mutate`, or in a fake
    NVML scenario, is refused by the YAML bounds"""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(key="rules" if reader == "mutate" else "gpus"))
    if reader == "mutate":
        from watchdog.pipeline.mutate import _raw_fields

        with pytest.raises(InputError, match="alias"):
            _raw_fields(str(bomb))
    else:
        from watchdog.testing.fakenvml.scenarios import load

        with pytest.raises(InputError, match="alias"):
            load(str(bomb))


# --- piped input ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/dev/stdin", "-"])
@pytest.mark.parametrize("log", ["smi_units_in_values.csv", "dmon_plain.log"])
def test_a_piped_log_replays(path: str, log: str) -> None:
    """input: a log piped to `watchdog replay /dev/stdin` (or `-`) replays like the file
    (it was "empty file": the bytes were read twice)"""
    want = run(["replay", str(LOGS / log), "--json"], timeout=30)
    o = run(["replay", path, "--json"], stdin=(LOGS / log).read_text(), timeout=30)
    assert o.rc == 0 and "Traceback" not in o.stderr, o.stderr[-1000:]
    got, ref = json.loads(o.stdout), json.loads(want.stdout)
    assert [i["kind"] for i in got["incidents"]] == [i["kind"] for i in ref["incidents"]]
    assert got["sources"][0]["samples"] == ref["sources"][0]["samples"] > 0
    assert got["sources"][0]["host"] == "stdin"


@pytest.mark.slow
def test_a_piped_large_log_and_recording_replay(tmp_path: Path) -> None:
    """input: a piped log of more than 4 MiB (a file that size is read in parts) and a
    piped recording (binary, NUL bytes) replay from standard input"""
    head = SMALL_LOG.read_text().splitlines()[0]
    rows = [f"2026/02/25 {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}.000, {g}, GPU-{g}, "
            "NVIDIA A100-PCIE-40GB, P0, 50 %, 1000 MiB, 40960 MiB, 200.00 W, 0x0"
            for t in range(7000) for g in range(8)]
    big = "\n".join([head, *rows]) + "\n"
    assert len(big) > 4 << 20
    o = run(["replay", "-", "--json"], stdin=big, timeout=60)
    assert o.rc == 0, o.stderr[-1000:]
    assert json.loads(o.stdout)["sources"][0]["samples"] == len(rows)
    rec = tmp_path / "n.wdrec"
    assert run(["record", "--source", "sim", "--duration", "10m", "--output", str(rec)],
               timeout=60).rc == 0
    assert rec.stat().st_size > 65536 and b"\0" in rec.read_bytes()
    import subprocess

    from hostile_helpers import env

    r = subprocess.run([sys.executable, "-m", "watchdog", "replay", "-", "--json"],
                       input=rec.read_bytes(), capture_output=True, timeout=60, env=env())
    assert r.returncode == 0, r.stderr[-1000:]
    assert json.loads(r.stdout)["sources"][0]["samples"] == 8 * 600


def test_an_empty_pipe_is_one_line() -> None:
    """input: an empty pipe as the log is refused with one line, exit 2"""
    refused(run(["replay", "-"], stdin="", timeout=30), "/dev/stdin", "empty", work_s=1.0)


#: ``python -m watchdog replay -`` that reports its own peak memory (VmHWM, this process
#: image only) on exit: ``wait4``'s ``ru_maxrss`` of a child forked from the test process
#: starts at the test process's size, which is not the command's.
_REPLAY_STDIN_HWM = """
import atexit, sys
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            sys.stderr.write("peak-kb " + line.split()[1] + "\\n")
atexit.register(hwm)
from watchdog.cli import main
sys.exit(main(["replay", "-"]))
"""


def test_an_endless_pipe_is_refused_at_the_cap() -> None:
    """input: an endless pipe of log lines to `watchdog replay -` is refused at 64 MiB with
    one line, in bounded memory (not read until the machine runs out)"""
    import subprocess
    import threading
    import time

    from hostile_helpers import env

    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", _REPLAY_STDIN_HWM], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env())
    line = SMALL_LOG.read_bytes().splitlines()[1] + b"\n"

    def feed() -> None:
        block = line * ((1 << 20) // len(line))
        try:
            while True:
                p.stdin.write(block)  # type: ignore[union-attr]
        except (BrokenPipeError, OSError, ValueError):
            pass

    threading.Thread(target=feed, daemon=True).start()
    try:
        err = p.stderr.read().decode()  # type: ignore[union-attr]
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 2, err[-1000:]
    lines = [x for x in err.splitlines() if x.startswith("watchdog: error:")]
    assert len(lines) == 1 and "more than 64 MiB" in lines[0], err[-1000:]
    assert "Traceback" not in err
    peak_kb = int(err.rsplit("peak-kb ", 1)[1].split()[0])
    budget(work_s=3.0, wall_s=time.monotonic() - t0, peak_rss_mb=peak_kb / 1024.0)


# --- a config's simulated node and the command line's --gpus ---------------------------------

def test_config_sim_spec_is_checked_against_the_gpus_actually_used(tmp_path: Path) -> None:
    """input: a config whose `source: sim:…` names GPU 9 with `sim_gpus: 4` runs with
    `--gpus 16` (the command line wins) and is refused with one line without it"""
    cfg = tmp_path / "watchdog.yaml"
    cfg.write_text("source: sim:xid(gpus=9)\nsim_gpus: 4\nspeed: 100\n")
    config.load(cfg)  # nothing here depends on the GPU count the command line may change
    o = run(["run", "--config", str(cfg), "--gpus", "16", "--duration", "2s", "--state-dir",
             str(tmp_path / "a")], timeout=30)
    assert o.rc == 0 and "watching 16 GPUs" in o.stderr, o.stderr[-1000:]
    o = run(["run", "--config", str(cfg), "--duration", "2s", "--state-dir",
             str(tmp_path / "b")], timeout=30)
    refused(o, "GPU 9 does not exist", "0-3", work_s=1.0)
    cfg.write_text("source: sim:nvlink_errors\nsim_model: a100-pcie\nspeed: 100\n")
    config.load(cfg)  # --gpu-model may name a model with NVLink
    o = run(["run", "--config", str(cfg), "--gpu-model", "h100-sxm", "--duration", "2s",
             "--state-dir", str(tmp_path / "c")], timeout=30)
    assert o.rc == 0, o.stderr[-1000:]
    refused(run(["run", "--config", str(cfg), "--duration", "2s", "--state-dir",
                 str(tmp_path / "d")], timeout=30), "NVLink", work_s=1.0)


def test_config_model_setting_is_checked_at_start_and_on_reload(tmp_path: Path) -> None:
    """input: `model: {refit: 1ms}` stops `watchdog run` at start with one line (and, being
    refused by config.load, keeps the running config on SIGHUP)"""
    cfg = tmp_path / "watchdog.yaml"
    cfg.write_text("source: sim:healthy\nmodel: {use: auto, refit: 1ms}\n")
    o = run(["run", "--config", str(cfg), "--duration", "2s", "--state-dir",
             str(tmp_path / "s")], timeout=30)
    refused(o, f"{cfg}:2: model.refit", "1h to 90d", work_s=1.0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
