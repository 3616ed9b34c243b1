"""Scoring: every GPU of a node in one batched call, one sign convention.

The isolation forest is held as padded arrays (:class:`Forest`), walked for all trees
and all rows at once in numpy: no per-tree Python loop, so 64 GPUs cost about what 8
do. **Higher = more anomalous**: the score is ``2 ** (-E[path length] / c(n))``, the
original paper's ``s(x, n)`` in (0, 1]. scikit-learn's ``score_samples`` returns its
negative; that is the one sign flip, made here and nowhere else (``tests`` check the two
agree).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from watchdog.untyped import Array


def average_path_length(n: Array | float) -> Array:
    """c(n): mean path length of an unsuccessful search in a BST of ``n`` points
    (c(1) = 0, c(2) = 1), as in Liu et al. 2008 and scikit-learn."""
    n = np.asarray(n, dtype=np.float64)
    out = np.zeros_like(n)
    two = n == 2
    big = n > 2
    out[two] = 1.0
    nb = n[big]
    out[big] = 2.0 * (np.log(nb - 1.0) + np.euler_gamma) - 2.0 * (nb - 1.0) / nb
    return out


@dataclass
class Forest:
    """Trees as padded ``(n_trees, n_nodes)`` arrays. ``feature`` -1 marks a leaf;
    ``leaf_path``: depth + c(samples in the leaf) at leaves; ``norm``: c(max_samples)."""

    feature: Array
    threshold: Array
    left: Array
    right: Array
    leaf_path: Array
    max_depth: int
    norm: float

    def scores(self, x: Array) -> Array:
        """Anomaly score of each row of ``x`` (N, F): higher = more anomalous."""
        x = np.asarray(x, dtype=np.float64)
        n_trees = self.feature.shape[0]
        n = x.shape[0]
        tree = np.arange(n_trees)[:, None]
        rows = np.arange(n)[None, :]
        node = np.zeros((n_trees, n), dtype=np.int64)
        for _ in range(self.max_depth):
            feat = self.feature[tree, node]
            inner = feat >= 0
            if not inner.any():
                break
            val = x[rows, np.maximum(feat, 0)]
            go_left = val <= self.threshold[tree, node]
            nxt = np.where(go_left, self.left[tree, node], self.right[tree, node])
            node = np.where(inner, nxt, node)
        depth = self.leaf_path[tree, node].mean(axis=0)
        return np.power(2.0, -depth / self.norm)


def from_sklearn(est: object) -> Forest:
    """Pad a fitted ``sklearn.ensemble.IsolationForest`` into a :class:`Forest`
    (feature indices mapped through each tree's feature subset)."""
    trees = est.estimators_  # type: ignore[attr-defined]
    subsets = est.estimators_features_  # type: ignore[attr-defined]
    m = max(t.tree_.node_count for t in trees)
    k = len(trees)
    feature = np.full((k, m), -1, dtype=np.int32)
    threshold = np.zeros((k, m))
    left = np.zeros((k, m), dtype=np.int32)
    right = np.zeros((k, m), dtype=np.int32)
    leaf_path = np.zeros((k, m))
    max_depth = 0
    for i, (t, sub) in enumerate(zip(trees, subsets, strict=True)):
        tr = t.tree_
        c = tr.node_count
        is_leaf = tr.children_left == -1
        feature[i, :c] = np.where(is_leaf, -1, np.asarray(sub)[np.maximum(tr.feature, 0)])
        threshold[i, :c] = tr.threshold
        left[i, :c] = np.where(is_leaf, 0, tr.children_left)
        right[i, :c] = np.where(is_leaf, 0, tr.children_right)
        depth = np.zeros(c)
        for j in range(c):  # parents come before children in sklearn's node order
            if not is_leaf[j]:
                depth[tr.children_left[j]] = depth[tr.children_right[j]] = depth[j] + 1
        leaf_path[i, :c] = np.where(is_leaf, depth + average_path_length(
            tr.n_node_samples.astype(np.float64)), 0.0)
        max_depth = max(max_depth, int(depth.max()))
    norm = float(average_path_length(np.array([float(est.max_samples_)]))[0])  # type: ignore[attr-defined]
    return Forest(feature, threshold, left, right, leaf_path, max_depth + 1, norm)


def prepare(x: Array, fill: Array) -> Array:
    """Replace NaN features (a metric this GPU does not report) by the training
    median, so a missing reading reads as normal rather than extreme."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(x), fill, x)
