"""Next-visit diagnosis labels from a tokenized dataset: the ICD categories of each patient's last visit
(the target) and of the visits before it (the history), as GRAM's next-visit task reads them, here with
the last visit as the "next" one and the fine-tuning tasks' input (``input_ids[:last_visit_start]``) as the
history.

A **category** is the three-character category of an ICD-10-CM code (``I10``; ``E11`` of ``E1165``), and
of an ICD-9-CM code its own category: three digits (``401`` of ``4019``), ``V`` and two digits (``V45`` of
``V4581``), ``E`` and three digits (``E880`` of ``E8809``). ICD-9-CM and ICD-10-CM categories are separate
labels, each named with its vocabulary (``ICD9CM:401``, ``ICD10CM:I10``): nothing here maps one onto the
other. Tokens of any other vocabulary (the special tokens) have no category.

The labels are read from the dataset's tokens only, so a code the program does not know (dropped by
``prepare``, or ``[UNK]``) is in no label. A patient with a single visit has no history and is left out,
as is one whose last visit holds no categorised code; both are counted (:attr:`NextVisitSet.counts`).

Dimension legend: N concepts, C categories, P patients, E (patient, visit, category) entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from pipelines.errors import PipelineError

__all__ = ["CategorySpace", "NextVisitSet", "VisitCategories", "category_of", "next_visit_set",
           "visit_categories"]  # fmt: skip

CATEGORY_VOCABULARIES = ("ICD10CM", "ICD9CM")  # the vocabularies whose codes have a category
COLUMNS = ("subject_id", "input_ids", "segment_ids")


def category_of(vocabulary: str, code: str) -> str | None:
    """The category of a (vocabulary, code) pair (module docstring), None when it has none. The code may
    be dotted or dotless; the vocabulary is ``ICD10CM`` or ``ICD9CM`` (``ICD-10-CM`` reads the same)."""
    voc = vocabulary.upper().replace("-", "")
    c = code.replace(".", "").strip().upper()
    if voc == "ICD10CM":
        return c[:3] if len(c) >= 3 else None
    if voc == "ICD9CM":
        n = 4 if c.startswith("E") else 3
        return c[:n] if len(c) >= n else None
    return None


@dataclass(frozen=True)
class CategorySpace:
    """The categories of a program's concepts: ``names (C,)`` (``"ICD10CM:I10"``, sorted) and
    ``of_concept (N,)``, each concept's category index (-1: none)."""

    names: np.ndarray
    of_concept: np.ndarray

    @classmethod
    def of_program(cls, vocabularies: list[str], codes: list[str]) -> CategorySpace:
        """The space of a program's concepts (its ``concept_vocabularies`` and ``concept_codes``)."""
        if len(vocabularies) != len(codes):
            raise PipelineError(f"{len(vocabularies)} vocabularies for {len(codes)} codes")
        label = [
            None if (cat := category_of(v, c)) is None else f"{v.upper().replace('-', '')}:{cat}"
            for v, c in zip(vocabularies, codes, strict=True)
        ]
        names = np.array(sorted({x for x in label if x is not None}), dtype=object)
        index = {n: i for i, n in enumerate(names)}
        of_concept = np.array([-1 if x is None else index[x] for x in label], dtype=np.int64)
        return cls(names, of_concept)

    def __len__(self) -> int:
        return len(self.names)

    def index(self, names: list[str] | np.ndarray) -> np.ndarray:
        """``(len(names),)`` the index of each category name, -1 where the space has none."""
        pos = np.searchsorted(self.names, np.asarray(names, dtype=object))
        pos = np.minimum(pos, max(len(self.names) - 1, 0))
        found = (self.names[pos] == np.asarray(names, dtype=object)) if len(self.names) else False
        return np.where(found, pos, -1).astype(np.int64)


@dataclass
class VisitCategories:
    """The distinct categories of every visit of some patients, entries sorted by (patient, visit,
    category); ``target`` marks the entries of the last visit (from ``last_visit_start``)."""

    subject_id: np.ndarray  # (P,) int64
    patient: np.ndarray  # (E,) int64 index into subject_id
    visit: np.ndarray  # (E,) int64 visit number (segment id)
    category: np.ndarray  # (E,) int64 index into the CategorySpace
    target: np.ndarray  # (E,) bool: the entry is in the patient's last visit

    @property
    def n(self) -> int:
        return int(self.subject_id.size)


def visit_categories(table: pa.Table, rows: np.ndarray, space: CategorySpace) -> VisitCategories:
    """The visit categories of rows ``rows`` of a ``patients.parquet`` table (``subject_id``,
    ``input_ids``, ``segment_ids``, and ``last_visit_start`` when present: without it a sequence's last
    segment is its last visit). Position 0 (``[CLS]``) and tokens without a category are left out."""
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise PipelineError(f"patients table lacks column(s) {missing}; the next-visit labels need them")
    t = table.take(pa.array(np.asarray(rows, dtype=np.int64)))
    ids = t.column("input_ids").combine_chunks()
    off = ids.offsets.to_numpy().astype(np.int64)
    tok = ids.values.slice(off[0], off[-1] - off[0]).to_numpy(zero_copy_only=False).astype(np.int64)
    seg_col = t.column("segment_ids").combine_chunks()
    seg_off = seg_col.offsets.to_numpy().astype(np.int64)
    if not np.array_equal(np.diff(seg_off), np.diff(off)):
        raise PipelineError("segment_ids and input_ids differ in length for some patient")
    seg = seg_col.values.slice(seg_off[0], seg_off[-1] - seg_off[0])
    seg = seg.to_numpy(zero_copy_only=False).astype(np.int64)
    length = np.diff(off)
    patient = np.repeat(np.arange(len(length), dtype=np.int64), length)
    pos = np.arange(tok.size, dtype=np.int64) - np.repeat(off[:-1] - off[0], length)
    if "last_visit_start" in t.column_names:
        start = t.column("last_visit_start").fill_null(1).to_numpy(zero_copy_only=False).astype(np.int64)
    else:  # the first position of the last segment
        last_seg = np.full(len(length), -1, dtype=np.int64)
        np.maximum.at(last_seg, patient, seg)
        first = np.full(len(length), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, patient[seg == last_seg[patient]], pos[seg == last_seg[patient]])
        start = np.maximum(first, 1)
    if tok.size and (tok.min() < 0 or tok.max() >= len(space.of_concept)):
        raise PipelineError(f"input_ids out of range for a space of {len(space.of_concept)} concepts")
    cat = space.of_concept[tok] if tok.size else np.zeros(0, dtype=np.int64)
    keep = (pos > 0) & (cat >= 0)
    is_target = pos >= start[patient]
    # one entry per (patient, visit, category); a target entry is one of the last visit
    n_cat = max(len(space), 1)
    s = int(seg.max(initial=0)) + 1
    key = (patient[keep] * s + seg[keep]) * n_cat + cat[keep]
    key, first_at = np.unique(key, return_index=True)
    target = is_target[keep][first_at]
    return VisitCategories(
        t.column("subject_id").to_numpy().astype(np.int64),
        key // (s * n_cat),
        (key // n_cat) % s,
        key % n_cat,
        target,
    )


@dataclass
class NextVisitSet:
    """One split's patients with a history and a target: each patient's target categories and, per
    category of its history, in how many history visits it occurs and the latest such visit."""

    split: str
    subject_id: np.ndarray  # (P,) int64, in the order of the rows given
    target: sp.csr_matrix  # (P, C) float32, 1 where the category is in the last visit
    history_visits: sp.csr_matrix  # (P, C) float32, history visits holding the category
    history_last: sp.csr_matrix  # (P, C) float32, 1 + the latest history visit (segment id) holding it
    keep: np.ndarray  # (P_given,) bool: which of the rows given are in the set
    counts: dict = field(default_factory=dict)  # patients given, kept, left out by reason

    @property
    def n(self) -> int:
        return int(self.subject_id.size)

    def target_sets(self) -> list[np.ndarray]:
        """Each patient's target categories, ascending."""
        t = self.target
        return [t.indices[t.indptr[i] : t.indptr[i + 1]] for i in range(self.n)]

    def subset(self, keep: np.ndarray) -> NextVisitSet:
        """The patients where ``keep (P,)`` is True (counts of the whole set kept)."""
        idx = np.flatnonzero(keep)
        whole = np.flatnonzero(self.keep)
        mask = np.zeros_like(self.keep)
        mask[whole[idx]] = True
        return NextVisitSet(
            self.split,
            self.subject_id[idx],
            self.target[idx],
            self.history_visits[idx],
            self.history_last[idx],
            mask,
            {**self.counts, "kept": int(idx.size)},
        )


def next_visit_set(table: pa.Table, rows: np.ndarray, space: CategorySpace, split: str = "") -> NextVisitSet:
    """The next-visit labels of rows ``rows`` of a ``patients.parquet`` table: patients with a history (at
    least one categorised code before ``last_visit_start``) and a target (at least one in the last visit)."""
    vc = visit_categories(table, rows, space)
    p, c = vc.n, len(space)
    hist = ~vc.target
    ones = np.ones(int(vc.target.sum()), np.float32)
    target = sp.csr_matrix((ones, (vc.patient[vc.target], vc.category[vc.target])), shape=(p, c))
    visits = sp.csr_matrix(
        (np.ones(int(hist.sum()), np.float32), (vc.patient[hist], vc.category[hist])), shape=(p, c)
    )  # duplicates summed: one per history visit
    last = sp.coo_matrix(
        ((vc.visit[hist] + 1).astype(np.float32), (vc.patient[hist], vc.category[hist])), (p, c)
    )
    last = _max_duplicates(last)
    has_history = np.diff(visits.indptr) > 0
    has_target = np.diff(target.indptr) > 0
    keep = has_history & has_target
    idx = np.flatnonzero(keep)
    counts = {
        "patients": p,
        "kept": int(keep.sum()),
        "no_history": int((~has_history).sum()),  # one visit (or no categorised code before the last)
        "no_target": int((has_history & ~has_target).sum()),
    }
    return NextVisitSet(split, vc.subject_id[idx], target[idx], visits[idx], last[idx], keep, counts)


def _max_duplicates(m: sp.coo_matrix) -> sp.csr_matrix:
    """A CSR matrix whose duplicate (row, column) entries keep their maximum (scipy sums them)."""
    if m.nnz == 0:
        return sp.csr_matrix(m.shape, dtype=np.float32)
    order = np.lexsort((-m.data, m.col, m.row))
    r, c, v = m.row[order], m.col[order], m.data[order]
    first = np.r_[True, (r[1:] != r[:-1]) | (c[1:] != c[:-1])]
    return sp.csr_matrix((v[first], (r[first], c[first])), shape=m.shape)
