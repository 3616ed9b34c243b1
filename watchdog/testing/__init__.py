"""Test doubles shipped with the package so every test runs the real nvidia-ml-py code.

``watchdog.testing.fakenvml`` replaces the C library *below* nvidia-ml-py
(``pynvml.nvmlLib``): the binding builds its ctypes arguments exactly as it would for
``libnvidia-ml.so.1`` and the fake fills them and returns NVML status codes.
"""
