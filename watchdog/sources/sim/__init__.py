"""The simulated node behind ``--source sim[:SCENARIO,…]``.

* ``models.py``: GPU model specs with real numbers (H100 SXM 80GB, A100 PCIe 40GB).
* ``job.py``: the healthy training job (start-up, two busy power phases, micro-dips,
  checkpoints, caching allocator, limiter bits).
* ``faults.py``: one fault per scenario and the default placement of combined ones; the
  faults by family in ``faults_job.py``, ``faults_slow.py``, ``faults_hw.py`` and
  ``faults_unnamed.py``, their base class in ``faults_base.py``.
* ``spec.py``: the ``sim:…`` spec grammar.
* ``node.py``: thermal model, integrated counters, the 1 s grid.
* ``source.py``: :class:`SimSource`, the ``LiveSource``, plus ``run()`` for fast bulk
  traces and ``ground_truth()`` for scoring.

Standard library only (no numpy, no pandas): this is on the ``watchdog check`` path.
"""

from watchdog.sources.sim.faults import SCENARIOS, scenarios_for
from watchdog.sources.sim.models import MODELS
from watchdog.sources.sim.source import GroundTruth, SimSource

__all__ = ["MODELS", "SCENARIOS", "GroundTruth", "SimSource", "scenarios_for"]
