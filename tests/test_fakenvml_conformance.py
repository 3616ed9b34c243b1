"""The fake NVML must not drift from the real library: every entry point it provides is
looked up by nvidia-ml-py's own binding code, and takes the number of arguments the
binding passes to it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pynvml
import pytest

from watchdog.testing.fakenvml import FUNCTIONS
from watchdog.testing.fakenvml.library import _Impl


def _binding_calls() -> dict[str, set[int]]:
    """C function name -> the argument counts nvidia-ml-py calls it with."""
    tree = ast.parse(Path(pynvml.__file__).read_text())
    out: dict[str, set[int]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        names: dict[str, set[str]] = {}  # local variable -> C function names
        for node in ast.walk(fn):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "_nvmlGetFunctionPointer"
                    and node.value.args and isinstance(node.value.args[0], ast.Constant)):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        names.setdefault(t.id, set()).add(node.value.args[0].value)
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in names:
                for c_name in names[node.func.id]:
                    out.setdefault(c_name, set()).add(len(node.args))
    return out


CALLS = _binding_calls()


def test_binding_parser_sees_known_calls():
    # guards the parser itself: a broken parser would make the checks below vacuous
    assert CALLS["nvmlDeviceGetFieldValues"] == {3}
    assert CALLS["nvmlDeviceGetRemappedRows"] == {5}
    assert CALLS["nvmlDeviceGetHandleByIndex_v2"] == {2}
    assert len(CALLS) > 300


@pytest.mark.parametrize("name", FUNCTIONS)
def test_fake_function_exists_in_binding_with_same_arity(name):
    assert name in CALLS, f"{name}: nvidia-ml-py never looks this function up"
    params = inspect.signature(getattr(_Impl, name)).parameters
    arity = len(params) - 1  # minus self
    assert arity in CALLS[name], f"{name}: fake takes {arity} args, binding passes {CALLS[name]}"


def test_fake_covers_every_call_gpustat_makes():
    src = (Path(inspect.getfile(pynvml)).parent / "gpustat" / "core.py").read_text()
    used = {n.attr for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.Attribute) and getattr(n.value, "id", None) == "N"
            and n.attr.startswith("nvml") and n.attr[4:5].isupper()}
    # python wrapper name -> C entry points it looks up
    tree = ast.parse(Path(pynvml.__file__).read_text())
    defs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    needed: set[str] = set()
    todo = list(used)
    while todo:
        f = defs.get(todo.pop())
        if f is None:
            continue
        for node in ast.walk(f):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == "_nvmlGetFunctionPointer" and node.args \
                        and isinstance(node.args[0], ast.Constant):
                    needed.add(node.args[0].value)
                elif node.func.id in defs and node.func.id != f.name:
                    todo.append(node.func.id)
    assert {"nvmlDeviceGetName", "nvmlDeviceGetPowerUsage"} <= needed
    assert needed - set(FUNCTIONS) == set()
