"""A wheel built from the repository works from any directory, rules included.

Builds the wheel (``pip wheel --no-deps``), installs it into a fresh virtual environment
and runs ``watchdog check --source sim --json`` there from a temporary directory. The
dependencies are borrowed from the test environment through a ``.pth`` file so the test
needs no network; the test asserts that the ``watchdog`` package really comes from the
fresh environment, not from this checkout.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(REPO)],
        check=True, capture_output=True, text=True,
    )
    (whl,) = out.glob("nvml_watchdog-*.whl")
    return whl


def test_wheel_contains_the_default_rules_and_no_tests(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    rules = [n for n in names if n.startswith("watchdog/default_rules/") and n.endswith(".yaml")]
    assert rules, "the wheel ships no default rules"
    assert any(n.startswith("watchdog/default_rules/tests/") for n in rules)
    assert not any(n.startswith("tests/") for n in names)
    assert "watchdog/dashboards/nvml-watchdog.json" in names  # rules export --grafana


def test_installed_wheel_runs_check_from_another_directory(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    purelib = Path(subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    # Install the wheel by unpacking it (what pip does for a pure-Python wheel) and write
    # the console script; then borrow the dependencies from this environment.
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                    "--target", str(purelib), str(wheel)], check=True)
    deps = [p for p in (*site.getsitepackages(), sysconfig.get_paths()["purelib"])
            if Path(p).is_dir()]
    (purelib / "zz_borrowed_deps.pth").write_text("\n".join(deps) + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    probe = subprocess.run(
        [str(py), "-c", "import watchdog, importlib.resources as r; print(watchdog.__file__);"
         "print(sorted(p.name for p in r.files('watchdog.default_rules').iterdir()))"],
        cwd=work, check=True, capture_output=True, text=True)
    first, rules = probe.stdout.splitlines()[:2]
    assert first.startswith(str(purelib)), f"watchdog imported from {first}, not the wheel"
    assert ".yaml" in rules
    run = subprocess.run([str(py), "-m", "watchdog", "check", "--source", "sim", "--json"],
                         cwd=work, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["status"] == "OK" and len(report["gpus"]) == 8


def test_installed_wheel_replays_with_its_own_rules(wheel: Path, tmp_path: Path) -> None:
    """The shipped rules come from the installed package, not from a checkout's rules/."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                    "--target", str(target), str(wheel)], check=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import watchdog.detect.loader as l;"
            "print(l.default_rules_dir()); from watchdog.cli import main;"
            "raise SystemExit(main(['replay', 'sim:comm_hang', '--duration', '20m', '--json']))")
    run = subprocess.run([sys.executable, "-c", code, str(target)], cwd=work,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    where, doc = run.stdout.split("\n", 1)
    assert where.startswith(str(target))
    assert [i["kind"] for i in json.loads(doc)["incidents"]] == ["comm_hang"]


def test_installed_wheel_exports_the_fleet_rules(wheel: Path, tmp_path: Path) -> None:
    """`watchdog rules export --prometheus` works from an installed wheel (package data)."""
    assert "watchdog/default_rules/prometheus/fleet.yml" in zipfile.ZipFile(wheel).namelist()
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                    "--target", str(target), str(wheel)], check=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from watchdog.cli import main;"
            "raise SystemExit(main(['rules', 'export', '--prometheus']))")
    run = subprocess.run([sys.executable, "-c", code, str(target)], cwd=work,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (REPO / "rules" / "prometheus" / "fleet.yml").read_text()
