"""The shape of the code, pinned: layers that only import downwards, no import circles
(function-level imports included: they hide circles rather than remove them), one place
that builds the detector, one answer to "is this the simulator?", and no long module that
does not say why it is long.

The layers, top to bottom (a module may import its own layer and the ones below):

0. the command line (``cli``, ``__main__``)
1. ``commands``, ``config`` (the daemon's config file), ``testing`` (tools for tests)
2. ``service`` (the running agent), ``check`` (the probe), ``report`` (tables, plots)
3. ``pipeline`` (samples to incidents, for every command)
4. ``detect``, ``anomaly``, ``notify``, ``sources``, ``store``
5. the records and helpers every layer shares (``model``, ``incident``, ``catalogue``,
   ``units``, ``errors``, ``clock``, ``logs``, …)

``bench/`` sits above them all: a bench script may import any of the package and its
sibling scripts (by their plain names: each puts ``bench/`` on its path), the package never
imports a bench script, and the bench scripts have no import circle among them either.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "watchdog"
BENCH = PACKAGE.parent / "bench"
LAYERS = {"cli": 0, "__main__": 0, "commands": 1, "config": 1, "testing": 1, "service": 2,
          "check": 2, "report": 2, "pipeline": 3, "detect": 4, "anomaly": 4, "notify": 4,
          "sources": 4, "store": 4}
LONG = 450  # lines: longer modules open their docstring with "This module is long because"


def modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the watchdog modules it imports anywhere in its body."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    pkg = pkg[:len(pkg) - (node.level - 1)]
                    base = ".".join([*pkg, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith("watchdog"):
                    deps.add(t)
        graph[name] = deps
    return graph


def bench_imports() -> dict[str, set[str]]:
    """``bench.<script>`` -> the bench scripts and watchdog modules it imports anywhere."""
    mods = modules()
    scripts = {p.stem for p in BENCH.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for p in sorted(BENCH.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level \
                else []
            for t in names:
                if t.split(".")[0] in scripts:
                    deps.add(f"bench.{t.split('.')[0]}")
                while t and t.startswith("watchdog") and t not in mods:
                    t = t.rpartition(".")[0]
                if t in mods:
                    deps.add(t)
        deps.discard(f"bench.{p.stem}")
        graph[f"bench.{p.stem}"] = deps
    return graph


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], 5) if len(parts) > 1 else 5


def test_no_module_imports_a_layer_above_its_own() -> None:
    graph = imports(modules())
    up = [f"{m} (layer {layer(m)}) imports {d} (layer {layer(d)})"
          for m, deps in sorted(graph.items()) for d in sorted(deps) if layer(d) < layer(m)]
    assert up == []


def test_the_package_never_imports_a_bench_script() -> None:
    scripts = {p.stem for p in BENCH.glob("*.py")} | {"bench"}
    hits = []
    for name, path in sorted(modules().items()):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level \
                else []
            hits += [f"{name} imports {t}" for t in names if t.split(".")[0] in scripts]
    assert hits == []


def test_there_are_no_import_circles() -> None:
    """In watchdog/ and bench/ together."""
    graph = {**imports(modules()), **bench_imports()}
    # a package importing its own submodules (watchdog.detect -> watchdog.detect.engine) is
    # how a package exposes its API; the submodules importing the package back is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_detector_is_built_in_one_place() -> None:
    """``Detector(`` appears once under watchdog/ (docstrings included): the pipeline core
    builds it for every command."""
    hits = [f"{p.relative_to(PACKAGE.parent)}:{i}" for p in sorted(PACKAGE.rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if "Detector(" in line]
    assert hits == ["watchdog/pipeline/core.py:" + hits[0].rsplit(":", 1)[-1]], hits


def test_one_answer_to_is_this_the_simulator() -> None:
    """Only ``sources.is_sim`` decides (``startswith("sim")`` would also take simple.csv)."""
    offenders = []
    for p in sorted(PACKAGE.rglob("*.py")):
        text = p.read_text()
        for i, line in enumerate(text.splitlines(), 1):
            if 'startswith("sim' in line and \
                    "sources/__init__.py" not in str(p) and "sources/sim/spec.py" not in str(p):
                offenders.append(f"{p.relative_to(PACKAGE.parent)}:{i}: {line.strip()}")
    assert offenders == []
    defs = [p for p in PACKAGE.rglob("*.py") if "def is_sim(" in p.read_text()]
    assert [p.relative_to(PACKAGE.parent).as_posix() for p in defs] == \
        ["watchdog/sources/__init__.py"]


def test_a_long_module_says_why_it_is_long() -> None:
    long = []
    for p in sorted(PACKAGE.rglob("*.py")):
        text = p.read_text()
        n = text.count("\n")
        doc = ast.get_docstring(ast.parse(text)) or ""
        if n > LONG and not doc.startswith("This module is long because"):
            long.append(f"{p.relative_to(PACKAGE.parent)}: {n} lines")
    assert long == []
