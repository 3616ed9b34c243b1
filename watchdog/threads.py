"""Math-library thread pools capped at one thread, before numpy is first imported.

Why: OpenBLAS (and OpenMP, MKL, BLIS) start one worker thread per core when numpy loads.
The agent and ``watchdog check`` compute on arrays of a few GPUs by a few hundred samples,
where those pools only cost: on a 16-core GPU host `watchdog check` spent 2.5 s of CPU
(0.44 s with the pools capped), on every node, from cron or a Slurm prolog. The command
line (:mod:`watchdog.cli`) imports this module first; a value the user set in the
environment is kept.
"""

from __future__ import annotations

import os

#: the variables each math library reads at load time for its pool size
POOL_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                  "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def cap() -> None:
    """Set every pool variable to 1 unless the user set it."""
    for var in POOL_VARIABLES:
        os.environ.setdefault(var, "1")


cap()
