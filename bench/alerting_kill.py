"""The agent side of ``alerting_bench.py``'s kill -9 scenario: one notifier on a state
directory, a scripted node on a fast clock, sinks on loopback servers. It resumes where
the previous (killed) run got to, as a restarted agent does: incidents still active at that
moment are raised again (the detector re-raises a condition that persists), the others not.

    python bench/alerting_kill.py STATE_DIR PD_URL CA_FILE SLACK_URL
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

SPEED = 200.0  # simulated seconds per real second
#: (host, gpu, fires at, resolves at) in simulated seconds from the start
SCRIPT = [(f"node{h}", str(g), 5.0 + 7 * h + g, 150.0 + 11 * h + 3 * g)
          for h in range(3) for g in range(3)]
END = 420.0


def main(argv: list[str]) -> int:
    from watchdog.incident import Incident
    from watchdog.notify.config import NotifyConfig, SinkSpec
    from watchdog.notify.notifier import Notifier, build_sinks
    from watchdog.store.store import Store

    state, pd_url, ca, slack_url = argv
    sd = Path(state)
    sd.mkdir(parents=True, exist_ok=True)
    key = sd / "pd.key"
    if not key.exists():
        key.write_text("k" * 32)
        key.chmod(0o600)
    progress = sd / "progress"
    t_start = float(progress.read_text() or 0.0) if progress.exists() else 0.0
    m0 = time.monotonic()

    def sim() -> float:
        return 1_800_000_000.0 + t_start + (time.monotonic() - m0) * SPEED

    os.environ["BENCH_SLACK_TOKEN"] = "xoxb-bench"
    cfg = NotifyConfig(sinks=(
        SinkSpec("pagerduty", "pagerduty", {"routing_key_file": str(key), "url": pd_url,
                                            "ca_file": ca}, "bench"),
        SinkSpec("slack", "slack", {"token_env": "BENCH_SLACK_TOKEN", "channel": "#b",
                                    "api_url": slack_url + "/api/"}, "bench")),
        group_wait=10, group_interval=30, resolve_hold=30, restart_grace=120)
    n = Notifier(cfg, Store(sd), sim, "bench", lambda r: ("gpu", None),
                 build_sinks(cfg), wall=sim, speed=SPEED)
    live: dict[int, Incident] = {}
    while True:
        now = sim()
        t = now - 1_800_000_000.0
        changes = []
        for k, (host, gpu, fire, res) in enumerate(SCRIPT):
            if fire <= t < res and k not in live:
                live[k] = Incident(kind="ecc", severity="critical", host=host, gpus=[gpu],
                                   uuids=[f"GPU-{host}-{gpu}"], started_at=fire, fired_at=fire,
                                   resolved_at=None, rule="ecc", summary="ecc")
                changes.append(("firing", live[k]))
            elif t >= res and k in live:
                live[k].resolved_at = now
                changes.append(("resolved", live.pop(k)))
        if changes:
            n.observe(changes)
        n.tick(now)
        tmp = progress.with_suffix(".tmp")  # atomic: a kill mid-write leaves the old one
        tmp.write_text(f"{t:.3f}")
        os.replace(tmp, progress)
        # past the script's end a restarted agent keeps running (as a real one does)
        # until what it holds for the detector after a restart has resolved
        holding = any(a.state == "resolving" for a in n.policy.alerts.values())
        if t >= END and (not holding or t >= END + 2 * cfg.restart_grace):
            break
        time.sleep(0.01)
    left = n.drain(30)
    n.close()
    return 0 if left == 0 else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
