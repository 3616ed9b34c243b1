"""The notification policy's stages, one object each, composed in Alertmanager's order by
:class:`watchdog.notify.policy.Policy` (Alertmanager's ``notify.Stage`` and
``MultiStage``: each step small, one role, its own tests):

1. :class:`~.identity.IdentityStage`: an incident's fingerprint and job, fixed when it is
   first seen, and the :class:`~watchdog.notify.base.Alert` a sink sees.
2. :class:`~.hold.HoldStage`: firing, resolving (held) and resolved; flapping, the
   fleet's hold of a job-wide resolve, and the grace after a restart.
3. :class:`~.mute.MuteStage`: inhibition and silences.
4. :class:`~.route.RouteStage`: which alerts go to which sink.
5. :class:`~.group.GroupStage`: one notification per group and sink, on the group's
   timers.

The state the stages share is in :mod:`.state`; the policy writes it, with the outbox
rows, in one transaction per tick.
"""
