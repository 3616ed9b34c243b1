"""Text from a job, a GPU or a log, made safe for the medium it is written to.

A job's environment, a GPU's name, a log's columns and a peer's reply are untrusted text:
``SLURM_JOB_ID='<!channel> <http://evil|click to fix>'`` must not ping a channel,
``"\\nCRITICAL ... FIRING"`` must not print a fake line, ``"\\x1b]0;owned\\a"`` must not
set a terminal's title. Each medium has ONE function here, and every writer of that
medium uses it:

* :func:`line`: a terminal or a log line (the journal is read on a terminal). Control
  characters (C0, DEL, C1: newline, carriage return, ESC...), Unicode's line and
  paragraph separators and its invisible format characters (bidirectional overrides that
  reverse what a reader sees, zero-width characters) are shown as ``\\n``, ``\\x1b``,
  ``\\u202e``: visible, and never acted on.
* :func:`slack`: Slack ``mrkdwn``. :func:`line`, then ``&``, ``<`` and ``>`` as the
  entities Slack documents (no ``<!channel>``, no ``<url|text>`` link, no ``&gt;`` quote),
  and the formatting marks ``*`` ``_`` ``~`` at a word's edge and every `````` as their
  full-width look-alikes (``comm_hang`` stays as it is: a mark inside a word formats
  nothing). The sink also sends every ``mrkdwn`` text with ``verbatim: true``, so a bare
  URL or ``@here`` is not turned into a link or a mention either.
* :func:`label`: a Prometheus or Alertmanager label value: :func:`line`, at most
  :data:`LABEL_MAX` characters (the exposition format's own quoting is the client
  library's).
* :func:`slurm_reason`: a Slurm node reason (``scontrol update ... reason=``, read back by
  ``sinfo -R`` and by scripts that split its output on ``|`` or spaces): printable ASCII
  letters, digits, spaces and ``. , : ; _ / @ + = # ( ) [ ] % -`` only (anything else is
  ``_``), white space runs as one space, at most :data:`SLURM_REASON_MAX` characters.
* :func:`k8s_message`: a Kubernetes node condition's or event's message (shown by
  ``kubectl describe``): :func:`line`, at most :data:`K8S_MESSAGE_MAX` characters (the
  size the kubelet cuts an event's message to).

Standard library only: every layer may import it.
"""

from __future__ import annotations

import re

#: The longest label value written (characters); a job id is at most 128.
LABEL_MAX = 256
#: The longest Slurm reason written (characters).
SLURM_REASON_MAX = 256
#: The longest Kubernetes message written (characters): an event's limit.
K8S_MESSAGE_MAX = 1024

# C0 controls, DEL and C1 controls; ALM; zero-width space/joiners, LRM/RLM; line and
# paragraph separators, bidi embeddings and overrides (LRE..RLO); word joiner and
# invisible operators; bidi isolates (LRI..PDI) and deprecated format controls; BOM;
# interlinear annotation marks; tag characters.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e"
                     "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# a formatting mark at a word's edge (where Slack reads it as one), or any backtick
_SLACK_MARK = re.compile(r"`|(?<![A-Za-z0-9])[*_~]|[*_~](?![A-Za-z0-9])")
_FULLWIDTH = {"*": "\uff0a", "_": "\uff3f", "~": "\uff5e", "`": "\uff40"}
_SLURM_UNSAFE = re.compile(r"[^A-Za-z0-9 .,:;_/@+=#()\[\]%-]")


def _visible(m: re.Match[str]) -> str:
    c = m.group(0)
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def line(text: object) -> str:
    """``text`` for a terminal or a log line: nothing in it moves the cursor, starts a
    line, changes colours or the title, or reorders what a reader sees."""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_visible, s) if _UNSAFE.search(s) else s


def slack(text: object) -> str:
    """``text`` for a Slack ``mrkdwn`` field: no mention, link, quote or formatting."""
    s = line(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SLACK_MARK.sub(lambda m: _FULLWIDTH[m.group(0)], s)


def label(text: object) -> str:
    """``text`` as a Prometheus or Alertmanager label value."""
    return _cut(line(text), LABEL_MAX)


def slurm_reason(text: object) -> str:
    """``text`` as a Slurm node reason (``scontrol update nodename=N reason=...``)."""
    s = " ".join(_SLURM_UNSAFE.sub("_", line(text)).split())
    return s[:SLURM_REASON_MAX]


def k8s_message(text: object) -> str:
    """``text`` as a Kubernetes node condition's or event's message."""
    return _cut(line(text), K8S_MESSAGE_MAX)
