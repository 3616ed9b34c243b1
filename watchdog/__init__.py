"""nvml-watchdog: GPU hang, stall, throttle and fault detection for training nodes.

The import name is ``watchdog``; the distribution is ``nvml-watchdog`` (the PyPI name
``watchdog`` belongs to the filesystem-events library, so install this into its own
virtual environment).
"""

__version__ = "0.2.0"
