"""Process details from /proc: Slurm job id, container id, unreadable is None."""

from __future__ import annotations

from watchdog.sources.nvml.procs import describe, job_from_environ, parse_cgroup

DOCKER = "3f4e" + "a" * 60


def _proc(root, pid, comm=None, environ=None, cgroup=None):
    d = root / str(pid)
    d.mkdir(parents=True)
    if comm is not None:
        (d / "comm").write_text(comm)
    if environ is not None:
        (d / "environ").write_bytes(environ)
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)


def test_slurm_job_from_environ(tmp_path):
    _proc(tmp_path, 10, "python\n", b"HOME=/root\0SLURM_JOB_ID=48213\0SLURM_STEP_ID=0\0",
          "0::/user.slice/user-1000.slice/session-3.scope\n")
    p = describe(10, 512.0, str(tmp_path))
    assert (p.pid, p.name, p.used_memory_mib, p.job_id) == (10, "python", 512.0, "48213")
    assert (p.job_from, p.job_note) == ("environ", None)


def test_the_cgroups_job_wins_over_the_environment(tmp_path):
    """A user can set SLURM_JOB_ID to another job's id; the job_<id> cgroup Slurm made
    cannot be chosen: it wins, and the claim is a note."""
    _proc(tmp_path, 10, "python\n", b"SLURM_JOB_ID=48213\0SLURM_RESTART_COUNT=3\0",
          "0::/system.slice/slurmstepd.scope/job_99/step_0/user/task_0\n")
    p = describe(10, 512.0, str(tmp_path))
    assert (p.job_id, p.job_run, p.job_from) == ("99", None, "cgroup")
    assert p.job_note == "pid 10: SLURM_JOB_ID 48213 is not its cgroup's job 99: dropped"


def test_slurm_job_from_cgroup_when_environ_unreadable(tmp_path):
    _proc(tmp_path, 11, "torchrun\n", None,
          "0::/system.slice/slurmstepd.scope/job_4711/step_batch/user/task_0\n")
    p = describe(11, None, str(tmp_path))
    assert (p.job_id, p.container) == ("4711", None)


def test_cgroup_v1_slurm_and_docker_container():
    assert parse_cgroup("4:memory:/slurm/uid_1000/job_321/step_0\n") == ("321", None)
    assert parse_cgroup(f"0::/system.slice/docker-{DOCKER}.scope\n") == (None, DOCKER)
    assert parse_cgroup(f"0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{DOCKER}.scope")\
        == (None, DOCKER)
    assert parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n") == (None, None)


def test_environ_without_slurm():
    assert job_from_environ(b"PATH=/bin\0") is None
    assert job_from_environ(None) is None


def test_vanished_process_is_all_none(tmp_path):
    p = describe(999999, 10.0, str(tmp_path))
    assert (p.name, p.job_id, p.container, p.used_memory_mib) == (None, None, None, 10.0)
