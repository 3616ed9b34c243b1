"""Inference servers are not stalls: recognised by command line live, by rhythm in a log.

The rule side (stall silent on ``serving``, the rhythm of a log) is in
``rules/tests/stall_serving.yaml``; here: reading ``/proc``, the configurable word list, the
simulator's look-alike end to end, and that no command line is ever kept (secrets).
"""

from __future__ import annotations

import json

import pytest

from watchdog.cli import main
from watchdog.records import ProcessInfo
from watchdog.serving import SERVING_PATTERNS, matcher, serving_value
from watchdog.sources.nvml.procs import describe


def _proc(root, pid, comm, cmdline: list[str] | None):
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    if cmdline is not None:
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")


@pytest.mark.parametrize(("comm", "cmdline", "serving"), [
    ("python", ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], True),
    ("python3", ["/usr/bin/python3", "-m", "sglang.launch_server", "--port", "30000"], True),
    ("vllm", ["/opt/venv/bin/vllm", "serve", "meta-llama/Llama-3-8B"], True),
    ("tritonserver", ["tritonserver", "--model-repository=/models"], True),
    ("text-generation", ["text-generation-launcher", "--model-id", "x"], True),
    ("ollama", ["/usr/local/bin/ollama", "serve"], True),
    ("python", ["python", "train.py", "--config", "vllm_like_name_is_not_a_word.yaml"], False),
    ("torchrun", ["torchrun", "--nproc_per_node=8", "pretrain_gpt.py"], False),
    ("python", None, False),  # cmdline unreadable: the name alone does not serve
])
def test_serving_processes_by_name_and_command_line(tmp_path, comm, cmdline, serving):
    _proc(tmp_path, 42, comm, cmdline)
    assert describe(42, 100.0, str(tmp_path)).serving is serving


def test_vanished_process_is_unknown(tmp_path):
    assert describe(999999, None, str(tmp_path)).serving is None


def test_command_line_is_never_kept(tmp_path):
    """Arguments may hold secrets (an API key): only the verdict is kept."""
    _proc(tmp_path, 7, "python", ["python", "-m", "vllm.entrypoints.openai.api_server",
                                  "--api-key", "sk-SECRET-123"])
    p = describe(7, 1.0, str(tmp_path))
    assert p.serving is True and "sk-SECRET-123" not in json.dumps(p.to_dict())


def test_the_word_list_is_configurable(tmp_path):
    _proc(tmp_path, 8, "python", ["python", "-m", "my_llm_server"])
    assert describe(8, 1.0, str(tmp_path)).serving is False
    mine = matcher((*SERVING_PATTERNS, "my_llm_server"))
    assert describe(8, 1.0, str(tmp_path), serving_pattern=mine).serving is True


def test_serving_value_per_reading():
    trainer = ProcessInfo(pid=1, name="python", serving=False)
    server = ProcessInfo(pid=2, name="python", serving=True)
    unknown = ProcessInfo(pid=3)
    assert serving_value(None) is None
    assert serving_value(()) == 0.0
    assert serving_value((trainer,)) == 0.0
    assert serving_value((trainer, server)) == 1.0
    assert serving_value((trainer, unknown)) is None


@pytest.mark.slow
def test_simulated_inference_server_raises_no_stall(capsys):
    """Before: the vLLM look-alike (idle for up to an hour between bursts) paged stall."""
    assert main(["replay", "sim:inference_server", "--duration", "2h", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["incidents"] == []
    assert main(["check", "--json", "--source", "sim:inference_server"]) == 0


def test_simulated_trainer_that_stops_is_still_a_stall(capsys):
    main(["replay", "sim:stall@35m", "--duration", "45m", "--interval", "5s", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert [i["kind"] for i in doc["incidents"]] == ["stall"]
