"""nvidia-ml-py as this package sees it. The binding ships no type information: its
module, its device and event-set handles, and the ctypes structures its calls return are
built at run time (and, in the tests, answered by the fake NVML below it), so each is an
:data:`NvmlObject` where it enters; the readers turn them into floats and records at once."""

from __future__ import annotations

from typing import Any, TypeAlias

#: The pynvml module, a handle, or a structure an NVML call returned.
NvmlObject: TypeAlias = Any  # type: ignore[explicit-any]  # see above
