"""Every real W&B run in ``../shared/real-wandb`` is read directly (its file, its run
folder, the whole folder) and gives the same incidents as its derived CSV. Skipped, with
the reason, when the folder is not beside the repository (the data is never copied in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
REAL_WANDB = Path(os.environ.get("WATCHDOG_REAL_WANDB", REPO.parent / "shared" / "real-wandb"))

pytestmark = [pytest.mark.slow, pytest.mark.real_telemetry]


def _runs() -> list[Path]:
    return sorted(REAL_WANDB.glob("*/**/run-*.wandb")) if REAL_WANDB.is_dir() else []


@pytest.fixture(scope="module")
def runs() -> list[Path]:
    if not _runs():
        pytest.skip(f"real W&B runs not found at {REAL_WANDB}")
    return _runs()


def _key(inc) -> tuple:  # type: ignore[no-untyped-def]
    return (inc.kind, inc.severity, tuple(inc.gpus), inc.rule, inc.summary)


def _times(inc) -> list[float]:  # type: ignore[no-untyped-def]
    return [t if t is not None else -1.0 for t in (inc.started_at, inc.fired_at,
                                                  inc.resolved_at)]


def test_each_run_file_and_its_derived_csv_give_the_same_incidents(runs, tmp_path):
    """The derived CSV has no GPU name: its folder gets the run's metadata (a link, not
    a copy), as a user keeps an API export beside ``wandb-metadata.json``."""
    from watchdog.detect import load_rules
    from watchdog.pipeline.replay import ReplayOptions, replay_inputs

    rules = load_rules(None)
    total = 0
    for f in runs:
        rid = f.stem
        csv = REAL_WANDB / f.relative_to(REAL_WANDB).parts[0] / "derived" / \
            f"{rid}.system-metrics.csv"
        here = tmp_path / rid
        here.mkdir()
        (here / csv.name).symlink_to(csv)
        (here / "wandb-metadata.json").symlink_to(f.parent / "files" / "wandb-metadata.json")
        a = replay_inputs([str(f)], rules, ReplayOptions())[0]
        b = replay_inputs([str(here / csv.name)], rules, ReplayOptions())[0]
        # the CSV's times are the file's rounded to the millisecond (either way at .5)
        assert np.allclose(a.frame["ts"], b.frame["ts"], rtol=0, atol=0.0015), rid
        cols = ["ts", "uuid"]
        assert a.frame.drop(columns=cols).equals(b.frame.drop(columns=cols)), rid
        assert [_key(i) for i in a.incidents] == [_key(i) for i in b.incidents], rid
        assert np.allclose([_times(i) for i in a.incidents],
                           [_times(i) for i in b.incidents], rtol=0, atol=0.0015), rid
        total += len(a.incidents)
    assert len(runs) == 25 and total > 0


def test_the_whole_folder_and_each_run_folder_replay_directly(runs):
    r = subprocess.run([sys.executable, "-m", "watchdog", "replay", str(REAL_WANDB), "--json"],
                       capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert sorted(s["path"] for s in doc["sources"]) == sorted(str(f) for f in runs)
    assert all(s["samples"] > 0 and s["gpus"] >= 1 for s in doc["sources"])
    codes = {Path(s["path"]).stem: s["exit_code"] for s in doc["sources"]}
    assert codes["run-10bcr0n5"] == 1 and codes["run-jz259abw"] == 0  # the OOM run; a clean one
    oom = [i for i in doc["incidents"] if i["host"] == "run-10bcr0n5"]
    assert any("OutOfMemoryError" in c["text"] for i in oom for c in i["console"])
    for i in doc["incidents"]:
        assert len(i["console"]) <= 6 and all(len(c["text"]) <= 240 for c in i["console"])
    for f in runs[:3]:  # a run folder names its run
        one = subprocess.run([sys.executable, "-m", "watchdog", "replay", str(f.parent),
                              "--json"], capture_output=True, text=True, timeout=300,
                             check=True)
        assert [s["path"] for s in json.loads(one.stdout)["sources"]] == [str(f)]


def test_no_private_metadata_is_printed(runs):
    """Host names, user paths and command lines in the runs' metadata never appear in
    what replay prints (the GPU name is the only field read)."""
    private: set[str] = set()
    for f in runs:
        meta = json.loads((f.parent / "files" / "wandb-metadata.json").read_text())
        for k in ("host", "username", "program", "codePath", "root", "executable"):
            if isinstance(meta.get(k), str) and len(meta[k]) >= 4:
                private.add(meta[k])
    folder = runs[0].parents[1]
    r = subprocess.run([sys.executable, "-m", "watchdog", "replay", str(folder)],
                       capture_output=True, text=True, timeout=300, check=False)
    out = r.stdout + r.stderr
    assert private and not [p for p in private if p in out]
