"""What the type checker cannot follow, named once: the package's only escapes from static
types. Everything else in the package is typed (``tests/test_types.py`` runs mypy with
explicit ``Any`` refused, so each escape is one of these names or a justified ignore).

* :data:`Json`, :data:`JsonDoc`: documents decoded from, or built for, JSON and YAML
  (config and rule files, status rows, the recording manifest, HTTP bodies, evidence).
  Their shape comes from a file or a peer at run time; it is checked where the document
  is read (the config and rule loaders, the recording reader, each sink's reply parser)
  and every such check says what was wrong.
* :data:`Array`: a numpy array of any shape and dtype. The detector and the readers work
  on columns (float64 values with NaN for a missing reading, bool masks, int64 indices)
  through vectorised operations whose dtypes numpy's type stubs do not follow; each
  function's docstring says which it takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

#: One JSON value as decoded (``json.loads``, ``yaml.safe_load``) or about to be encoded.
Json: TypeAlias = Any  # type: ignore[explicit-any]  # a document's shape is a run-time fact
#: A JSON object (a mapping of names to JSON values).
JsonDoc: TypeAlias = dict[str, Any]  # type: ignore[explicit-any]  # as Json

if TYPE_CHECKING:
    import numpy as np

    #: A numpy array; its dtype is said in words where it is used.
    Array: TypeAlias = np.ndarray[Any, np.dtype[Any]]  # type: ignore[explicit-any]  # see above
    #: The dtype of such an array (a file's array declares it; checked where it is read).
    DType: TypeAlias = np.dtype[Any]  # type: ignore[explicit-any]  # as Array
else:
    def __getattr__(name: str) -> object:
        """``Array`` without importing numpy at start-up (``watchdog check`` does not)."""
        if name in ("Array", "DType"):
            import numpy as np

            return np.ndarray if name == "Array" else np.dtype
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
