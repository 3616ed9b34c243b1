"""The anomaly model's results file, ``docs/results/model.md``, written by the model benches.

Each bench run with ``--write`` replaces its own section (one per command line) with what
it printed, under the date, the commit and the command that measured it; the other
sections stay as they were. The README and ``docs/model.md`` quote figures from this file,
never figures measured elsewhere.

    with model_results.captured("bench/model_wandb.py", argv, write=args.write):
        ...  # everything printed in here goes to the terminal and, with write, the file
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results" / "model.md"
HEAD = """# The anomaly model: measured figures

Written by the model benches with `--write` (`bench/model_results.py`): each section is one
command's output, under the date, the commit and the command that measured it. A run of
the same command replaces its section. `docs/model.md` says what each bench measures.
"""
_SECTION = re.compile(r"^## `(?P<cmd>[^`]+)`$", re.M)


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, s: str) -> int:
        self.out.write(s)
        return self.kept.write(s)

    def flush(self) -> None:
        self.out.flush()


def commit() -> str:
    """The short commit, marked when the model's code or the benches differ from it."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--",
                            "watchdog", "bench", "rules"], capture_output=True, text=True,
                           check=False).stdout.strip()
    return f"{head or 'unknown'}{' with uncommitted changes' if dirty else ''}"


def write(command: str, text: str, path: Path = RESULTS, head: str = HEAD) -> None:
    """Replace (or add) ``command``'s section of ``path`` with ``text`` (``head`` opens
    a new file)."""
    body = (f"## `{command}`\n\n- date: {dt.datetime.now(dt.UTC):%Y-%m-%d}\n"
            f"- commit: {commit()}\n\n```\n{text.strip()}\n```\n")
    old = path.read_text() if path.is_file() else head
    parts = _SECTION.split(old)
    head, sections = parts[0], dict(zip(parts[1::2], parts[2::2], strict=True))
    sections[command] = body.split("\n", 1)[1]
    out = head.rstrip() + "\n\n" + "\n".join(f"## `{c}`\n\n{s.strip()}\n"
                                                 for c, s in sorted(sections.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(out)


@contextlib.contextmanager
def captured(script: str, argv: Sequence[str] | None, write_it: bool,
             path: Path = RESULTS, head: str = HEAD) -> Iterator[None]:
    """Everything printed inside goes to the terminal and, with ``write_it``, into the
    results file ``path`` under ``python <script> <argv without --write>``."""
    args = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--write"]
    command = " ".join(["python", script, *args])
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield
    if write_it:
        write(command, tee.kept.getvalue(), path, head)
        print(f"written to {path.relative_to(REPO)} under `{command}`")
