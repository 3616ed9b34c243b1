"""Human-facing output of ``watchdog replay``: the incident table, the timeline plot and
terminal progress. Each module imports its heavy dependency (matplotlib, tqdm) lazily so
that importing this package costs nothing on the ``check`` start-up path.
"""
