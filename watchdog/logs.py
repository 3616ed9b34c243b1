"""The agent's one log format, journald priorities, and secrets kept out of every line.

* One format for every line the daemon writes: ``TIME LEVEL LOGGER: message`` on a
  terminal; under systemd's journal (``$JOURNAL_STREAM`` names our stderr) the time is
  left out (the journal adds its own) and each line starts with its syslog priority
  (``<3>`` error, ``<4>`` warning, ``<6>`` info: sd-daemon(3)), so ``journalctl -p err``
  shows exactly the errors.
* Third-party chatter (httpx, httpcore, slack_sdk, urllib3) is kept to warnings: their
  INFO lines print request URLs, and an incoming-webhook URL is the secret itself.
* Every secret a sink reads (:func:`register_secret`, called by
  :func:`watchdog.notify.sinks.common.secret`) is replaced by ``***`` in every record of
  every logger, whatever library wrote it: the last line of defence.
* Every message is one line: a newline, an escape sequence or a bidirectional override
  that came from a job, a GPU or a log (a job id, a GPU's name, a reply) is shown escaped
  (:func:`watchdog.escape.line`), so no field can print a fake line into the journal.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TextIO

#: logging level -> syslog priority (sd-daemon(3): SD_CRIT 2, SD_ERR 3, SD_WARNING 4,
#: SD_NOTICE 5, SD_INFO 6, SD_DEBUG 7)
PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6,
            logging.DEBUG: 7}
NOTICE = 25  # between INFO and WARNING: a resolved incident, a node-level state change
logging.addLevelName(NOTICE, "NOTICE")
PRIORITY[NOTICE] = 5
_COLOURS = {logging.ERROR: "\033[1;31m", logging.CRITICAL: "\033[1;31m",
            logging.WARNING: "\033[1;33m", NOTICE: "\033[1;32m"}
QUIET = ("httpx", "httpx2", "httpcore", "slack_sdk", "urllib3")
MIN_SECRET_LEN = 6  # shorter strings would blank out ordinary words

_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Never print ``value`` in a log line from now on (tokens, routing keys, URLs)."""
    if value and len(value) >= MIN_SECRET_LEN:
        with _secrets_lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    with _secrets_lock:
        found = [s for s in _secrets if s in text]
    for s in sorted(found, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


class SecretFilter(logging.Filter):
    """Rewrites a record's message with :func:`redact` and :func:`watchdog.escape.line`
    (one line, nothing a terminal acts on), and redacts its traceback text."""

    def filter(self, record: logging.LogRecord) -> bool:
        from watchdog.escape import line

        msg = record.getMessage()
        clean = line(redact(msg) if _secrets else msg)
        if clean != msg:
            record.msg, record.args = clean, None
        if not _secrets:
            return True
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


class ColourFormatter(logging.Formatter):
    """The terminal's format with the line coloured by level (an interactive run: the
    demo, a person trying the agent): errors red, warnings yellow, notices green."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        colour = _COLOURS.get(record.levelno)
        return f"{colour}{text}\033[0m" if colour else text


class JournalFormatter(logging.Formatter):
    """``<PRIORITY>LEVEL LOGGER: message``; continuation lines get the prefix too, so a
    traceback keeps its priority in the journal."""

    def format(self, record: logging.LogRecord) -> str:
        prio = PRIORITY.get(record.levelno, 6)
        text = super().format(record)
        return "\n".join(f"<{prio}>{line}" for line in text.splitlines() or [""])


def under_journal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default stderr) is connected to the journal: systemd sets
    ``JOURNAL_STREAM=DEV:INODE`` of the stream it connected (sd_journal_stream_fd)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    if not value:
        return False
    try:
        dev, ino = (int(x) for x in value.split(":"))
        st = os.fstat((stream or sys.stderr).fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return st.st_dev == dev and st.st_ino == ino


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def setup(level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Configure the root logger once for a long-running command (``watchdog run``)."""
    out = stream or sys.stderr
    handler = logging.StreamHandler(out)
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    if under_journal(out):
        handler.setFormatter(JournalFormatter("%(levelname)s %(name)s: %(message)s"))
    elif _isatty(out) and not os.environ.get("NO_COLOR"):
        handler.setFormatter(ColourFormatter(fmt))
    else:
        handler.setFormatter(logging.Formatter(fmt))
    handler.addFilter(SecretFilter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
