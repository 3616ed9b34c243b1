"""The bench of faults written into the real W&B runs (``bench/model_wandb.py``, section 5
of ``bench/model_bench.py``) and the model benches' results file (``bench/model_results.py``).
The bench's test is skipped without ``../shared/real-wandb``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import model_results  # noqa: E402

WANDB = REPO.parent / "shared" / "real-wandb"


@pytest.mark.slow
@pytest.mark.skipif(not (WANDB / "Luo-feng-hitsz__TRAVEL").is_dir(),
                    reason=f"no real W&B runs at {WANDB}")
def test_faults_written_into_a_real_run_are_found_and_its_untouched_replay_is_quiet() -> None:
    """Luo-feng-hitsz/TRAVEL (4x A100 40GB at 15 s, an RL job): every fault class is
    written at both onsets; the rules find the hang, the stall and the throttle within
    their promise at both, the model never finds fewer, and the untouched run raises no
    anomaly. (Its power drops and drifts hide in the job's own swings: docs/model.md.)"""
    import model_wandb as MW

    from watchdog.detect import load_rules

    lines: list[str] = []
    ok = MW.wandb_injected(WANDB.parent, load_rules(), only="gu5nlvbe", say=lines.append)
    text = "\n".join(lines)
    assert "FALSE on the untouched run" not in text
    for fault in ("hang", "stall", "thermal"):
        row = next(ln for ln in lines if ln.strip().startswith(fault) and "rules alone" in ln)
        assert "rules alone   2/2   with the model   2/2" in row, row
    assert "false anomalies on the untouched runs 0" in text
    assert ok == text.rstrip().endswith("HOLDS")  # the verdict is the line's


def test_a_bench_run_replaces_its_own_section_of_the_results_file(tmp_path: Path) -> None:
    path = tmp_path / "model.md"
    model_results.write("python bench/a.py", "first\n", path)
    model_results.write("python bench/b.py --x", "other\n", path)
    model_results.write("python bench/a.py", "second\n", path)
    text = path.read_text()
    assert text.startswith("# The anomaly model: measured figures")
    assert text.count("## `python bench/a.py`") == 1 and "second" in text
    assert "first" not in text and "other" in text
    assert "- date: " in text and "- commit: " in text
