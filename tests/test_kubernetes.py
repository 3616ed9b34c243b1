"""The Kubernetes manifests users apply (``config/kubernetes/``): every object validates
against the Kubernetes schemas (``kubernetes-validate``, which ships them; no cluster),
the DaemonSet has what the agent needs, and node-problem-detector's plugin config passes
node-problem-detector's own start-up checks and runs as it would run it: each rule's
command with the rule's timeout, its exit code read as 0 OK / 1 problem / else Unknown,
its stdout trimmed and cut at ``max_output_length`` bytes, against a running agent.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from watchdog import config as config_mod
from watchdog.cluster import CONDITIONS, condition_name
from watchdog.units import parse_duration

REPO = Path(__file__).resolve().parent.parent
KUBE = REPO / "config" / "kubernetes"
WATCHDOG = Path(sys.executable).parent / "watchdog"
VERSIONS = ("1.28.0", kubernetes_validate.latest_version())  # oldest supported, newest


def documents() -> list[dict]:
    return [d for d in yaml.safe_load_all((KUBE / "nvml-watchdog.yaml").read_text()) if d]


def plugin() -> dict:
    return json.loads((KUBE / "npd-watchdog.json").read_text())


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schemas(version):
    docs = documents()
    assert {d["kind"] for d in docs} == {"Namespace", "ServiceAccount", "ClusterRoleBinding",
                                         "ConfigMap", "DaemonSet"}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_manifest_with_a_typo_fails_validation():
    ds = next(d for d in documents() if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)


def test_the_daemonset_sees_every_gpu_without_taking_one():
    ds = next(d for d in documents() if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "nvidia.com/gpu" not in json.dumps(agent["resources"])
    assert pod["hostPID"] is True and pod["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in pod["tolerations"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["kmsg"]["hostPath"]["path"] == "/dev/kmsg"
    assert vols["state"]["hostPath"]["path"] == "/var/lib/nvml-watchdog"
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert mounts["state"] == "/var/lib/nvml-watchdog" and mounts["kmsg"] == "/dev/kmsg"


def test_the_configmap_holds_the_shipped_files_and_the_config_loads(tmp_path):
    cm = next(d for d in documents() if d["kind"] == "ConfigMap")
    assert cm["data"]["npd-watchdog.json"] == (KUBE / "npd-watchdog.json").read_text()
    assert cm["data"]["watchdog.yaml"] == (KUBE / "watchdog.yaml").read_text()
    cfg = config_mod.load(KUBE / "watchdog.yaml")
    assert cfg.source == "nvml" and cfg.state_dir == "/var/lib/nvml-watchdog"


def test_the_plugin_config_passes_node_problem_detectors_checks():
    """``CustomPluginConfig.Validate`` of node-problem-detector (v0.8.19): plugin
    ``custom``, intervals above zero, no rule timeout above the global one, a default for
    every permanent rule's condition; and here: one condition per category, named
    ``GpuWatchdog<Category>``, each judged by its own ``--category``."""
    cfg = plugin()
    assert cfg["plugin"] == "custom"
    glob = cfg["pluginConfig"]
    assert parse_duration(glob["invoke_interval"]) > 0
    assert glob["max_output_length"] == 80
    defaults = {c["type"] for c in cfg["conditions"]}
    assert defaults == {condition_name(c) for c in CONDITIONS}
    categories = {}
    for rule in cfg["rules"]:
        assert parse_duration(rule["timeout"]) <= parse_duration(glob["timeout"])
        assert parse_duration(rule.get("invoke_interval", "1s")) > 0
        assert rule["path"] == "/opt/nvml-watchdog/bin/watchdog"
        cat = rule["args"][rule["args"].index("--category") + 1]
        if rule["type"] == "permanent":
            assert rule["condition"] in defaults
            categories[rule["condition"]] = cat
        else:
            assert rule["type"] == "temporary" and cat == "events"
    assert categories == {condition_name(c): c.lower() for c in CONDITIONS}


def run_as_npd(rule: dict, glob: dict, state_dir: Path) -> tuple[str, str]:
    """One rule run as node-problem-detector runs it: ``(condition status, message)``."""
    args = [a if a != "/var/lib/nvml-watchdog" else str(state_dir) for a in rule["args"]]
    timeout = min(parse_duration(rule.get("timeout", glob["timeout"])),
                  parse_duration(glob["timeout"]))
    proc = subprocess.run([str(WATCHDOG), *args], capture_output=True, timeout=timeout,
                          check=False)
    out = proc.stdout.decode("utf-8", "replace").strip()
    assert len(out.encode()) <= glob["max_output_length"], out  # nothing cut
    assert "\n" not in out and out.isascii()
    status = {0: "False", 1: "True"}.get(proc.returncode, "Unknown")
    assert proc.returncode in (0, 1, 2), (proc.returncode, proc.stderr)
    return status, out


@pytest.mark.slow
def test_the_plugin_turns_a_running_agents_judgment_into_conditions(tmp_path):
    cfg = plugin()
    glob = cfg["pluginConfig"]
    state = tmp_path / "state"
    answers = {r.get("condition", "Event"): run_as_npd(r, glob, state)[0]
               for r in cfg["rules"]}
    assert set(answers.values()) == {"Unknown"}  # no agent: cannot judge
    log = open(tmp_path / "agent.log", "w")  # noqa: SIM115 - closed below
    agent = subprocess.Popen([str(WATCHDOG), "run", "--source", "sim:ecc(gpus=5)@20,"
                              "thermal_throttle(gpus=3)@20", "--speed", "20", "--state-dir",
                              str(state)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            answers = {r.get("condition", "Event"): run_as_npd(r, glob, state)
                       for r in cfg["rules"]}
            if answers["GpuWatchdogEcc"][0] == "True" and answers["Event"][0] == "True":
                break
            time.sleep(0.5)
        got = {k: v[0] for k, v in answers.items()}
        assert got == {"GpuWatchdogLost": "False", "GpuWatchdogEcc": "True",
                       "GpuWatchdogXid": "False", "GpuWatchdogDriver": "False",
                       "GpuWatchdogSlowdown": "False", "Event": "True"}, \
            (answers, (tmp_path / "agent.log").read_text()[-2000:])
        assert answers["GpuWatchdogEcc"][1].startswith("GPU 5 ecc:")
        assert "thermal_throttle" in answers["Event"][1]
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        log.close()
