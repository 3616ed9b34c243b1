"""The one pipeline: source -> windows -> detectors -> alert state -> notification.

``watchdog run`` (:mod:`watchdog.pipeline.live`) and ``watchdog replay``
(:mod:`watchdog.pipeline.replay`) compose the same parts; only the clock differs (the
wall clock, or the recording's own timestamps). Commands parse arguments and print;
everything between the samples and the incidents lives here.
"""
