"""Runbooks: one page per incident kind, every rule's ``runbook:`` resolves to one, in the
checkout and in an installed wheel, and no documentation points outside the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from watchdog.detect.loader import load_rules, parse_rules_text
from watchdog.errors import InputError
from watchdog.incident import KINDS

REPO = Path(__file__).resolve().parent.parent
RUNBOOKS = REPO / "docs" / "runbooks"
SECTIONS = ("## What it means", "## What to look at first", "## How to silence it",
            "## When to drain the node")


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_a_runbook_with_its_sections(kind: str) -> None:
    page = RUNBOOKS / f"{kind}.md"
    assert page.is_file(), f"no runbook for {kind}"
    text = page.read_text()
    for s in SECTIONS:
        assert s in text, f"{page.name}: missing {s!r}"
    assert f"--kind {kind} " in text  # the silence line names this kind
    assert f"[{kind}.md]({kind}.md)" in (RUNBOOKS / "README.md").read_text()


def test_every_shipped_rule_points_at_its_kinds_runbook() -> None:
    rules = list(load_rules())
    assert rules
    for r in rules:
        assert r.runbook, f"{r.where()}: rule {r.name} has no runbook"
        path = Path(r.runbook)
        assert path.is_absolute() and path.is_file(), f"{r.where()}: {r.runbook}"
        assert path.name == f"{r.kind}.md", f"{r.where()}: {r.name} -> {path.name}"


def test_every_rule_file_in_the_checkout_resolves_into_docs() -> None:
    for r in load_rules([REPO / "rules"]):
        assert Path(r.runbook or "").parent == RUNBOOKS, r.where()


RULE = """\
- name: hot
  kind: thermal_throttle
  severity: warning
  condition: max(temperature.gpu, 30s) > 85
  runbook: {runbook}
"""


def test_a_relative_runbook_is_resolved_against_the_rule_file(tmp_path: Path) -> None:
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "hot.md").write_text("# hot\n")
    f = tmp_path / "site" / "hot.yaml"
    f.parent.mkdir()
    f.write_text(RULE.format(runbook="../pages/hot.md"))
    (rule,) = load_rules([f])
    assert rule.runbook == str(tmp_path / "pages" / "hot.md")


def test_a_dead_runbook_path_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "hot.yaml"
    f.write_text(RULE.format(runbook="pages/nope.md"))
    with pytest.raises(InputError, match=rf"^{re.escape(str(f))}:5: rule hot: .*no such file"):
        load_rules([f])


def test_a_url_runbook_is_kept_as_written() -> None:
    (rule,) = parse_rules_text(RULE.format(runbook="https://wiki.example.org/gpu/hot"))
    assert rule.runbook == "https://wiki.example.org/gpu/hot"


def _links(md: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", md.read_text())


@pytest.mark.parametrize("md", [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_doc_links_stay_inside_the_repository_and_exist(md: Path) -> None:
    for link in _links(md):
        if re.match(r"^[a-z]+://", link) or link.startswith("#"):
            continue
        target = (md.parent / link.split("#")[0]).resolve()
        assert target.is_relative_to(REPO), f"{md.name}: {link} leaves the repository"
        assert target.exists(), f"{md.name}: {link} does not exist"
    text = md.read_text()
    assert "../shared" not in text and "example.invalid" not in text, md.name


def test_no_packaging_or_unit_url_points_at_example_invalid() -> None:
    for f in ("pyproject.toml", "config/nvml-watchdog.service", "config/watchdog.yaml"):
        assert "example.invalid" not in (REPO / f).read_text(), f


def runbook_commands() -> list[str]:
    """The ``$ watchdog …`` lines of every runbook's console blocks."""
    out: list[str] = []
    for md in sorted(RUNBOOKS.glob("*.md")):
        inside = False
        for line in md.read_text().splitlines():
            if line.startswith("```"):
                inside = line.strip() == "```console"
            elif inside and line.startswith("$ "):
                out.append(line[2:].strip())
    return out


def test_runbook_commands_are_silence_lines_for_the_service_config() -> None:
    cmds = runbook_commands()
    assert len(cmds) == 2 * len(KINDS)
    for c in cmds:
        # node-level kinds (agent) silence the kind on the node, without --gpu
        assert re.fullmatch(r'watchdog silence (add (--gpu \d+ )?--kind \w+ --for \d+h '
                            r'--comment "[^"]+"|list) --config /etc/nvml-watchdog/watchdog.yaml',
                            c), c


@pytest.mark.slow
def test_runbook_commands_run(tmp_path: Path) -> None:
    """Each silence line, against a scratch state directory (the config relocated)."""
    import os
    import shlex
    import subprocess
    import sys

    probe = subprocess.run([sys.executable, "-m", "watchdog", "silence", "--help"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("`watchdog silence` is not in this build yet (the alerting issue adds it)")
    cfg = tmp_path / "watchdog.yaml"
    cfg.write_text(f"source: nvml\nstate_dir: {tmp_path / 'state'}\n")
    from watchdog.store import connect

    connect(tmp_path / "state").close()  # the service's state: silences go only there
    env = {**os.environ, "HOME": str(tmp_path)}
    for c in runbook_commands():
        args = shlex.split(c.replace("/etc/nvml-watchdog/watchdog.yaml", str(cfg)))
        r = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 0 and "Traceback" not in r.stderr, f"{c}: {r.stderr}"


def test_a_shipped_rule_copied_elsewhere_keeps_its_runbook(tmp_path: Path) -> None:
    """An operator copies rules/memory.yaml to /etc to edit a threshold."""
    f = tmp_path / "memory.yaml"
    f.write_text((REPO / "rules" / "memory.yaml").read_text())
    (rule,) = load_rules([f])
    assert Path(rule.runbook or "") == RUNBOOKS / "memory_pressure.md"
