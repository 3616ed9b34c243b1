"""``watchdog check``: a one-shot health probe (Nagios exit codes 0/1/2/3).

* :mod:`watchdog.check.probe`: collect a short burst of samples from any source.
* :mod:`watchdog.check.judge`: pure verdict logic over that burst.
* :mod:`watchdog.check.table` / :mod:`watchdog.check.report`: terminal table and JSON.

Standard library only on this path (no pandas, no scikit-learn): start-up time matters for a
probe that Slurm or Kubernetes runs every few seconds.
"""
