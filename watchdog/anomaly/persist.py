"""The model file: never a pickle.

Layout: the line ``NVWD-ANOMALY-MODEL 1``, the line of the sha256 (hex) of the
payload, then the payload: a numpy ``.npz`` of plain numeric arrays (the trees, the
fill/centre/scale vectors, ``base_coef``: each GPU's own temperature-at-power line, see
:mod:`~watchdog.anomaly.baseline`) and ``meta``, a UTF-8 JSON document as bytes (feature-schema
version, feature names, GPU model, training span, step and window, threshold and its
calibration). Loading checks the file (a regular file of at most 64 MiB), the header,
the checksum, then opens the npz within bounds (:mod:`watchdog.npzsafe`: an object array,
i.e. pickled code, is refused, never run; every array's declared shape is checked before
it is allocated: at most 1000 trees of 4095 nodes), then the schema, the GPU model, every
array's shape and index range (feature indices within the features, child indices within
the tree) and every number (a NaN threshold would switch detection off silently), so a
file edited by hand cannot make scoring read out of bounds or quietly stop.

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
from typing import TYPE_CHECKING

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly.model import Model
from watchdog.anomaly.score import Forest
from watchdog.errors import InputError
from watchdog.untyped import Array, JsonDoc

if TYPE_CHECKING:
    from watchdog.npzsafe import Archive

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
    assert model.lo is not None and model.hi is not None and model.unit is not None
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


#: Bounds of a model file, checked before any array is allocated: the file's size, the
#: trees (100 written), the nodes of one tree (at most 2 x 256 - 1 = 511 written), GPUs
#: with a baseline, the metadata, and every array together uncompressed.
MAX_FILE = 64 << 20
MAX_TREES = 1000
MAX_NODES = 4095
MAX_BASELINE_GPUS = 4096
MAX_META = 1 << 20
MAX_ARRAYS_BYTES = 256 << 20


def load(path: str | os.PathLike[str], gpu_model: str | None = None) -> Model:
    """Read and check a model file; ``gpu_model``: the GPUs it will score (refused when
    both it and the model's are known and differ). Raises :class:`ModelFileError`."""
    return loads(_read(path), str(path), gpu_model)


def _read(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a regular file of at most :data:`MAX_FILE` (a device, a FIFO or a
    bigger file is refused without reading it)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ModelFileError(f"model {path}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ModelFileError(f"model {path}: not a regular file")
        if st.st_size > MAX_FILE:
            raise ModelFileError(f"{path}: {st.st_size} bytes, more than a model file may "
                                 f"have ({MAX_FILE >> 20} MiB)")
        os.set_blocking(fd, True)
        chunks, left = [], MAX_FILE + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
    except OSError as e:
        raise ModelFileError(f"model {path}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_FILE:
        raise ModelFileError(f"{path}: more than a model file may have ({MAX_FILE >> 20} MiB)")
    return data


def loads(data: bytes, where: str = "model", gpu_model: str | None = None) -> Model:
    """:func:`load` from bytes (``where`` names the file in messages)."""
    from watchdog.npzsafe import Archive

    if not data.startswith(MAGIC):
        raise ModelFileError(f"{where}: not a watchdog anomaly model file (train one with "
                             "`watchdog train --output FILE`)")
    if len(data) > MAX_FILE:
        raise ModelFileError(f"{where}: more than a model file may have ({MAX_FILE >> 20} MiB)")
    rest = data[len(MAGIC):]
    digest, _, payload = rest.partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise ModelFileError(f"{where}: checksum mismatch: the file is corrupted or was "
                             "edited; train it again")
    try:
        with Archive(payload, where, max_members=32, max_bytes=MAX_ARRAYS_BYTES) as z:
            meta = _read_meta(z, where)
            _check_shapes(z, where)
            arrays = {k: z.read(k) for k in z.members}
    except ModelFileError:
        raise
    except InputError as e:  # the archive's own refusal: same words, this class
        raise ModelFileError(str(e)) from None
    return _build(arrays, meta, where, gpu_model)


def _read_meta(z: Archive, where: str) -> JsonDoc:
    """The metadata (schema first: an older file lacks the newer arrays)."""
    m = z.members.get("meta")
    if m is None or m.dtype.kind not in "iub" or len(m.shape) != 1 or m.nbytes > MAX_META:
        raise ModelFileError(f"{where}: unreadable metadata")
    try:
        meta = json.loads(z.read("meta").astype(np.uint8).tobytes().decode())
        schema = int(meta["schema"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError,
            OverflowError):
        raise ModelFileError(f"{where}: unreadable metadata") from None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{where}: unreadable metadata")
    if schema != F.FEATURE_SCHEMA or meta.get("features") != list(F.FEATURES):
        raise ModelFileError(f"{where}: feature schema {schema}, this watchdog uses "
                             f"{F.FEATURE_SCHEMA}: train the model again")
    return meta


def _check_shapes(z: Archive, where: str) -> None:
    """Every array's dtype and shape from its header, before any is read: trees and
    nodes per tree within their caps, the five tree arrays alike, the feature vectors
    one value per feature, the baseline two per GPU."""
    m = z.members
    need = (*ARRAYS, *VECTORS, "base_coef")
    missing = [k for k in need if k not in m]
    if missing:
        raise ModelFileError(f"{where}: missing {', '.join(missing)}")
    shape = m["feature"].shape
    if len(shape) != 2 or not 0 < shape[0] <= MAX_TREES or not 0 < shape[1] <= MAX_NODES:
        raise ModelFileError(f"{where}: tree arrays of shape {shape}: at most {MAX_TREES} "
                             f"trees of {MAX_NODES} nodes")
    kinds = {"feature": "i", "left": "i", "right": "i", "threshold": "f", "leaf_path": "f"}
    if any(m[k].shape != shape or m[k].dtype.kind not in kinds[k] for k in ARRAYS):
        raise ModelFileError(f"{where}: malformed tree arrays")
    nf = len(F.FEATURES)
    if any(m[k].shape != (nf,) or m[k].dtype.kind not in "fiu" for k in VECTORS):
        raise ModelFileError(f"{where}: malformed feature vectors")
    coef = m["base_coef"].shape
    if len(coef) != 2 or coef[1] not in (2, 4, 6) or coef[0] > MAX_BASELINE_GPUS:
        raise ModelFileError(f"{where}: malformed per-GPU baseline")


VECTORS = ("fill", "center", "scale", "lo", "hi", "unit")


def _finite(meta: JsonDoc, key: str, where: str) -> float:
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
        raise ModelFileError(f"{where}: {key} {v!r} is not a finite number")
    return float(v)


def _build(a: dict[str, Array], meta: JsonDoc, where: str,
           gpu_model: str | None) -> Model:
    base_uuids = meta.get("baseline_uuids")
    coef = a["base_coef"]
    if (not isinstance(base_uuids, list) or not all(isinstance(u, str) for u in base_uuids)
            or coef.shape[0] != len(base_uuids) or coef.shape[1] not in (2, 4, 6)
            or coef.dtype.kind != "f"
            or not np.isfinite(coef).all()):
        raise ModelFileError(f"{where}: malformed per-GPU baseline")
    mine = str(meta.get("gpu_model") or "unknown")
    if gpu_model and mine != "unknown" and gpu_model != "unknown" and mine != gpu_model:
        raise ModelFileError(f"{where}: trained on {mine}, these GPUs are {gpu_model}: "
                             "train a model on this kind of GPU")
    feat, thr, left, right, leaf = (a[k] for k in ARRAYS)
    shape = feat.shape
    nf = len(F.FEATURES)
    if (feat.min() < -1 or feat.max() >= nf or left.min() < 0 or right.min() < 0
            or left.max() >= shape[1] or right.max() >= shape[1]):
        raise ModelFileError(f"{where}: tree indices out of range (tampered file)")
    if not np.isfinite(leaf).all():
        raise ModelFileError(f"{where}: a leaf's path length is not a finite number")
    if not all(np.isfinite(a[k]).all() for k in VECTORS if k not in ("lo", "hi")):
        raise ModelFileError(f"{where}: a feature's fill, centre, scale or unit is not a "
                             "finite number")
    threshold = _finite(meta, "threshold", where)
    if not 0 < threshold <= 1:
        raise ModelFileError(f"{where}: threshold {threshold!r} is outside (0, 1] (scores "
                             "are 0-1): the model would never or always fire")
    calibration = meta.get("calibration") or {}
    if not isinstance(calibration, dict):
        raise ModelFileError(f"{where}: calibration is not a mapping")
    try:
        forest = Forest(feat.astype(np.int64), thr.astype(np.float64), left.astype(np.int64),
                        right.astype(np.int64), leaf.astype(np.float64),
                        int(_finite(meta, "max_depth", where)), _finite(meta, "norm", where))
        model = Model(forest=forest, threshold=threshold, gpu_model=mine,
                      trained_from=_finite(meta, "trained_from", where),
                      trained_to=_finite(meta, "trained_to", where),
                      step=_finite(meta, "step", where),
                      window=_finite(meta, "window", where), fill=a["fill"].astype(np.float64),
                      center=a["center"].astype(np.float64),
                      scale=a["scale"].astype(np.float64),
                      lo=a["lo"].astype(np.float64), hi=a["hi"].astype(np.float64),
                      unit=a["unit"].astype(np.float64),
                      calibration=dict(calibration), schema=int(meta["schema"]),
                      base_uuids=tuple(base_uuids), base_coef=coef.astype(np.float64))
    except (KeyError, TypeError, ValueError):
        raise ModelFileError(f"{where}: incomplete metadata") from None
    if (not 0 < forest.max_depth <= 64 or not forest.norm > 0
            or model.unit is None or not bool(np.all(model.unit > 0))
            or not model.step > 0 or not model.window > 0):
        raise ModelFileError(f"{where}: implausible tree depth, normaliser, step or window")
    return model


def describe(model: Model) -> JsonDoc:
    """A JSON-ready summary (status, train output)."""
    return {"gpu_model": model.gpu_model, "schema": model.schema,
            "trained_from": model.trained_from, "trained_to": model.trained_to,
            "threshold": round(model.threshold, 4), "trees": int(model.forest.feature.shape[0]),
            "windows": model.calibration.get("windows"),
            "baseline_gpus": len(model.base_uuids)}
