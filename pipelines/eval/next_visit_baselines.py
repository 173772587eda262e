"""The rankings a next-visit model is read against, on the same patients (pure NumPy / SciPy; no model):

- **frequency prior**: the same ranking for everyone, the categories by how many fine-tuning training
  patients' last visits hold them (:func:`prior_counts`; ties by category index);
- **history's categories**: the categories of the patient's history, by the number of history visits they
  occur in, then by recency (the latest visit holding them), topped up by the prior (:func:`history_ranking`);
- **co-occurrence**: every category b scored by ``Σ_a P(b in visit v+1 | a in visit v)`` over the
  history's categories a, the conditional shares counted over the consecutive visit pairs of the
  pretraining patients (:func:`transition_matrix`), ties (and categories no history category leads to) by
  the prior;
- **ceiling** (the demo only): the generator's true probability of each category in the last visit given
  the patient's latent state (``ground_truth/next_visit_probabilities.parquet``, the top
  :data:`pipelines.demo.cohort_truth.NEXT_VISIT_TOP` per patient; :func:`ceiling_ranking`). Ranking by it
  maximises the expected number of true categories in the top k, so no ranking from the history beats it
  on pooled recall in expectation; for recall averaged over patients it is the same ranking, near but not
  provably at the optimum (the denominator |T_p| is random too).

Every ranking is ``(P, K)`` category indices, best first (K = the largest k scored).

Dimension legend: P patients, C categories, K ranked categories, V visits with a successor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from pipelines.data.next_visit import CategorySpace, NextVisitSet, VisitCategories
from pipelines.errors import InputFileError

__all__ = ["CEILING_FILE", "ceiling_ranking", "cooccurrence_ranking", "history_ranking", "prior_counts",
           "prior_ranking", "rank", "transition_matrix"]  # fmt: skip

CEILING_FILE = "next_visit_probabilities.parquet"
CEILING_COLUMNS = ("hospital", "subject_id", "category", "probability")


def rank(score: np.ndarray, tie: np.ndarray, k: int) -> np.ndarray:
    """``(P, k)`` the categories of the highest ``score (P, C)`` first; equal scores by the larger
    ``tie (C,)`` (the prior), then by category index."""
    p, c = score.shape
    k = min(k, c)
    order = np.lexsort((np.broadcast_to(-np.asarray(tie, np.float64), (p, c)), -score), axis=-1)
    return order[:, :k].astype(np.int64)


def prior_counts(target: sp.csr_matrix) -> np.ndarray:
    """``(C,)`` how many patients' last visits hold each category."""
    return np.asarray((target > 0).sum(0)).ravel().astype(np.float64)


def prior_ranking(prior: np.ndarray, n: int, k: int) -> np.ndarray:
    """The frequency prior's ranking for ``n`` patients."""
    return np.repeat(rank(np.zeros((1, prior.size)), prior, k), n, axis=0)


def history_ranking(s: NextVisitSet, prior: np.ndarray, k: int) -> np.ndarray:
    """The history's categories by visits holding them, then recency, then the prior (which also tops the
    ranking up past the history)."""
    visits = s.history_visits.toarray().astype(np.float64)  # (P, C)
    last = s.history_last.toarray().astype(np.float64)  # 1 + latest history visit, 0 where absent
    return rank(visits * (last.max(initial=0.0) + 1) + last, prior, k)


def transition_matrix(vc: VisitCategories, n_categories: int) -> sp.csr_matrix:
    """``(C, C)`` P(b in visit v+1 | a in visit v) over the consecutive visit pairs of ``vc``'s patients
    (row a: the share of the visits holding a, followed by another visit, whose next visit holds b)."""
    vid = vc.patient * (int(vc.visit.max(initial=0)) + 2) + vc.visit  # one id per (patient, visit)
    uniq, row = np.unique(vid, return_inverse=True)
    a = sp.csr_matrix((np.ones(vid.size, np.float32), (row, vc.category)), shape=(uniq.size, n_categories))
    succ = np.minimum(np.searchsorted(uniq, uniq + 1), max(uniq.size - 1, 0))
    ok = np.flatnonzero(uniq[succ] == uniq + 1) if uniq.size else np.zeros(0, np.int64)  # has a next visit
    m_now = a[ok]  # (V, C)
    pairs = (m_now.T @ a[succ[ok]]).tocsr()  # (C, C) counts of (a now, b next)
    n_a = np.asarray(m_now.sum(0)).ravel()
    inv = np.where(n_a > 0, 1.0 / np.maximum(n_a, 1), 0.0)
    return (sp.diags(inv) @ pairs).tocsr()


def cooccurrence_ranking(
    s: NextVisitSet, transitions: sp.csr_matrix, prior: np.ndarray, k: int
) -> np.ndarray:
    """Categories by ``Σ_a P(b next | a)`` over the history's categories a, then the prior."""
    h = (s.history_visits > 0).astype(np.float64)  # (P, C)
    score = np.asarray((h @ transitions).todense())  # (P, C)
    return rank(score, prior, k)


def ceiling_ranking(
    ground_truth: str | Path, hospital: str | None, subject_id: np.ndarray, space: CategorySpace, k: int
) -> np.ndarray:
    """The generator's true ranking of each patient's last-visit categories (module docstring), ``(P, k)``
    (-1 pads where the file holds fewer categories of the space). Raises :class:`InputFileError` when the
    file, the hospital or a patient is missing."""
    p = Path(ground_truth) / CEILING_FILE
    if not p.is_file():
        raise InputFileError(
            p, "missing; the next-visit ceiling needs the cohort's true category probabilities"
        )
    t = pq.read_table(p)
    missing = [c for c in CEILING_COLUMNS if c not in t.column_names]
    if missing:
        raise InputFileError(p, f"missing column(s) {missing}", expected=", ".join(CEILING_COLUMNS))
    if hospital is None:
        raise InputFileError(p, "the dataset's manifest names no reader with a ground-truth hospital")
    wanted = pa.array(np.unique(subject_id).astype(np.int64))
    t = t.filter(pc.and_(pc.equal(t["hospital"], hospital), pc.is_in(t["subject_id"], value_set=wanted)))
    sid = t.column("subject_id").to_numpy().astype(np.int64)
    names = t.column("category").combine_chunks()
    if not pa.types.is_dictionary(names.type):
        names = pc.dictionary_encode(names)
    cat = space.index(names.dictionary.to_pylist())[names.indices.to_numpy(zero_copy_only=False)]
    prob = t.column("probability").to_numpy().astype(np.float64)
    order = np.lexsort((-prob, sid))  # by patient, most probable first
    sid, cat = sid[order], cat[order]
    start = np.searchsorted(sid, subject_id, side="left")
    end = np.searchsorted(sid, subject_id, side="right")
    if np.any(end == start):
        miss = subject_id[end == start]
        raise InputFileError(
            p, f"{miss.size} patient(s) of hospital {hospital!r} missing, e.g. subject_id {miss[:3].tolist()}"
        )
    out = np.full((subject_id.size, k), -1, dtype=np.int64)
    for i, (a, b) in enumerate(zip(start, end, strict=True)):
        row = cat[a:b]
        row = row[row >= 0][:k]
        out[i, : row.size] = row
    return out
