"""Scoring convention, the model file's round trip, and every refusal path."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from anomaly_helpers import healthy_model, sim_grid
from sklearn.ensemble import IsolationForest

from watchdog.anomaly import features as F
from watchdog.anomaly import persist
from watchdog.anomaly.score import from_sklearn


def test_one_sign_flip_higher_is_more_anomalous_and_equal_to_sklearn() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, len(F.FEATURES)))
    est = IsolationForest(n_estimators=30, max_samples=128, random_state=0).fit(x)
    probe = np.vstack([x[:20], np.full((1, x.shape[1]), 8.0)])
    ours = from_sklearn(est).scores(probe)
    assert np.allclose(ours, -est.score_samples(probe), atol=1e-12)
    assert ours[-1] > ours[:-1].max()  # the outlier scores highest


def test_round_trip_scores_identically(tmp_path: Path) -> None:
    model = healthy_model()
    _, feats = sim_grid("sim:healthy", 20.0, seed=5)
    rows = feats[-1]
    path = tmp_path / "m.wdm"
    size = persist.save(model, path)
    back = persist.load(path, "NVIDIA H100 80GB HBM3")
    assert size == path.stat().st_size and size < 1_000_000
    assert np.array_equal(model.scores(rows), back.scores(rows))
    assert back.threshold == model.threshold and back.calibration == model.calibration
    assert (back.trained_from, back.trained_to) == (model.trained_from, model.trained_to)


def _rewrite(data: bytes, edit) -> bytes:  # type: ignore[no-untyped-def]
    """Unpack a model file, let ``edit`` change its arrays, re-pack with a valid hash."""
    payload = data.split(b"\n", 2)[2]
    with np.load(io.BytesIO(payload)) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    p = buf.getvalue()
    return persist.MAGIC + hashlib.sha256(p).hexdigest().encode() + b"\n" + p


def _meta(arrays: dict, **changes: object) -> None:  # type: ignore[type-arg]
    meta = json.loads(arrays["meta"].tobytes())
    meta.update(changes)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)


def test_refusals(tmp_path: Path) -> None:
    good = persist.dumps(healthy_model())

    def refused(data: bytes, gpu: str | None = None) -> str:
        f = tmp_path / "bad.wdm"
        f.write_bytes(data)
        with pytest.raises(persist.ModelFileError) as e:
            persist.load(f, gpu)
        msg = str(e.value)
        assert "\n" not in msg and str(f) in msg
        return msg

    assert "feature schema 99" in refused(_rewrite(good, lambda a: _meta(a, schema=99)))
    assert "trained on NVIDIA H100" in refused(good, "NVIDIA A100-PCIE-40GB")
    flipped = bytearray(good)
    flipped[-100] ^= 0xFF
    assert "checksum" in refused(bytes(flipped))
    assert "checksum" in refused(good[:-10])

    def oob(a: dict) -> None:  # type: ignore[type-arg]
        a["left"] = a["left"].copy()
        a["left"][0, 0] = 10 ** 6
    assert "out of range" in refused(_rewrite(good, oob))


class _Boom:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (Path(self.target),))


def test_a_file_that_tries_to_run_code_is_refused_and_never_runs(tmp_path: Path) -> None:
    witness = tmp_path / "ran"
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps(_Boom(str(witness))))
    with pytest.raises(persist.ModelFileError, match="not a watchdog anomaly model"):
        persist.load(plain)
    # the same pickle inside an npz with a valid header and checksum
    def inject(a: dict) -> None:  # type: ignore[type-arg]
        a["fill"] = np.array([_Boom(str(witness))], dtype=object)
    payload_file = tmp_path / "inside.wdm"
    good = persist.dumps(healthy_model())
    payload = good.split(b"\n", 2)[2]
    with np.load(io.BytesIO(payload)) as z:
        arrays = {k: z[k] for k in z.files}
    inject(arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # allow_pickle is on when saving
    p = buf.getvalue()
    payload_file.write_bytes(persist.MAGIC + hashlib.sha256(p).hexdigest().encode() + b"\n" + p)
    with pytest.raises(persist.ModelFileError, match="pickled objects"):
        persist.load(payload_file)
    assert not witness.exists()
