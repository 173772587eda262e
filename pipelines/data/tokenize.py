"""Tokenization of the common long table against a compiled program (pure numpy/pyarrow, no I/O).

Dimension legend: R code rows, P patients, V visits, T tokens, N concepts.

A code is looked up by (vocabulary, dotless code) in the program's ``concepts.parquet``; codes the
program does not know are dropped (the paper's choice), counted and listed. A visit left without
codes disappears; a patient left without codes is dropped (reason ``no_known_codes``). Each sequence is
``[CLS]`` + codes; the most recent visits are kept so that it fits ``max_len`` (a last visit longer than
``max_len - 1`` keeps its first codes, by ``seq``) and at most ``max_visits`` visits. Segment ids number
the kept visits 0.. in time order (``[CLS]`` shares segment 0), so they stay below ``max_visits``.
The sequence's last visit (``last_visit_index``) is the visit the labels describe; ``visit_times`` holds
the source's time of each kept visit, in segment order (what a MEDS label's ``prediction_time`` cuts at).

``SNOMED`` rows (MEDS ``SNOMED/<sctid>``) are first resolved to one token each
(:func:`resolve_snomed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ontology_compiler.api import SPECIAL_TOKENS

from .config import UNKNOWN_CODES, PrepareConfig

CLS_ID = SPECIAL_TOKENS.index("[CLS]")  # the specials are concepts 0..4 in this order (program format)


@dataclass
class Tokenized:
    """Sequences as flat arrays (CSR by patient) plus what was dropped on the way."""

    subject_id: np.ndarray  # (P,) int64
    offsets: np.ndarray  # (P+1,) int64 into input_ids
    input_ids: np.ndarray  # (T,) int32
    segment_ids: np.ndarray  # (T,) int16
    n_visits: np.ndarray  # (P,) int32 visits in the sequence
    last_visit_start: np.ndarray  # (P,) int32 offset of the last visit within the sequence
    last_visit_index: np.ndarray  # (P,) int32 the source's visit_index of that last visit
    truncated: np.ndarray  # (P,) bool: visits or codes were cut to fit
    pair_patient: np.ndarray  # (U,) int64 patient index of each distinct (patient, concept) before truncation
    pair_concept: np.ndarray  # (U,) int32
    unknown: pa.Table  # vocabulary, code, occurrences, patients
    counts: dict = field(default_factory=dict)
    # (sum n_visits,) datetime64[us]: the time of each kept visit, patient after patient in segment order (CSR
    # by n_visits); NaT where the source has no visit times (eICU)
    visit_times: np.ndarray | None = None
    visit_known_times: np.ndarray | None = None  # (V,) when each kept visit's codes are known


def lookup(events: pa.Table, concepts: pa.Table, unk_id: int | None = None) -> np.ndarray:
    """(R,) int32 concept id of each event row; -1 where unknown (or ``unk_id`` when given)."""
    keys = pc.binary_join_element_wise(concepts["vocabulary"], concepts["code"], "|")
    ev = pc.binary_join_element_wise(events["vocabulary"], events["code"], "|")
    idx = pc.index_in(ev, value_set=keys)
    ids = concepts["concept_id"].to_numpy().astype(np.int32)
    pos = idx.to_numpy(zero_copy_only=False)  # float with NaN for nulls
    out = np.full(len(pos), -1 if unk_id is None else unk_id, dtype=np.int32)
    ok = ~np.isnan(pos)
    out[ok] = ids[pos[ok].astype(np.int64)]
    return out


def _unknown_table(events: pa.Table, mask: np.ndarray) -> pa.Table:
    if not mask.any():
        return pa.table(
            {
                "vocabulary": pa.array([], pa.string()),
                "code": pa.array([], pa.string()),
                "occurrences": pa.array([], pa.int64()),
                "patients": pa.array([], pa.int64()),
            }
        )
    t = events.select(["subject_id", "vocabulary", "code"]).filter(pa.array(mask))
    g = t.group_by(["vocabulary", "code"]).aggregate(
        [("subject_id", "count"), ("subject_id", "count_distinct")]
    )
    g = pa.table(
        {
            "vocabulary": g["vocabulary"],
            "code": g["code"],
            "occurrences": g["subject_id_count"],
            "patients": g["subject_id_count_distinct"],
        }
    )
    return g.sort_by([("occurrences", "descending"), ("vocabulary", "ascending"), ("code", "ascending")])


def _runs(*keys: np.ndarray) -> np.ndarray:
    """(R,) bool: True where any key differs from the previous row (a new run starts)."""
    start = np.ones(len(keys[0]), dtype=bool)
    if len(start):
        start[1:] = np.any(np.stack([k[1:] != k[:-1] for k in keys]), axis=0)
    return start


def tokenize(
    events: pa.Table,
    concepts: pa.Table,
    *,
    max_len: int = PrepareConfig.max_len,
    max_visits: int = PrepareConfig.max_visits,
    unknown: str = PrepareConfig.unknown,
) -> Tokenized:
    """Turn sorted events into sequences; ``unknown`` is ``drop`` (default) or ``unk`` (map to ``[UNK]``).

    Shapes: events R rows sorted by (subject_id, visit_index, seq) -> P sequences, T tokens in all.
    """
    if max_len < 2:
        raise ValueError(f"max_len must be at least 2 ([CLS] + one code), got {max_len}")
    if unknown not in UNKNOWN_CODES:
        raise ValueError(f"unknown must be 'drop' or 'unk', got {unknown!r}")
    cid = lookup(events, concepts)
    is_unknown = cid < 0
    unk_table = _unknown_table(events, is_unknown)
    if unknown == "unk":
        unk = concepts.filter(pc.equal(concepts["code"], "[UNK]"))["concept_id"].to_numpy()
        cid[is_unknown] = int(unk[0]) if len(unk) else 4
        keep = np.ones(len(cid), dtype=bool)
    else:
        keep = ~is_unknown
    subj = events["subject_id"].to_numpy()[keep]  # (R',)
    cid = cid[keep]
    visit = events["visit_index"].to_numpy()[keep]
    times = events["visit_time"].to_numpy()[keep] if "visit_time" in events.column_names else None
    known = events["known_time"].to_numpy()[keep] if "known_time" in events.column_names else None
    v = _truncate(subj, visit, max_len, max_visits)
    seq_len, offsets, input_ids, segment_ids = _sequences(cid, v)
    last_len = np.minimum(v.v_len[v.p_vstart + v.p_nvis - 1], max_len - 1)
    total = v.p_end - np.concatenate([[0], v.p_end[:-1]])  # (P,) codes of each patient before truncation
    # distinct (patient, concept) pairs before truncation, for the ROOD hold-out
    n_c = int(cid.max(initial=0)) + 1
    pair = np.unique(v.v_owner[v.row_v].astype(np.int64) * n_c + cid)
    subject_id = subj[v.v_start[v.p_vstart]] if len(v.p_vstart) else np.zeros(0, np.int64)
    last_visit_index = visit[v.v_start[v.p_vstart + v.p_nvis - 1]].astype(np.int32)
    counts = {
        "code_rows": int(len(is_unknown)),
        "unknown_code_rows": int(is_unknown.sum()),
        "unknown_codes_distinct": int(unk_table.num_rows),
        "unknown_code_share": float(is_unknown.mean()) if len(is_unknown) else 0.0,
        "patients_no_known_codes": int(pc.count_distinct(events["subject_id"]).as_py()) - len(v.p_vstart),
        "patients_last_visit_unknown": int(
            (last_visit_index != _source_last_visit(events, subject_id)).sum()
        ),
        "patients_truncated": int((seq_len - 1 < total).sum()),
        "visits_dropped_by_truncation": int((~v.keep_v).sum()),
        "code_rows_dropped_by_truncation": int((~v.keep_r).sum()),
    }
    return Tokenized(
        subject_id=subject_id,
        offsets=offsets.astype(np.int64),
        input_ids=input_ids,
        segment_ids=segment_ids,
        n_visits=v.kept_visits,
        last_visit_start=(seq_len - last_len).astype(np.int32),
        last_visit_index=last_visit_index,
        truncated=seq_len - 1 < total,
        pair_patient=pair // n_c,
        pair_concept=(pair % n_c).astype(np.int32),
        unknown=unk_table,
        counts=counts,
        visit_times=times[v.v_start[v.keep_v]].astype("datetime64[us]") if times is not None else None,
        visit_known_times=known[v.v_start[v.keep_v]].astype("datetime64[us]") if known is not None else None,
    )


def _source_last_visit(events: pa.Table, subject_id: np.ndarray) -> np.ndarray:
    """(P,) the last ``visit_index`` in ``events`` (known codes or not) of each patient of ``subject_id``."""
    subj = events["subject_id"].to_numpy()
    if not len(subject_id):
        return np.zeros(0, np.int32)
    # events are sorted by patient and visit: each patient's last row holds its last visit
    last_row = np.append(np.flatnonzero(_runs(subj))[1:], len(subj)) - 1
    pos = np.searchsorted(subj[last_row], subject_id)
    return events["visit_index"].to_numpy()[last_row[pos]]


# Programs whose snomed_ids are SNOMED CT concept ids: not the OWL token modes (their ids are class keys).
OWL_MAPPING_SOURCES = ("codes_file", "code_property", "all_classes")
SNOMED_VOCABULARY = "SNOMED"  # the events' vocabulary of a SNOMED CT concept id (MEDS ``SNOMED/<sctid>``)
SNOMED_TOKEN_VOCABULARY = "SNOMEDCT"  # a program token that is a SNOMED CT concept (OWL --code-property)
VOCABULARY_RANK = {"ICD10CM": 0, "ICD9CM": 1}


def snomed_tokens(concepts: pa.Table) -> tuple[np.ndarray, pa.Table]:
    """The one token each SNOMED CT concept id maps to: ``(sorted sctids, rows of concepts)``.

    A program token of vocabulary ``SNOMEDCT`` whose code is the id is the token itself. Otherwise the
    ICD tokens whose ``snomed_ids`` contain the id are candidates, and the first by (fewest
    ``snomed_ids``, ``ICD10CM`` before ``ICD9CM``, smallest ``concept_id``) is chosen.
    """
    vocab = concepts["vocabulary"].to_numpy(zero_copy_only=False).astype(object)
    ids_col = concepts["snomed_ids"].combine_chunks() if "snomed_ids" in concepts.column_names else None
    rank = np.array([VOCABULARY_RANK.get(v, 9) for v in vocab])
    src = (
        concepts["mapping_source"].to_numpy(zero_copy_only=False).astype(object)
        if "mapping_source" in concepts.column_names
        else np.full(len(vocab), "", dtype=object)
    )
    icd = (rank < 9) & ~np.isin(src, OWL_MAPPING_SOURCES)
    sct, row, key1, key2 = [], [], [], []
    if ids_col is not None and len(ids_col):
        parent = pc.list_parent_indices(ids_col).to_numpy()
        values = ids_col.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
        keep = icd[parent]
        n_ids = np.diff(ids_col.offsets.to_numpy())
        sct.append(values[keep])
        row.append(parent[keep])
        key1.append(n_ids[parent[keep]])
        key2.append(rank[parent[keep]])
    direct = np.flatnonzero(vocab == SNOMED_TOKEN_VOCABULARY)
    codes = concepts["code"].to_numpy(zero_copy_only=False).astype(object)
    numeric = np.array([str(c).isdigit() and len(str(c)) <= 18 for c in codes[direct]], dtype=bool)
    direct = direct[numeric]
    sct.append(np.array([int(c) for c in codes[direct]], dtype=np.int64))
    row.append(direct)
    key1.append(np.full(len(direct), -1))  # the concept's own token comes first
    key2.append(np.zeros(len(direct), np.int64))
    sct_all, row_all = np.concatenate(sct).astype(np.int64), np.concatenate(row).astype(np.int64)
    k1, k2 = np.concatenate(key1), np.concatenate(key2)
    cid = concepts["concept_id"].to_numpy().astype(np.int64)[row_all]
    order = np.lexsort((cid, k2, k1, sct_all))
    sct_all, row_all = sct_all[order], row_all[order]
    first = _runs(sct_all)
    return sct_all[first], concepts.take(pa.array(row_all[first]))


def resolve_snomed(events: pa.Table, concepts: pa.Table) -> tuple[pa.Table, dict]:
    """``events`` with each ``SNOMED`` row's (vocabulary, code) replaced by its token's
    (:func:`snomed_tokens`); rows of concepts without a token stay ``SNOMED`` (unknown codes). Counts:
    ``snomed_code_rows`` and ``snomed_code_rows_mapped``."""
    is_sct = np.asarray(pc.fill_null(pc.equal(events["vocabulary"], SNOMED_VOCABULARY), False))
    counts = {"snomed_code_rows": int(is_sct.sum()), "snomed_code_rows_mapped": 0}
    if not is_sct.any():
        return events, counts
    keys, tokens = snomed_tokens(concepts)
    rows = np.flatnonzero(is_sct)
    code = events["code"].to_numpy(zero_copy_only=False).astype(object)
    sct = np.array([int(c) if str(c).isdigit() and len(str(c)) <= 18 else -1 for c in code[rows]], np.int64)
    pos = np.clip(np.searchsorted(keys, sct), 0, max(len(keys) - 1, 0))
    hit = (pos < len(keys)) & (keys[pos] == sct) if len(keys) else np.zeros(len(rows), bool)
    vocab = events["vocabulary"].to_numpy(zero_copy_only=False).astype(object)
    vocab[rows[hit]] = np.asarray(tokens["vocabulary"].to_numpy(zero_copy_only=False), dtype=object)[pos[hit]]
    code[rows[hit]] = np.asarray(tokens["code"].to_numpy(zero_copy_only=False), dtype=object)[pos[hit]]
    counts["snomed_code_rows_mapped"] = int(hit.sum())
    events = events.set_column(
        events.schema.get_field_index("vocabulary"), "vocabulary", pa.array(vocab, pa.string())
    ).set_column(events.schema.get_field_index("code"), "code", pa.array(code, pa.string()))
    return events, counts


@dataclass
class _Visits:
    """The kept rows (R') as runs, visits (V) and patients (P), and what truncation keeps of them."""

    v_start: np.ndarray  # (V,) first row of each visit
    v_len: np.ndarray  # (V,) rows of each visit
    p_vstart: np.ndarray  # (P,) first visit of each patient
    p_nvis: np.ndarray  # (P,) visits of each patient
    v_owner: np.ndarray  # (V,) patient of each visit
    row_v: np.ndarray  # (R',) visit of each row
    p_end: np.ndarray  # (P,) rows up to the end of each patient (cumulative)
    keep_v: np.ndarray  # (V,) bool: visit kept
    keep_r: np.ndarray  # (R',) bool: row kept
    kept_visits: np.ndarray  # (P,) int32 visits kept
    segment: np.ndarray  # (V,) segment id of each kept visit


def _truncate(subj: np.ndarray, visit: np.ndarray, max_len: int, max_visits: int) -> _Visits:
    """Keep each patient's most recent visits that fit ``max_len`` and ``max_visits`` (and the first
    ``max_len - 1`` codes of an over-long last visit)."""
    # visits (V) and patients (P) as runs of the sorted rows
    v_start = np.flatnonzero(_runs(subj, visit))  # (V,)
    v_len = np.diff(np.append(v_start, len(subj)))
    v_subj = subj[v_start]
    p_vstart = np.flatnonzero(_runs(v_subj))  # (P,) first visit of each patient
    p_nvis = np.diff(np.append(p_vstart, len(v_start)))
    v_owner = np.repeat(np.arange(len(p_vstart)), p_nvis)  # (V,)
    v_from_end = np.repeat(p_vstart + p_nvis - 1, p_nvis) - np.arange(len(v_start))  # 0 = last visit
    csum = np.cumsum(v_len)
    p_end = csum[p_vstart + p_nvis - 1]
    rev_cum = p_end[v_owner] - csum + v_len  # codes in this and all later visits of the patient
    keep_v = ((rev_cum <= max_len - 1) & (v_from_end < max_visits)) | (v_from_end == 0)
    # rows: kept visit and (for an over-long last visit) within the first max_len - 1 codes
    row_v = np.repeat(np.arange(len(v_start)), v_len)  # (R',)
    pos_in_v = np.arange(len(subj)) - v_start[row_v]
    keep_r = keep_v[row_v] & (pos_in_v < max_len - 1)
    kept_visits = np.bincount(v_owner, weights=keep_v, minlength=len(p_vstart)).astype(np.int32)
    segment = np.repeat(kept_visits, p_nvis) - 1 - v_from_end
    return _Visits(
        v_start, v_len, p_vstart, p_nvis, v_owner, row_v, p_end, keep_v, keep_r, kept_visits, segment
    )


def _sequences(cid: np.ndarray, v: _Visits) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(P,) sequence lengths, (P+1,) offsets, (T,) input ids and segment ids: ``[CLS]`` + the kept codes."""
    p_codes = np.bincount(v.v_owner[v.row_v[v.keep_r]], minlength=len(v.p_vstart)).astype(np.int64)  # (P,)
    seq_len = p_codes + 1
    offsets = np.concatenate([[0], np.cumsum(seq_len)])
    input_ids = np.empty(offsets[-1], dtype=np.int32)  # (T,)
    segment_ids = np.zeros(offsets[-1], dtype=np.int16)
    cls_pos = offsets[:-1]
    body = np.ones(offsets[-1], dtype=bool)
    body[cls_pos] = False
    input_ids[cls_pos] = CLS_ID
    input_ids[body] = cid[v.keep_r]
    segment_ids[body] = v.segment[v.row_v[v.keep_r]]
    return seq_len, offsets, input_ids, segment_ids


def list_column(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray | None = None) -> pa.ListArray:
    """A list array from CSR ``offsets``/``values``, optionally taking ``rows`` (in that order)."""
    arr = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
    return arr if rows is None else arr.take(pa.array(rows))
