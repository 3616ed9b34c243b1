"""The model file: never a pickle.

Layout: the line ``NVWD-ANOMALY-MODEL 1``, the line of the sha256 (hex) of the
payload, then the payload: a numpy ``.npz`` of plain numeric arrays (the trees, the
fill/centre/scale vectors, ``base_coef``: each GPU's own temperature-at-power line, see
:mod:`~watchdog.anomaly.baseline`) and ``meta``, a UTF-8 JSON document as bytes (feature-schema
version, feature names, GPU model, training span, step and window, threshold and its
calibration). Loading checks the header, the checksum, opens the npz with
``allow_pickle=False`` (an object array, i.e. pickled code, is refused, never run),
then the schema, the GPU model and every array's shape and index range, so a file
edited by hand cannot make scoring read out of bounds.

The checksum catches corruption and casual edits; it is not a signature (whoever can
write the file can recompute it): keep model files where only root writes, as the
config.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly.score import Forest
from watchdog.anomaly.train import Model
from watchdog.errors import InputError

MAGIC = b"NVWD-ANOMALY-MODEL 1\n"
ARRAYS = ("feature", "threshold", "left", "right", "leaf_path")


class ModelFileError(InputError):
    """A model file that cannot be used (one-line reason, exit 2)."""


def dumps(model: Model) -> bytes:
    """The file's bytes."""
    meta = {"schema": model.schema, "features": list(model.features),
            "gpu_model": model.gpu_model, "trained_from": model.trained_from,
            "trained_to": model.trained_to, "step": model.step, "window": model.window,
            "threshold": model.threshold, "calibration": model.calibration,
            "max_depth": model.forest.max_depth, "norm": model.forest.norm,
            "baseline_uuids": list(model.base_uuids)}
    coef = (model.base_coef if model.base_coef is not None
            else np.zeros((0, 2))).astype(np.float64)
    buf = io.BytesIO()
    f = model.forest
    np.savez_compressed(buf, feature=f.feature.astype(np.int32), threshold=f.threshold,
                        left=f.left.astype(np.int32), right=f.right.astype(np.int32),
                        leaf_path=f.leaf_path, fill=model.fill, center=model.center,
                        scale=model.scale, lo=model.lo, hi=model.hi, unit=model.unit,
                        base_coef=coef,
                        meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    payload = buf.getvalue()
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def save(model: Model, path: str | os.PathLike[str]) -> int:
    """Write atomically (temp file + rename); returns the size in bytes."""
    data = dumps(model)
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".model-", dir=str(p.parent or "."))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(data)


def load(path: str | os.PathLike[str], gpu_model: str | None = None) -> Model:
    """Read and check a model file; ``gpu_model``: the GPUs it will score (refused when
    both it and the model's are known and differ). Raises :class:`ModelFileError`."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ModelFileError(f"model {path}: cannot read: {e.strerror or e}") from None
    return loads(data, str(path), gpu_model)


def loads(data: bytes, where: str = "model", gpu_model: str | None = None) -> Model:
    """:func:`load` from bytes (``where`` names the file in messages)."""
    if not data.startswith(MAGIC):
        raise ModelFileError(f"{where}: not a watchdog anomaly model file (train one with "
                             "`watchdog train --output FILE`)")
    rest = data[len(MAGIC):]
    digest, _, payload = rest.partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise ModelFileError(f"{where}: checksum mismatch: the file is corrupted or was "
                             "edited; train it again")
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as e:
        if "pickle" in str(e).lower() or "object" in str(e).lower():
            raise ModelFileError(f"{where}: holds pickled objects (code); refused, never "
                                 "loaded") from None
        raise ModelFileError(f"{where}: unreadable payload: {e}") from None
    except Exception as e:  # noqa: BLE001 - any damage is one line
        raise ModelFileError(f"{where}: unreadable payload: {type(e).__name__}") from None
    return _build(arrays, where, gpu_model)


def _build(a: dict[str, np.ndarray], where: str, gpu_model: str | None) -> Model:
    if any(a[k].dtype == object for k in a):
        raise ModelFileError(f"{where}: holds Python objects; refused")
    try:  # the schema first: an older file lacks the newer arrays
        meta = json.loads(a["meta"].astype(np.uint8).tobytes().decode())
        schema = int(meta["schema"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ModelFileError(f"{where}: unreadable metadata") from None
    if schema != F.FEATURE_SCHEMA or meta.get("features") != list(F.FEATURES):
        raise ModelFileError(f"{where}: feature schema {schema}, this watchdog uses "
                             f"{F.FEATURE_SCHEMA}: train the model again")
    need = (*ARRAYS, "fill", "center", "scale", "lo", "hi", "unit", "base_coef")
    missing = [k for k in need if k not in a]
    if missing:
        raise ModelFileError(f"{where}: missing {', '.join(missing)}")
    base_uuids = meta.get("baseline_uuids")
    coef = a["base_coef"]
    if (not isinstance(base_uuids, list) or not all(isinstance(u, str) for u in base_uuids)
            or coef.shape != (len(base_uuids), 2) or coef.dtype.kind != "f"
            or not np.isfinite(coef).all()):
        raise ModelFileError(f"{where}: malformed per-GPU baseline")
    mine = str(meta.get("gpu_model") or "unknown")
    if gpu_model and mine != "unknown" and gpu_model != "unknown" and mine != gpu_model:
        raise ModelFileError(f"{where}: trained on {mine}, these GPUs are {gpu_model}: "
                             "train a model on this kind of GPU")
    feat, thr, left, right, leaf = (a[k] for k in ARRAYS)
    shape = feat.shape
    nf = len(F.FEATURES)
    ok = (feat.ndim == 2 and all(x.shape == shape for x in (thr, left, right, leaf))
          and all(a[k].shape == (nf,) for k in ("fill", "center", "scale", "lo", "hi", "unit"))
          and feat.dtype.kind == "i" and left.dtype.kind == "i" and right.dtype.kind == "i")
    if not ok or shape[1] == 0:
        raise ModelFileError(f"{where}: malformed tree arrays")
    if (feat.min() < -1 or feat.max() >= nf or left.min() < 0 or right.min() < 0
            or left.max() >= shape[1] or right.max() >= shape[1]):
        raise ModelFileError(f"{where}: tree indices out of range (tampered file)")
    try:
        forest = Forest(feat.astype(np.int64), thr.astype(np.float64), left.astype(np.int64),
                        right.astype(np.int64), leaf.astype(np.float64),
                        int(meta["max_depth"]), float(meta["norm"]))
        model = Model(forest=forest, threshold=float(meta["threshold"]), gpu_model=mine,
                      trained_from=float(meta["trained_from"]),
                      trained_to=float(meta["trained_to"]), step=float(meta["step"]),
                      window=float(meta["window"]), fill=a["fill"].astype(np.float64),
                      center=a["center"].astype(np.float64),
                      scale=a["scale"].astype(np.float64),
                      lo=a["lo"].astype(np.float64), hi=a["hi"].astype(np.float64),
                      unit=a["unit"].astype(np.float64),
                      calibration=dict(meta.get("calibration") or {}), schema=schema,
                      base_uuids=tuple(base_uuids), base_coef=coef.astype(np.float64))
    except (KeyError, TypeError, ValueError):
        raise ModelFileError(f"{where}: incomplete metadata") from None
    if not 0 < forest.max_depth <= 64 or not forest.norm > 0 or not (model.unit > 0).all():
        raise ModelFileError(f"{where}: implausible tree depth or normaliser")
    return model


def describe(model: Model) -> dict[str, Any]:
    """A JSON-ready summary (status, train output)."""
    return {"gpu_model": model.gpu_model, "schema": model.schema,
            "trained_from": model.trained_from, "trained_to": model.trained_to,
            "threshold": round(model.threshold, 4), "trees": int(model.forest.feature.shape[0]),
            "windows": model.calibration.get("windows"),
            "baseline_gpus": len(model.base_uuids)}
