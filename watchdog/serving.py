"""Is a GPU held by an inference server? From its processes' names and command lines.

A stall is a training job that was working and stopped; an inference server (vLLM,
Triton, TGI, SGLang, Ollama...) holding 90 % of memory and idle between requests waits by
design. NVML names the processes on a GPU; ``/proc/<pid>/cmdline`` says what they run. vLLM
and SGLang usually run as ``python`` (``python -m vllm.entrypoints.openai.api_server``,
``python -m sglang.launch_server``), so the process name alone is not enough: the command
line is matched word by word.

The result reaches the rules as the catalogue metric ``processes.serving`` (1 = a serving
process holds this GPU, 0 = processes known and none serves, missing = not known, e.g. a
log without process names) and the derived signal ``serving``. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.records import ProcessInfo

SERVING_PATTERNS: tuple[str, ...] = (
    "vllm", "tritonserver", "text-generation-launcher", "text-generation-server", "sglang",
    "ollama", "lmdeploy", "llama-server", "trtllm-serve", "torchserve", "mlc_llm",
)
"""Default words that mark a serving process: a program name (``tritonserver``) or a
Python package (``vllm`` in ``-m vllm.entrypoints...`` or ``vllm serve``)."""


def matcher(patterns: Iterable[str] = SERVING_PATTERNS) -> re.Pattern[str]:
    """One regex matching any pattern as a whole word of a command line: after the start,
    white space, ``/`` (a path) or ``=``; before the end, white space, ``.`` (a module
    path: ``vllm.entrypoints``), ``:`` or ``/``. ``vllm_tools`` is another word."""
    words = "|".join(re.escape(p.strip()) for p in patterns if p.strip())
    if not words:
        return re.compile(r"(?!x)x")  # no pattern: nothing serves
    return re.compile(rf"(?:^|[\s/=])(?:{words})(?:$|[\s.:/])", re.IGNORECASE)


DEFAULT = matcher()


def serving_value(processes: Sequence[ProcessInfo] | None) -> float | None:
    """``processes.serving`` for one reading: 1.0 when a process is marked serving
    (:attr:`ProcessInfo.serving`, set from ``/proc`` by the NVML source), 0.0 when the
    processes are known and none is, None when they are not known."""
    if processes is None:
        return None
    if any(p.serving for p in processes):
        return 1.0
    return 0.0 if all(p.serving is not None for p in processes) else None
