"""The simulated fleet: nodes of one multi-node job (``sim:node(id=K)``: one seed = one job,
its schedule and Slurm id; the id = the node, its GPUs) and the rank crash the fleet rules
must attribute (``rank_crash``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from watchdog.errors import InputError
from watchdog.sources.sim import SCENARIOS, SimSource

START = 1_750_000_000.0


def test_nodes_of_one_job_share_its_schedule_and_id_but_not_their_gpus() -> None:
    a = SimSource.from_spec("sim:node(id=1)", seed=7, start=START)
    b = SimSource.from_spec("sim:node(id=2)", seed=7, start=START)
    assert a.job.slurm_job_id == b.job.slurm_job_id
    assert a.legit_waits(7200.0) == b.legit_waits(7200.0)  # they checkpoint together
    assert not set(a.uuids) & set(b.uuids)
    pa = [s.values["power.draw"] for s in a.sample(START + 600.0)]
    pb = [s.values["power.draw"] for s in b.sample(START + 600.0)]
    assert pa != pb
    assert abs(sum(pa) / len(pa) - sum(pb) / len(pb)) < 0.05 * sum(pa) / len(pa)


def test_without_a_node_item_the_node_is_what_it_always_was() -> None:
    plain = SimSource.from_spec("sim:comm_hang", seed=3, start=START)
    from watchdog.sources.sim.source import make_uuid

    assert plain.uuids == [make_uuid(3, g) for g in range(8)]
    assert plain.job.gpu_seed == plain.job.seed == 3


@pytest.mark.parametrize(("spec", "needle"), [
    ("sim:node(id=0)", "id must be a number"),
    ("sim:node(id=x)", "id must be a number"),
    ("sim:node", r"write node\(id=K\) once"),
    ("sim:node(id=1),node(id=2)", r"write node\(id=K\) once"),
    ("sim:node(id=1)@5m", r"write node\(id=K\) once"),
    ("sim:node(id=1,gpus=3)", r"write node\(id=K\) once"),
])
def test_a_bad_node_item_is_one_line(spec: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        SimSource.from_spec(spec, start=START)


def test_a_rank_crash_idles_every_gpu_frees_memory_and_ends_the_processes() -> None:
    src = SimSource.from_spec("sim:node(id=4),rank_crash(for=10m)@2m", seed=7, start=START)
    before, during, after = (src.sample(START + t) for t in (110.0, 400.0, 1000.0))
    assert all(s.processes and s.values["utilization.gpu"] == 100 for s in before)
    assert all(s.processes == () and s.values["utilization.gpu"] == 0 for s in during)
    assert all(s.values["memory.used"] < 10 for s in during)
    assert all(s.values["power.draw"] < 1.2 * 80 for s in during)
    assert all(s.processes for s in after)
    assert src.ground_truth() == []  # alone, an idle node: only the fleet can tell
    assert "rank_crash" in SCENARIOS


@pytest.mark.slow
def test_a_crashed_node_alone_raises_no_incident() -> None:
    out = subprocess.run([sys.executable, "-m", "watchdog", "replay",
                          "sim:node(id=4),rank_crash@5m", "--duration", "30m", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["incidents"] == []
