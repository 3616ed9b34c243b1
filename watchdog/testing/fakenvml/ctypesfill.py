"""ctypes plumbing for the fake NVML: read the arguments nvidia-ml-py passes, fill outputs.

nvidia-ml-py passes output arguments as ``byref(obj)`` (a ``CArgObject`` whose ``_obj`` is
the target), arrays and string buffers directly, inputs as ``c_uint(...)`` objects or
plain ints, and device/event-set/GPM handles as ctypes pointer instances. The fake never
dereferences a handle: it stores a small integer in the pointer's bytes and reads it back.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, TypeAlias

#: An argument as nvidia-ml-py passes it to a C entry point (``byref(x)``, a ctypes array
#: or string buffer, a ``c_uint``, a pointer handle) or the ctypes object it points at:
#: ctypes' objects are built at run time from the binding's own structures.
CArg: TypeAlias = Any  # type: ignore[explicit-any]  # see above
#: A C entry point of the fake: called with the binding's arguments, returns a status code.
CEntry: TypeAlias = Callable[..., Any]  # type: ignore[explicit-any]  # as CArg

HANDLE_BASE = 0x6E760000  # "nv" + index: fake addresses, never dereferenced


def target(arg: CArg) -> CArg:
    """The object an output argument points at (``byref(x)`` -> ``x``; arrays as given)."""
    return getattr(arg, "_obj", arg)


def as_int(arg: CArg) -> int:
    """An input scalar passed as ``c_uint(...)``/enum object or as a plain int."""
    return int(arg.value if hasattr(arg, "value") else arg)


def set_value(arg: CArg, value: int | float) -> None:
    """Store ``value`` into the scalar ``arg`` points at (``byref(c_uint())`` ...)."""
    target(arg).value = value


def set_pointer(arg: CArg, address: int) -> None:
    """Write ``address`` into the pointer object ``arg`` points at (a new handle)."""
    ctypes.c_void_p.from_buffer(target(arg)).value = address


def pointer_value(handle: CArg) -> int | None:
    """The address stored in a pointer handle (``None`` for NULL)."""
    if handle is None:
        return None
    if isinstance(handle, int):
        return handle
    return ctypes.c_void_p.from_buffer(target(handle)).value


def write_string(buf: CArg, size: CArg, text: str | bytes) -> bool:
    """Copy ``text`` NUL-terminated into a ``create_string_buffer``; False if it won't fit."""
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) + 1 > min(as_int(size), len(buf)):
        return False
    buf.value = raw
    return True
