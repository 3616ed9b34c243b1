"""The package's one escape from static types: documents decoded from, or built for, JSON
and YAML (config and rule files, status rows, the recording manifest, HTTP bodies,
evidence). Their shape comes from a file or a peer at run time, so the type checker cannot
follow it; it is checked where the document is read (the config and rule loaders, the
recording reader, each sink's reply parser) and every such check says what was wrong.
Everything else in the package is typed."""

from __future__ import annotations

from typing import Any, TypeAlias

#: One JSON value as decoded (``json.loads``, ``yaml.safe_load``) or about to be encoded.
Json: TypeAlias = Any  # type: ignore[explicit-any]  # a document's shape is a run-time fact
#: A JSON object (a mapping of names to JSON values).
JsonDoc: TypeAlias = dict[str, Any]  # type: ignore[explicit-any]  # as Json
