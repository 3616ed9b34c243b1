"""Slurm's own interface, as the agent uses it: ``scontrol show node`` and ``scontrol
update NodeName=… State=DRAIN|RESUME Reason=…``, each bounded by a timeout.

Every call is one subprocess with an argument vector (no shell: the reason is one
argument, whatever it holds), a deadline (``timeout``, killed past it), and at most
:data:`MAX_OUTPUT` characters of its output kept. A call that fails, times out or cannot
start is a :class:`ScontrolError` with one line that says why; the caller retries later.
``scontrol`` finds the controller the way every Slurm command does (``/etc/slurm/
slurm.conf``, or ``$SLURM_CONF`` in the agent's environment).

The drain reason the agent writes always starts with :data:`PREFIX`: that prefix is how
the agent knows a drain is its own (NHC's ``NHC:`` convention), so it never touches
another reason. :func:`reason_text` is the one place a reason is made safe for Slurm.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

PREFIX = "watchdog:"
MAX_REASON = 160  # characters of a drain reason (sinfo -R shows ~20; scontrol all)
MAX_OUTPUT = 4096  # characters of scontrol's output kept
_STAMP = re.compile(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$")  # "[root@2026-11-28T21:40:42]"


class ScontrolError(Exception):
    """A scontrol call that did not do what was asked (one line in ``str()``)."""


def reason_text(text: str, limit: int = MAX_REASON) -> str:
    """``text`` fit to be a Slurm drain reason: printable ASCII, no quotes, no newlines,
    runs of blanks as one space, at most ``limit`` characters.

    The one sanitiser of a Slurm reason (a shared escaping module may take its place):
    ``scontrol`` gets the reason as one argument, but ``sinfo``, ``scontrol show`` and the
    scripts that parse them split on blanks and quotes, and a newline would end a line of
    their output."""
    out = "".join(c if " " <= c <= "~" and c not in "\"'`" else " " for c in text)
    out = " ".join(out.split())
    return out if len(out) <= limit else out[:limit - 3].rstrip() + "..."


def is_ours(reason: str | None) -> bool:
    """Whether a node's reason was written by the agent."""
    return reason is not None and reason.startswith(PREFIX)


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as ``scontrol show node`` reports it: ``state`` (``IDLE+DRAIN``,
    ``MIXED``, …) and ``reason`` without Slurm's ``[user@time]`` stamp (None: no reason)."""

    state: str
    reason: str | None

    @property
    def drained(self) -> bool:
        """DRAIN set: draining (jobs still running) or drained."""
        flags = self.state.upper().replace("+", " ").split()
        return any(f in ("DRAIN", "DRAINING", "DRAINED") for f in flags)


def parse_node(text: str) -> NodeState:
    """The ``State=`` and ``Reason=`` of ``scontrol show node NAME --oneliner``. The reason
    is the last field and may hold blanks; Slurm appends ``[user@time]`` to it."""
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    if state is None:
        raise ScontrolError(f"no State= in scontrol's answer: {text[:120]!r}")
    reason = None
    m = re.search(r"(?:^|\s)Reason=(.*)$", text.strip())
    if m:
        reason = _STAMP.sub("", m.group(1)).strip() or None
    return NodeState(state.group(1), reason)


@dataclass(frozen=True, slots=True)
class Scontrol:
    """``scontrol`` for one node: the program (a path or a name on ``PATH``), the node's
    name in Slurm, and the timeout of each call (s)."""

    program: str
    node: str
    timeout_s: float

    def _call(self, *args: str) -> str:
        argv = [self.program, *args]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                                  timeout=self.timeout_s, check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ScontrolError(f"scontrol {args[0]} did not answer within "
                                f"{self.timeout_s:g} s (killed)") from None
        except OSError as e:
            raise ScontrolError(f"cannot run {self.program}: {e.strerror or e}") from None
        out = (proc.stdout or "")[:MAX_OUTPUT]
        if proc.returncode != 0:
            err = " ".join(((proc.stderr or "") + " " + out).split())[:200]
            raise ScontrolError(f"scontrol {args[0]} failed (exit {proc.returncode}): "
                                f"{err or 'no output'}")
        return out

    def show(self) -> NodeState:
        """The node's state and reason now."""
        return parse_node(self._call("show", "node", self.node, "--oneliner"))

    def drain(self, reason: str) -> None:
        """``State=DRAIN`` with ``reason`` (made safe by :func:`reason_text`)."""
        self._call("update", f"NodeName={self.node}", "State=DRAIN",
                   f"Reason={reason_text(reason)}")

    def resume(self) -> None:
        """``State=RESUME``: back in service (Slurm clears the reason)."""
        self._call("update", f"NodeName={self.node}", "State=RESUME")
