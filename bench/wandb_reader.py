"""The W&B run-file reader against W&B's own, on the real runs in ``../shared/real-wandb``.

Measures, in one run: the time to read every GPU value of every run file (the
framing and the stats records) with the product's reader and, given a Python that has
a W&B with a Python reader installed (``--wandb-python``: 0.18.7 has one; 0.31.0 reads
run files only in its compiled core), with W&B's ``DataStore`` and protobuf
classes; each reader's import cost; the product's whole ``read_run`` (console lines and
the replay frame too). It checks that both readers give the same values, item for item,
and prints the figures ``docs/wandb.md`` quotes.

    python -m venv /tmp/wandb-old && /tmp/wandb-old/bin/pip install "wandb==0.18.7"
    .venv/bin/python bench/wandb_reader.py --wandb-python /tmp/wandb-old/bin/python

W&B is never a dependency of the product; it is installed only beside it, for this
comparison.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REAL = Path(__file__).resolve().parent.parent.parent / "shared" / "real-wandb"

_THEIRS = """
import json, sys, time
t0 = time.perf_counter()
import wandb
from wandb.proto import wandb_internal_pb2 as pb
from wandb.sdk.internal import datastore
imp = time.perf_counter() - t0
wandb._assert_is_internal_process = True
files, repeat, out_path = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
best, out = float("inf"), {}
for _ in range(repeat):
    t = time.perf_counter()
    for f in files:
        ds = datastore.DataStore()
        ds.open_for_scan(f)
        items = []
        while True:
            try:
                d = ds.scan_data()
            except AssertionError:  # its way of saying: damaged or cut off
                break
            if d is None:
                break
            r = pb.Record()
            r.ParseFromString(d)
            if r.WhichOneof("record_type") == "stats":
                ts = r.stats.timestamp.seconds + r.stats.timestamp.nanos * 1e-9
                for it in r.stats.item:
                    if it.key.startswith("gpu."):
                        items.append((round(ts, 6), it.key, float(it.value_json)))
        out[f] = items
    best = min(best, time.perf_counter() - t)
json.dump(out, open(out_path, "w"))
print(json.dumps({"version": wandb.__version__, "import_s": imp, "read_s": best}))
"""


def ours(files: list[str], repeat: int) -> tuple[dict[str, float], dict[str, list]]:
    """The product's reader: import, GPU items of every file (best of ``repeat``), and
    the whole ``read_run``."""
    import mmap

    t0 = time.perf_counter()
    from watchdog.sources.wandb import proto
    from watchdog.sources.wandb.framing import Frames
    imp = time.perf_counter() - t0
    best, out = float("inf"), {}
    for _ in range(repeat):
        t = time.perf_counter()
        for f in files:
            items = []
            with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                for p in Frames(f, m).payloads():
                    got = proto.record(p)
                    if got and got[0] == proto.STATS:
                        ts, its = proto.stats(got[1])
                        items += [(round(ts, 6), k.decode(), float(v)) for k, v in its
                                  if k.startswith(b"gpu.")]
            out[f] = items
        best = min(best, time.perf_counter() - t)
    from watchdog.sources.wandb import read_run

    whole = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for f in files:
            read_run(f)
        whole = min(whole, time.perf_counter() - t)
    return {"import_s": imp, "read_s": best, "read_run_s": whole}, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wandb-python", help="a Python with wandb 0.18.7 installed")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    files = sorted(str(p) for p in REAL.glob("*/**/run-*.wandb"))
    if not files:
        print(f"no run files under {REAL}", file=sys.stderr)
        return 2
    size = sum(Path(f).stat().st_size for f in files) / 2**20
    print(f"{len(files)} run files, {size:.1f} MiB")
    mine, got = ours(files, a.repeat)
    n = sum(len(v) for v in got.values())
    print(f"watchdog reader: import {mine['import_s'] * 1e3:.0f} ms (framing and protobuf "
          f"fields only), GPU values {mine['read_s']:.2f} s (best of {a.repeat}; {n} "
          f"values), whole read_run {mine['read_run_s']:.2f} s")
    if a.wandb_python:
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            out = subprocess.run([a.wandb_python, "-c", _THEIRS, json.dumps(files),
                                  str(a.repeat), tmp.name], capture_output=True, text=True,
                                 check=True).stdout
            theirs = json.loads(out.strip().splitlines()[-1])
            other = json.loads(Path(tmp.name).read_text())
        same = all([tuple(x) for x in other[f]] == got[f] for f in files)
        print(f"wandb {theirs['version']} reader: import {theirs['import_s'] * 1e3:.0f} ms, "
              f"GPU values {theirs['read_s']:.2f} s (best of {a.repeat})")
        print(f"same values, item for item: {same}; ratio ours / W&B's: "
              f"{mine['read_s'] / theirs['read_s']:.2f}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
