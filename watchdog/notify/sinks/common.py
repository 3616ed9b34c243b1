"""What every sink needs: secrets from the environment or a file, option checks, and HTTP
replies mapped onto Accepted / Retry / Failed."""

from __future__ import annotations

import os
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from watchdog.errors import InputError
from watchdog.notify.base import Accepted, Failed, Result, Retry


def secret(options: dict[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    """``KEY_env: NAME`` or ``KEY_file: PATH`` -> the secret (never printed; never inline)."""
    if key in options:
        raise InputError(f"{where}.{key}: secrets never go in the config: use {key}_env "
                         f"(an environment variable) or {key}_file (a file, mode 0600)")
    env, file = options.get(f"{key}_env"), options.get(f"{key}_file")
    if env and file:
        raise InputError(f"{where}: give {key}_env or {key}_file, not both")
    if env:
        value = os.environ.get(str(env), "").strip()
        if not value:
            raise InputError(f"{where}.{key}_env: environment variable {env} is not set")
        return value
    if file:
        p = Path(str(file)).expanduser()
        try:
            mode = p.stat().st_mode
            if mode & 0o077:
                raise InputError(f"{where}.{key}_file: {p} is readable by others (mode "
                                 f"{mode & 0o777:o}); make it 0600, owned by the service's user")
            value = p.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise InputError(f"{where}.{key}_file: cannot read {p}: {e.strerror or e}") from None
        if not value:
            raise InputError(f"{where}.{key}_file: {p} is empty")
        return value
    if required:
        raise InputError(f"{where}: needs {key}_env or {key}_file")
    return None


def positive(options: dict[str, Any], key: str, default: float | None,
             where: str) -> float | None:
    """A positive number option (``timeout: 10``, seconds), or a one-line InputError."""
    v = options.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise InputError(f"{where}.{key}: must be a positive number, not {v!r}")
    return float(v)


def check_keys(options: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InputError(f"{where}.{unknown[0]}: unknown option (known: "
                         f"{', '.join(sorted(allowed))})")


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), None if absent/bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        import time

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def by_status(status: int, body: str, headers: Any, memory: dict[str, Any] | None = None,
              what: str = "") -> Result:
    """2xx Accepted; 429 / 5xx / 408 Retry (honouring Retry-After); other 4xx Failed."""
    mem = memory or {}
    if 200 <= status < 300:
        return Accepted(mem)
    text = f"{what}HTTP {status}: {body.strip()[:200]}".strip()
    if status in (408, 425, 429) or status >= 500:
        return Retry(text, retry_after(headers.get("Retry-After") if headers else None), mem)
    return Failed(text, mem)
