"""Job identity: what the node runs, on every metric and incident (watchdog/service/jobs.py,
the Kubernetes and Slurm readings in watchdog/sources/nvml/procs.py, the config's job:)."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog import config as config_mod
from watchdog.errors import InputError
from watchdog.records import ProcessInfo, Sample
from watchdog.service.jobs import Job, JobConfig, JobTracker, SampleTee, parse_config
from watchdog.sources.nvml import procs
from watchdog.sources.nvml.procs import describe, pod_from_cgroup, pod_names

UID = "1a2b3c4d-5e6f-7a8b-9c0d-112233445566"


def _proc(root: Path, pid: int, environ: bytes | None = None, cgroup: str | None = None) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text("python\n")
    if environ is not None:
        (d / "environ").write_bytes(environ)
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)


# --- what the node reads ------------------------------------------------------------------

@pytest.mark.parametrize("line", [
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}"
    ".slice/cri-containerd-" + "a" * 64 + ".scope",
    f"11:memory:/kubepods/burstable/pod{UID}/" + "b" * 64,
    f"0::/kubepods/pod{UID}",
])
def test_a_kubernetes_pod_uid_comes_from_the_cgroup_path(line: str) -> None:
    assert pod_from_cgroup(line + "\n") == UID


def test_no_pod_in_a_slurm_or_plain_cgroup() -> None:
    assert pod_from_cgroup("0::/system.slice/slurmstepd.scope/job_12/step_0\n") is None
    assert pod_from_cgroup("0::/kubepods.slice/kubepods-pod1.slice/x\n") is None
    assert pod_from_cgroup(None) is None


def test_namespace_and_pod_name_come_from_the_kubelets_log_folder(tmp_path: Path) -> None:
    pods = tmp_path / "pods"
    (pods / f"training_llama-worker-3_{UID}").mkdir(parents=True)
    (pods / "kube-system_coredns-1_00000000-0000-0000-0000-000000000000").mkdir()
    assert pod_names(UID, str(pods)) == ("training", "llama-worker-3")
    assert pod_names(UID, str(tmp_path / "none")) == (None, None)  # a node without it


def test_a_pods_folder_made_after_its_first_process_is_found_a_minute_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet may create a pod's log folder after the agent first sees its process:
    the miss is not cached for good (the pod's alerts went without its name), but the
    folder is not listed again before POD_RETRY_S either."""
    clock = [1000.0]
    monkeypatch.setattr(procs.time, "monotonic", lambda: clock[0])
    pods = tmp_path / "late"
    uid = "0b1c2d3e-0000-4000-8000-00000000abcd"
    assert pod_names(uid, str(pods)) == (None, None)
    (pods / f"ml_late-0_{uid}").mkdir(parents=True)
    clock[0] += procs.POD_RETRY_S - 1
    assert pod_names(uid, str(pods)) == (None, None)  # not listed again yet
    clock[0] += 2
    assert pod_names(uid, str(pods)) == ("ml", "late-0")
    (pods / f"ml_late-0_{uid}").rmdir()
    assert pod_names(uid, str(pods)) == ("ml", "late-0")  # found: kept


def test_describe_reads_slurm_run_and_kubernetes_pod(tmp_path: Path) -> None:
    _proc(tmp_path / "proc", 10, b"SLURM_JOB_ID=48213\0SLURM_RESTART_COUNT=2\0",
          "0::/system.slice/slurmstepd.scope/job_48213/step_0\n")
    p = describe(10, 1.0, str(tmp_path / "proc"), pods_root=str(tmp_path / "pods"))
    assert (p.job_id, p.job_run, p.pod_uid) == ("48213", "2", None)
    (tmp_path / "pods" / f"ml_trainer-0_{UID}").mkdir(parents=True)
    _proc(tmp_path / "proc", 11, None, f"0::/kubepods/besteffort/pod{UID}/" + "c" * 64 + "\n")
    q = describe(11, 1.0, str(tmp_path / "proc"), pods_root=str(tmp_path / "pods"))
    assert (q.job_id, q.pod_uid, q.pod_namespace, q.pod_name) == (None, UID, "ml", "trainer-0")


def test_a_recording_of_a_slurm_node_is_unchanged_by_the_new_fields() -> None:
    assert set(ProcessInfo(pid=1, job_id="7").to_dict()) == {
        "pid", "name", "used_memory_mib", "job_id", "container", "serving"}
    assert ProcessInfo(pid=1, pod_uid=UID).to_dict()["pod_uid"] == UID


# --- the tracker --------------------------------------------------------------------------

def _s(uuid: str, index: int, procs: tuple[ProcessInfo, ...] | None, lost: bool = False
       ) -> Sample:
    return Sample(ts=0.0, uuid=uuid, index=index, processes=procs, lost=lost)


SLURM = (ProcessInfo(pid=5, job_id="4242", job_run="1"),)


def test_a_gpu_keeps_its_job_after_its_process_died_then_forgets_it() -> None:
    t = JobTracker(hold_s=1800.0)
    t.observe(0.0, [_s("A", 0, SLURM), _s("B", 1, SLURM)])
    t.observe(60.0, [_s("A", 0, ()), _s("B", 1, None, lost=True)])  # crashed rank, lost GPU
    assert t.gpu_job("A") == Job("4242", "slurm", run="1")
    assert t.gpu_job("B") == Job("4242", "slurm", run="1")
    assert t.job_for(["A", "B"]) == Job("4242", "slurm", run="1")
    assert t.job_for(["A"]).run_id == "4242#1"
    t.observe(1861.0, [_s("A", 0, ()), _s("B", 1, None, lost=True)])
    assert t.gpu_job("A") is None and t.gpu_job("B") is None and t.jobs() == []


def test_another_jobs_process_moves_the_gpu_at_once() -> None:
    t = JobTracker()
    t.observe(0.0, [_s("A", 0, SLURM)])
    t.observe(1.0, [_s("A", 0, (ProcessInfo(pid=9, job_id="99"),))])
    assert t.gpu_job("A") == Job("99", "slurm")


def test_gpus_of_two_jobs_have_no_one_job_and_a_node_incident_takes_the_only_one() -> None:
    t = JobTracker()
    t.observe(0.0, [_s("A", 0, SLURM), _s("B", 1, (ProcessInfo(pid=9, job_id="99"),))])
    assert t.job_for(["A", "B"]) is None
    assert t.job_for(["A"]).id == "4242"
    assert t.job_for([]) is None  # a node-level incident on a node of two jobs
    one = JobTracker()
    one.observe(0.0, [_s("A", 0, SLURM), _s("B", 1, ())])
    assert one.job_for([]).id == "4242" and one.job_for(["B"]).id == "4242"
    assert [(j.id, gpus) for j, gpus in t.jobs()] == [("4242", [0]), ("99", [1])]


def test_a_kubernetes_pod_is_the_job_where_no_slurm_id_is_seen() -> None:
    t = JobTracker()
    t.observe(0.0, [_s("A", 0, (ProcessInfo(pid=3, pod_uid=UID, pod_namespace="ml",
                                            pod_name="w-0"),))])
    assert t.gpu_job("A") == Job(UID, "kubernetes", namespace="ml", pod="w-0")


def test_the_configs_id_wins_over_what_the_node_reads() -> None:
    t = JobTracker(JobConfig(id="train-7"))
    t.observe(0.0, [_s("A", 0, SLURM), _s("B", 1, ())])
    assert t.gpu_job("A") == t.gpu_job("B") == t.job_for([]) == Job("train-7", "config")
    assert t.status()["source"] == "config"


def test_id_env_reads_the_agents_environment() -> None:
    t = JobTracker(JobConfig(id_env="FLEET_JOB"), environ={"FLEET_JOB": "77"})
    assert t.gpu_job("A") == Job("77", "config")
    unset = JobTracker(JobConfig(id_env="FLEET_JOB"), environ={})
    unset.observe(0.0, [_s("A", 0, SLURM)])
    assert unset.gpu_job("A").id == "4242"  # nothing set: what the node reads
    bad = JobTracker(JobConfig(id_env="FLEET_JOB"), environ={"FLEET_JOB": "a b"})
    assert bad.problem and bad.gpu_job("A") is None


def test_id_file_is_re_read_as_a_scheduler_writes_and_removes_it(tmp_path: Path) -> None:
    f = tmp_path / "job"
    t = JobTracker(JobConfig(id_file=str(f)))
    t.observe(0.0, [_s("A", 0, SLURM)])
    assert t.gpu_job("A").id == "4242"  # no file: the node's own reading
    f.write_text("5150\n")
    t.observe(5.0, [_s("A", 0, SLURM)])
    assert t.gpu_job("A").id == "4242"  # re-read every 10 s of the agent's clock
    t.observe(10.0, [_s("A", 0, SLURM)])
    assert t.gpu_job("A") == Job("5150", "config")
    f.unlink()
    t.observe(20.0, [_s("A", 0, SLURM)])
    assert t.gpu_job("A").id == "4242"


def test_an_id_file_that_is_a_fifo_or_a_folder_is_a_problem_not_a_hang(tmp_path: Path) -> None:
    """input: a FIFO (no writer) or a folder at id_file is said once and never blocks the
    tick: the node's own reading stands."""
    import os

    for make in ("fifo", "dir"):
        f = tmp_path / make
        os.mkfifo(f) if make == "fifo" else f.mkdir()
        t = JobTracker(JobConfig(id_file=str(f)))
        t.observe(0.0, [_s("A", 0, SLURM)])
        assert t.gpu_job("A").id == "4242"
        assert t.problem == f"job.id_file {f}: not a regular file"


def test_the_tee_feeds_the_tracker_and_the_recorder_and_the_status() -> None:
    class Rec:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def open(self, host: str, devices: list) -> None:  # type: ignore[type-arg]
            self.calls.append("open")

        def write(self, now: float, samples: list) -> None:  # type: ignore[type-arg]
            self.calls.append("write")

        def close(self) -> None:
            self.calls.append("close")

    rec, status = Rec(), {}  # type: ignore[var-annotated]
    tee = SampleTee(JobTracker(), rec, status_to=status)
    tee.open("n", [])
    tee.write(0.0, [_s("A", 0, SLURM)])
    tee.close()
    assert rec.calls == ["open", "write", "close"]
    assert status["job"]["jobs"] == [{"id": "4242", "scheduler": "slurm", "run": "1",
                                      "namespace": None, "pod": None, "gpus": [0]}]


# --- the config -----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "want"), [
    ("job: {id: '4242'}\n", JobConfig(id="4242")),
    ("job: {id: 4242}\n", JobConfig(id="4242")),
    ("job: {id_env: SLURM_JOB_ID}\n", JobConfig(id_env="SLURM_JOB_ID")),
    ("job: {id_file: /run/nvml-watchdog/job}\n", JobConfig(id_file="/run/nvml-watchdog/job")),
])
def test_the_job_setting(tmp_path: Path, text: str, want: JobConfig) -> None:
    p = tmp_path / "w.yaml"
    p.write_text("source: sim\n" + text)
    assert config_mod.load(p).job == want


@pytest.mark.parametrize(("text", "needle"), [
    ("job: 4242\n", "job must be a mapping"),
    ("job: {id: '4242', id_env: X}\n", "exactly one of"),
    ("job: {}\n", "exactly one of"),
    ("job: {name: x}\n", "job must be a mapping"),
    ("job: {id: 'two words'}\n", "job.id 'two words'"),
    ("job: {id: ''}\n", "job.id ''"),
    ("job: {id_env: 'NOT-A-NAME'}\n", "not an environment variable name"),
    ("job: {id: [1]}\n", "must be a string"),
])
def test_a_bad_job_setting_is_one_line_naming_file_and_line(tmp_path: Path, text: str,
                                                            needle: str) -> None:
    p = tmp_path / "w.yaml"
    p.write_text("source: sim\n" + text)
    with pytest.raises(InputError) as e:
        config_mod.load(p)
    assert f"{p}:2:" in str(e.value) and needle in str(e.value) and "\n" not in str(e.value)


def test_parse_config_none_is_no_override() -> None:
    assert parse_config(None, "x") is None
