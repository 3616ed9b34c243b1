"""Faults written into a recording's frame (:class:`~watchdog.testing.framelog.FrameLog`):
the injector's faults (:mod:`watchdog.testing.inject`, :mod:`~watchdog.testing.model_faults`)
go into a W&B run (or any log the readers read) without a copy on disk, as
``bench/model_wandb.py`` writes them into the real runs of ``../shared/real-wandb``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from wandb_helpers import node, write_run

from watchdog.detect import load_rules
from watchdog.pipeline.replay import ReplayOptions, open_input, replay_inputs, replay_recording
from watchdog.testing import inject
from watchdog.testing import model_faults as MF
from watchdog.testing.framelog import FrameLog


def test_a_frame_copy_replays_as_its_file_and_takes_a_fault(tmp_path: Path) -> None:
    run = write_run(tmp_path, "frm001", records=node(gpus=2, minutes=40.0, hang_at=999.0))
    before = run.read_bytes()
    rules = load_rules()
    (from_file,) = replay_inputs([str(run)], rules, ReplayOptions())
    rec = open_input(str(run), ReplayOptions(), in_parts=False)
    same = replay_recording(FrameLog(rec).recording(), rules, ReplayOptions())
    assert [(i.kind, i.gpus, i.started_at) for i in same.incidents] == \
        [(i.kind, i.gpus, i.started_at) for i in from_file.incidents]
    log = FrameLog(rec)
    onset = log.start + 20 * 60.0
    lab = inject.hang(log, onset, idle_w=60.0)
    assert lab.gpus == (0, 1) and lab.inserted_s >= 480.0
    assert log.end == pytest.approx(from_file.frame["ts"].max() + lab.inserted_s, abs=0.01)
    hung = (log.ts >= onset + 60) & (log.ts < lab.end)
    assert (log.values("utilization.gpu")[hung] == 100.0).all()
    assert np.nanmax(log.values("power.draw")[hung]) < 0.5 * 300.0
    faulted = replay_recording(log.recording(), rules, ReplayOptions())
    hangs = [i for i in faulted.incidents if i.kind == "comm_hang"]
    assert hangs and set(hangs[0].gpus) == {"0", "1"} and hangs[0].started_at >= onset
    assert run.read_bytes() == before  # the run file is only read


def test_the_model_faults_write_into_a_frame(tmp_path: Path) -> None:
    run = write_run(tmp_path, "frm002", records=node(gpus=2, minutes=40.0, hang_at=999.0))
    rec = open_input(str(run), ReplayOptions(), in_parts=False)
    log = FrameLog(rec)
    onset = log.start + 20 * 60.0
    lab = MF.slowdown(log, onset, 1, 0.65, duration=600.0)
    late = (log.gpu == 1) & (log.ts >= onset + 60) & (log.ts < lab.end)
    assert np.allclose(log.values("power.draw")[late], 0.65 * 301.0)
    assert (log.values("power.draw")[(log.gpu == 0) & (log.ts >= onset)] == 300.0).all()
    drift = FrameLog(rec)
    lab = MF.temp_drift(drift, onset, 0, 0.5, duration=600.0)
    at = (drift.gpu == 0) & (drift.ts >= onset + 590) & (drift.ts < lab.end)
    assert np.allclose(drift.values("temperature.gpu")[at], 70.0 + 0.5 * 590 / 60, atol=0.1)
    with pytest.raises(ValueError, match="no rows before the onset"):
        FrameLog(rec).insert(log.start - 100.0, 60.0)
