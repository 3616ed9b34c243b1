"""Alert delivery: policy (fingerprint, grouping, silences, inhibition, routing), a durable
outbox in the state database, and sinks (Slack, PagerDuty, Alertmanager, webhook, log).

The contract between the stages is in :mod:`watchdog.notify.base`.
"""
