"""YAML a user hands us, read within bounds: the one way the project reads YAML.

Every YAML file the project reads from users goes through here: the daemon's config
(``watchdog run --config``, ``status``, ``alerts``, ``silence``, and the SIGHUP reload),
rule files and rule test files. Plain ``yaml.safe_load`` refuses code but not size: a
400-byte "billion laughs" (an anchor aliased ten times, ten levels deep) becomes
gigabytes of Python objects, ``--config /dev/zero`` reads forever, and a FIFO blocks the
daemon at start. So, before a single Python object is built:

* the file must be a regular file (a device, FIFO, socket or directory is refused at
  once: it is opened without blocking and checked with ``fstat``) of at most
  :data:`MAX_BYTES` (1 MiB, about 30 000 lines: ten times the biggest shipped rule file);
* the event stream (libyaml's iterative parser when PyYAML has it) is walked once, and
  refused as soon as the document, with every alias expanded, would exceed
  :data:`MAX_NODES` nodes (100 000: the shipped rule tests hold about 7 000), uses more than
  :data:`MAX_ALIASES` aliases (100), nests deeper than :data:`MAX_DEPTH` levels (64) or
  aliases an anchor from inside itself (a recursive structure). Anchored sizes are
  memoised, so the count costs one pass however deep the aliases go;
* only then is the node graph composed (aliases stay shared nodes) and, for callers
  that want plain data, constructed with PyYAML's safe constructor; a value the
  constructor cannot represent (an integer of 5 000 digits, a 13th month) is an
  :class:`InputError` too, never a traceback.

Every refusal is one :class:`~watchdog.errors.InputError` naming the file (and line,
where there is one): exit 2, and on SIGHUP the running config stays.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from watchdog.errors import InputError

if TYPE_CHECKING:
    import yaml

    from watchdog.untyped import Json

#: The largest YAML file read (bytes).
MAX_BYTES = 1 << 20
#: The most nodes a document may hold with every alias expanded.
MAX_NODES = 100_000
#: The most alias references (``*name``) in one document.
MAX_ALIASES = 100
#: The deepest nesting of mappings and sequences.
MAX_DEPTH = 64


def read_text(path: str | os.PathLike[str], what: str = "config") -> str:
    """The text of ``path``: a regular file of at most :data:`MAX_BYTES`, UTF-8.

    ``what`` names the file in messages (``config``, ``rule file``…)."""
    p = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputError(f"{p}: cannot read {what}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{p}: cannot read {what}: is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{p}: cannot read {what}: not a regular file (a device, FIFO "
                             "or socket)")
        if st.st_size > MAX_BYTES:
            raise InputError(f"{p}: {what} is {st.st_size} bytes, more than the "
                             f"{MAX_BYTES >> 20} MiB a YAML file may have")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        left = MAX_BYTES + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 16))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
    except OSError as e:
        raise InputError(f"{p}: cannot read {what}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_BYTES:  # a file that grew, or a /proc file that lies about its size
        raise InputError(f"{p}: {what} is more than the {MAX_BYTES >> 20} MiB a YAML file "
                         "may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise InputError(f"{p}:{line}: {what} is not UTF-8 text") from None


def compose(text: str, where: str) -> yaml.Node | None:
    """The node graph of ``text`` (None for an empty document) after :func:`check`;
    ``where`` (the file name) starts every message."""
    import yaml

    if len(text) > MAX_BYTES:
        raise InputError(f"{where}: more than the {MAX_BYTES >> 20} MiB a YAML file may have")
    fast = getattr(yaml, "CSafeLoader", None)
    try:
        check(text, where, fast)
        return yaml.compose(text, Loader=fast or yaml.SafeLoader)
    except yaml.YAMLError as e:
        if fast is None:
            raise InputError(_message(e, where)) from None
    except RecursionError:
        raise InputError(f"{where}: YAML nested too deeply") from None
    # libyaml said "invalid": the pure-Python parser names the problem in the words the
    # project's messages have always used (and only an invalid file pays for it)
    try:
        check(text, where, None)
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise InputError(_message(e, where)) from None
    except RecursionError:
        raise InputError(f"{where}: YAML nested too deeply") from None


def check(text: str, where: str, loader: type[yaml.SafeLoader] | None = None) -> None:
    """Walk the YAML events of ``text`` once and refuse it (:class:`InputError`) beyond
    :data:`MAX_NODES` expanded nodes, :data:`MAX_ALIASES` aliases, :data:`MAX_DEPTH`
    levels, or for a recursive alias. A YAML syntax error is raised as ``YAMLError``."""
    import yaml
    from yaml import events as ev

    sizes: dict[str, int] = {}  # anchor -> nodes in its subtree, aliases expanded
    open_: list[tuple[str | None, int]] = []  # (anchor, total before it) per open level
    total = aliases = 0
    for e in yaml.parse(text, Loader=loader or yaml.SafeLoader):
        if isinstance(e, ev.ScalarEvent):
            total += 1
            if e.anchor:
                sizes[e.anchor] = 1
        elif isinstance(e, ev.CollectionStartEvent):
            open_.append((e.anchor, total))
            total += 1
            if len(open_) > MAX_DEPTH:
                raise InputError(f"{where}:{_line(e)}: YAML nested more than {MAX_DEPTH} "
                                 "levels deep")
        elif isinstance(e, ev.CollectionEndEvent):
            anchor, before = open_.pop()
            if anchor:
                sizes[anchor] = total - before
        elif isinstance(e, ev.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise InputError(f"{where}:{_line(e)}: more than {MAX_ALIASES} YAML aliases "
                                 "(*name): refused (an alias bomb?)")
            if any(a == e.anchor for a, _ in open_):
                raise InputError(f"{where}:{_line(e)}: YAML alias *{e.anchor} refers to "
                                 "its own anchor (a recursive structure): refused")
            if e.anchor not in sizes:
                continue  # an undefined alias: the composer names it
            total += sizes[e.anchor]
        else:
            continue
        if total > MAX_NODES:
            raise InputError(f"{where}:{_line(e)}: YAML document expands to more than "
                             f"{MAX_NODES} nodes (aliases included): refused (an alias bomb?)")


def construct(node: yaml.Node | None, where: str) -> Json:
    """Plain Python data (dicts, lists, scalars) from a node graph :func:`compose` gave."""
    import yaml

    if node is None:
        return None
    try:
        return yaml.constructor.SafeConstructor().construct_document(node)
    except yaml.YAMLError as e:
        raise InputError(_message(e, where)) from None
    except (ValueError, OverflowError, TypeError, RecursionError) as e:
        text = (str(e).splitlines() or [type(e).__name__])[0]
        text = text if len(text) <= 80 else text[:77].rstrip() + "…"
        raise InputError(f"{where}:{_line(node)}: a YAML value cannot be read: {text}") \
            from None


def load(text: str, where: str) -> tuple[yaml.Node | None, Json]:
    """``(node graph, plain data)`` of ``text`` (both None for an empty document)."""
    node = compose(text, where)
    return node, construct(node, where)


def load_file(path: str | os.PathLike[str], what: str = "config"
              ) -> tuple[yaml.Node | None, Json]:
    """:func:`read_text` then :func:`load`: ``(node graph, plain data)`` of the file."""
    return load(read_text(path, what), str(Path(path)))


def _line(e: yaml.YAMLError) -> str:
    mark = getattr(e, "start_mark", None)
    return str(mark.line + 1) if mark is not None else "?"


def _message(e: yaml.YAMLError, where: str) -> str:
    mark = getattr(e, "problem_mark", None)
    line = f":{mark.line + 1}" if mark else ""
    problem = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
    return f"{where}{line}: invalid YAML: {problem}"
