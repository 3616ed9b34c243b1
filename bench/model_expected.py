"""The features each unnamed simulated fault moves (``sim:power_mismatch`` and the
others of ``watchdog.sources.sim.faults_unnamed``): an anomaly on a GPU in such a fault is
explained when its explanation's first feature is one of these. Shared by
``model_bench.py`` and ``model_jobs.py``."""

EXPECTED = {
    "power_mismatch": {"power_frac", "peer_power", "power_slope", "own_power"},
    "slow_no_reason": {"sm_clock_frac", "peer_sm_clock", "sm_clock_std",
                       "sm_clock_unexplained"},
    "temp_drift": {"temp_mean", "temp_slope", "peer_temp", "peer_temp_slope", "own_temp",
                   "peer_temp_drift"},
    "hbm_sag": {"mem_clock_frac", "peer_mem_clock"},
    "bursty_util": {"util_std", "util_mean", "peer_util", "peer_util_std",
                    "peer_util_drops"},
}
