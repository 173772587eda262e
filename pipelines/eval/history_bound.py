"""The history bound of the chapters task, where a generator's truth is at hand (the demo).

The history's chapters regression (:func:`pipelines.eval.baselines.history_chapter_features`) reads per ICD
chapter how many distinct codes a history holds, how many of them at two visits or more and how many at
its latest visit. A model that reads the codes themselves can only beat it by what a code says beyond its
chapter. In the demo's generator one fact of a code reaches the chapters labels and is not its chapter: the
*chronic share* of its condition (how likely the condition is to be coded again at the last visit,
``<ground_truth>/condition_catalog.parquet``, ``chronic``; the codes' conditions in ``codes.parquet``).
Everything else the labels follow (the patient's body systems, which chronic conditions are active) is
latent: the ceiling knows it, no history shows it.

:func:`truth_features` gives the regression that fact exactly: per chapter slot, ``log1p`` of the chronic
shares summed over the history's distinct codes and over those of its latest visit. The same regression,
fitted and chosen the same way on the chapter counts plus these, shows how far any reader of the codes
could get above the counts: if the truth's own chronic shares add nothing, no embedding of the codes can
add more than that on these labels, and the gap to the ceiling is the latent state.

The baselines' record (``history_bound``, :func:`pipelines.eval.baselines.compute_baselines`) holds, per
scored split, the macro AUROC and F1 of the chapter-counts regression (``counts``) and of the one with the
truth's shares (``with_truth``), and the difference of each.

Dimension legend: P patients, N concepts, S chapter slots.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pipelines.data.sequences import Sequences
from pipelines.errors import InputFileError

__all__ = ["CATALOG_FILE", "CODES_FILE", "chronic_shares", "truth_features"]

CATALOG_FILE = "condition_catalog.parquet"  # condition -> chronic share (generator's truth)
CODES_FILE = "codes.parquet"  # every diagnosis row with its condition (generator's truth)
VERSION_OF = {"ICD10CM": 10, "ICD9CM": 9}  # a program vocabulary -> icd_version of the truth's rows


def chronic_shares(ground_truth: str | Path, codes: list[str], vocabularies: list[str]) -> np.ndarray | None:
    """Each concept's condition's chronic share ``(N,)`` float64 (NaN where the truth has no row of its
    code), from the truth's catalog and diagnosis rows; None when ``ground_truth`` lacks those files."""
    gt = Path(ground_truth)
    cat_path, codes_path = gt / CATALOG_FILE, gt / CODES_FILE
    if not (cat_path.is_file() and codes_path.is_file()):
        return None
    cat = pq.read_table(cat_path)
    for path, schema, cols in (
        (cat_path, cat.schema, ("condition", "chronic")),
        (codes_path, pq.read_schema(codes_path), ("icd_code", "icd_version", "condition")),
    ):
        missing = [c for c in cols if c not in schema.names]
        if missing:
            raise InputFileError(path, f"missing column(s) {', '.join(missing)}", expected=", ".join(cols))
    chronic = dict(zip(cat.column("condition").to_pylist(), cat.column("chronic").to_pylist(), strict=True))
    rows = (
        pq.read_table(codes_path, columns=["icd_code", "icd_version", "condition"])
        .group_by(["icd_code", "icd_version", "condition"])
        .aggregate([])
    )  # distinct (code, version, condition): a code belongs to one condition
    cond = {
        (int(v), c): k
        for c, v, k in zip(
            rows.column("icd_code").to_pylist(),
            rows.column("icd_version").to_pylist(),
            rows.column("condition").to_pylist(),
            strict=True,
        )
    }
    out = np.full(len(codes), np.nan)
    for i, (code, voc) in enumerate(zip(codes, vocabularies, strict=True)):
        k = cond.get((VERSION_OF.get(voc, 0), code))
        if k is not None and chronic.get(k) is not None:
            out[i] = float(chronic[k])
    return out


def truth_features(
    seqs: Sequences, special: np.ndarray, chapters: np.ndarray, shares: np.ndarray, n_slots: int
) -> np.ndarray:
    """``(P, 2S)``: per chapter slot h, ``log1p`` of the chronic shares summed over the history's distinct
    codes of slot h, then over those of its latest visit (a code without a share counts 0).

    Shapes: ``special`` ``(N,)`` bool, ``chapters`` ``(N,)`` slot per concept in ``[0, S)``, ``shares``
    ``(N,)`` (:func:`chronic_shares`)."""
    ids, seg = seqs.input_ids.numpy(), seqs.segment_ids.numpy()  # (P, T)
    keep = seqs.attention_mask.numpy().astype(bool) & ~special[ids]
    p = len(seqs)
    out = np.zeros((p, 2 * n_slots))
    r, c = np.nonzero(keep)
    if not len(r):
        return out
    code, visit = ids[r, c].astype(np.int64), seg[r, c].astype(np.int64)
    last = np.full(p, -1, np.int64)
    np.maximum.at(last, r, visit)
    w = np.nan_to_num(shares, nan=0.0)
    rc = np.unique(np.stack([r, code], 1), axis=0)  # distinct (patient, code)
    np.add.at(out, (rc[:, 0], chapters[rc[:, 1]]), w[rc[:, 1]])
    at_last = visit == last[r]
    rl = np.unique(np.stack([r[at_last], code[at_last]], 1), axis=0)  # distinct codes of the latest visit
    np.add.at(out, (rl[:, 0], n_slots + chapters[rl[:, 1]]), w[rl[:, 1]])
    return np.log1p(out)
