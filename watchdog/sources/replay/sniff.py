"""Detect the format of a recorded file from its first bytes.

``recording`` (the project's own ``.wdrec``, by its magic bytes), ``wandb`` (a W&B run
file, ``:W&B``), ``wandb-table`` (W&B system metrics as a wide CSV), ``dmon`` (``nvidia-smi
dmon``: the first non-blank line is a ``# gpu …`` or ``#Date … gpu …`` header) or ``csv``
(``nvidia-smi --query-gpu`` CSV, or any CSV read through a mapping). A binary file or a
file that is not UTF-8 text is an :class:`InputError`, not a parse attempt.
"""

from __future__ import annotations

from watchdog.errors import InputError

MAGIC = b"WDREC\x00"
WANDB_MAGIC = b":W&B"


def sniff(path: str, head: bytes) -> str:
    """Format name for a file whose first bytes are ``head``."""
    if head.startswith(MAGIC):
        return "recording"
    if head.startswith(WANDB_MAGIC):
        return "wandb"
    if not head.strip():
        raise InputError(f"{path}: empty file")
    if b"\x00" in head:
        raise InputError(f"{path}: binary file, not a GPU log or a recording")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not just a multi-byte character cut at the end
            at = head[: e.start].count(b"\n") + 1
            raise InputError(f"{path}:{at}: not UTF-8 text (binary file?)") from None
        text = head[: e.start].decode("utf-8")
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            words = s.lstrip("#").replace(",", " ").lower().split()
            if "gpu" in words or "idx" in words:
                return "dmon"
        from watchdog.sources.wandb.table import looks_like

        return "wandb-table" if looks_like(s.encode("utf-8")) else "csv"
    raise InputError(f"{path}: empty file")
