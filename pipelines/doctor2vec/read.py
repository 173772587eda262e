"""Doctor2Vec data, format 1: the reference for the five tables, and the validating reader.

A Doctor2Vec data folder (Biswal et al., AAAI 2020: a doctor is a memory of his/her patients; a trial's
embedding attends over it to predict enrollment) is ``<folder>/`` with ``manifest.json`` and five Parquet
tables. :mod:`pipelines.doctor2vec.data` simulates one from a tokenized cohort; real provider panels and
trial records can be brought in the same format. Columns marked * are required; the others are filled
with the default shown when absent. Ids are the program's concept ids (``concepts.parquet``).

``patients.parquet`` (one row per patient in a panel)
    subject_id* int64 (unique) | sex string 'F'/'M'/null | age int32 (null: unknown) |
    input_ids* list<int32> concept ids, oldest first | segment_ids* list<int32> visit index, same length
``doctors.parquet``
    doctor_id* int32 (unique) | specialty int8 ICD chapter 1..22 | specialty_title string |
    volume int32 (default: panel size) | purity float32 | propensity float32 |
    panel* list<int64> subject ids of the doctor's patients (each must be in patients.parquet)
``trials.parquet``
    trial_id* int32 (unique) | split* string: train, val, test or test_rare | rare bool (split == test_rare) |
    category int8 ICD chapter | conditions* list<int32> (an eligible patient has at least one) |
    excluded list<int32> (an eligible patient has none; []) | age_min int32 (0) | age_max int32 (200) |
    sex string 'any'/'F'/'M' ('any') | text string ('') | text_ids list<int32> word ids into vocab ([]) |
    eligible_codes list<int32> (ground truth, never a model input: the codes that made a patient eligible,
    a superset of conditions when criteria name a category but list only some of its codes; null: unknown)
``pairs.parquet`` (one row per (doctor, trial); label or enrolled required)
    doctor_id* int32 | trial_id* int32 | split string (the trial's) | eligible int32 (null: unknown) |
    enrolled int32 | label bool (default: enrolled >= options.min_enrolled, 1 when absent)
``vocab.parquet``
    token_id* int32 (0..n_words-1, in order) | token* string; 0 = [PAD], 1 = [UNK] |
    in_train bool: the word occurs in a train trial's text (null: unknown)

``manifest.json`` needs ``format_version`` (1), ``kind`` ("doctor2vec"), ``program_id``, ``n_codes`` (the
program's concept count) and ``n_words``; ``held_out_codes`` (concept ids never in a train/val trial, to
be removed from training histories) defaults to [], ``special_ids`` to the program's special tokens 0..4.
A ``files`` list (path, sha256) is checked when present.

Validation: structural corruption raises :class:`InputFileError` naming the file, the ids or rows and what
to do; data-quality findings are dropped, counted in :attr:`D2VData.skipped` and logged:
``doctor_no_patients`` (empty panel: doctor and its pairs dropped), ``trial_codes_outside_program`` (ids
outside ``[0, n_codes)`` or special tokens, dropped from conditions/excluded), ``trial_no_eligible_codes``
(no valid condition left: trial and its pairs dropped), ``patient_codes_outside_program``,
``text_ids_outside_vocab`` (mapped to [UNK]) and ``pairs_dropped``.

Also here, the one input the generator reads from the raw source: patient demographics
(:func:`read_demographics`, file names and SQL in :data:`DEMOGRAPHICS`; the file is located through the
dataset's manifest by :func:`pipelines.doctor2vec.inputs.find_demographics`).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ontology_compiler.api import SPECIAL_TOKENS
from pipelines.data.dataset import verify_dataset
from pipelines.data.readers import READERS
from pipelines.data.readers.common import compression_option, duckdb_path
from pipelines.errors import InputFileError, MissingTableError, PipelineError

log = logging.getLogger(__name__)

KIND = "doctor2vec"
SPLITS = ("train", "val", "test", "test_rare")
SEXES = ("F", "M")
TRIAL_SEXES = ("any", "F", "M")
OPEN_AGE = (0, 200)
N_SPECIAL = len(SPECIAL_TOKENS)  # the program's special tokens are concept ids 0..4 (program format)
REQUIRED_MANIFEST = ("kind", "program_id", "n_codes", "n_words", "format_version")
SHOW = 5  # offending ids named in a message
I32, I64 = pa.list_(pa.int32()), pa.list_(pa.int64())
# table -> column -> (type, default when absent); default REQUIRED: the column must be there
REQUIRED = object()
COLUMNS: dict[str, dict[str, tuple[pa.DataType, Any]]] = {
    "patients": {
        "subject_id": (pa.int64(), REQUIRED),
        "sex": (pa.string(), None),
        "age": (pa.int32(), None),
        "input_ids": (I32, REQUIRED),
        "segment_ids": (I32, REQUIRED),
    },
    "doctors": {
        "doctor_id": (pa.int32(), REQUIRED),
        "specialty": (pa.int8(), None),
        "specialty_title": (pa.string(), None),
        "volume": (pa.int32(), None),
        "purity": (pa.float32(), None),
        "propensity": (pa.float32(), None),
        "panel": (I64, REQUIRED),
    },
    "trials": {
        "trial_id": (pa.int32(), REQUIRED),
        "split": (pa.string(), REQUIRED),
        "rare": (pa.bool_(), None),
        "category": (pa.int8(), None),
        "conditions": (I32, REQUIRED),
        "excluded": (I32, []),
        "age_min": (pa.int32(), OPEN_AGE[0]),
        "age_max": (pa.int32(), OPEN_AGE[1]),
        "sex": (pa.string(), "any"),
        "text": (pa.string(), ""),
        "text_ids": (I32, []),
        "eligible_codes": (I32, None),
    },
    "pairs": {
        "doctor_id": (pa.int32(), REQUIRED),
        "trial_id": (pa.int32(), REQUIRED),
        "split": (pa.string(), None),
        "eligible": (pa.int32(), None),
        "enrolled": (pa.int32(), None),
        "label": (pa.bool_(), None),
    },
    "vocab": {
        "token_id": (pa.int32(), REQUIRED),
        "token": (pa.string(), REQUIRED),
        "in_train": (pa.bool_(), None),
    },
}
TABLES = tuple(COLUMNS)
# source reader -> (demographics file under source.path, SQL over {csv}: subject_id, sex 'F'/'M', age), as
# each reader declares them (pipelines.data.readers.READERS; a reader without them: age and sex unknown)
DEMOGRAPHICS: dict[str, tuple[str, str]] = {
    r.name: r.part("demographics") for r in READERS.values() if r.demographics is not None
}


class D2VDataError(PipelineError):
    """A Doctor2Vec folder cannot be read (no manifest, wrong kind, a required manifest key missing)."""


@dataclass
class D2VData:
    """A validated Doctor2Vec data folder: manifest, the five tables (all columns, canonical types)."""

    path: Path | None
    manifest: dict[str, Any]
    patients: pa.Table
    doctors: pa.Table
    trials: pa.Table
    pairs: pa.Table
    vocab: pa.Table
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows dropped

    @property
    def held_out_codes(self) -> list[int]:
        return [int(c) for c in self.manifest.get("held_out_codes", [])]


def read_doctor2vec(path: str | Path) -> D2VData:
    """Read and validate a Doctor2Vec folder (hashes checked when the manifest lists files)."""
    p = Path(path)
    manifest = verify_dataset(p)
    if manifest.get("kind") != KIND:
        raise D2VDataError(
            f"{p}: not Doctor2Vec data (manifest kind {manifest.get('kind')!r}, expected {KIND!r})"
        )
    tables = {}
    for name in TABLES:
        f = p / f"{name}.parquet"
        if not f.is_file():
            raise MissingTableError(
                f, "table not found", hint=f"a Doctor2Vec folder holds {', '.join(TABLES)}"
            )
        tables[name] = pq.read_table(f)
    tables, skipped = validate_tables(manifest, tables, p)
    return D2VData(p, manifest, **tables, skipped=skipped)


def validate_tables(
    manifest: dict[str, Any], tables: dict[str, pa.Table], base_path: str | Path
) -> tuple[dict[str, pa.Table], dict[str, int]]:
    """Check and normalise the five tables; returns them (bad rows dropped) and the skip counts by reason."""
    base = Path(base_path)
    missing = [k for k in REQUIRED_MANIFEST if k not in manifest]
    if missing:
        raise D2VDataError(f"{base / 'manifest.json'}: missing key(s) {', '.join(missing)}")
    if manifest["kind"] != KIND:
        raise D2VDataError(f"{base / 'manifest.json'}: kind {manifest['kind']!r} is not {KIND!r}")
    t = {name: _columns(tables, name, base) for name in TABLES}
    skipped: Counter = Counter()
    n_codes, n_words = int(manifest["n_codes"]), int(manifest["n_words"])
    valid_code = np.ones(n_codes, bool)
    valid_code[[i for i in manifest.get("special_ids", range(N_SPECIAL)) if 0 <= i < n_codes]] = False
    _check_vocab(t["vocab"], n_words, base / "vocab.parquet")
    t["patients"] = _patients(t["patients"], valid_code, base / "patients.parquet", skipped)
    t["doctors"] = _doctors(t["doctors"], t["patients"], base / "doctors.parquet", skipped)
    t["trials"] = _trials(t["trials"], valid_code, n_words, base / "trials.parquet", skipped)
    min_enrolled = int((manifest.get("options") or {}).get("min_enrolled", 1))
    t["pairs"] = _pairs(t["pairs"], t["doctors"], t["trials"], min_enrolled, base / "pairs.parquet", skipped)
    for name in ("doctors", "trials"):  # pairs of skipped rows go with them
        t[name] = t[name].filter(t[name].column("_keep")).drop_columns(["_keep"])
    for reason, n in sorted(skipped.items()):
        if n:
            log.warning("%s: %d %s", base, n, reason.replace("_", " "))
    return t, {k: int(v) for k, v in sorted(skipped.items()) if v}


def _columns(tables: dict[str, pa.Table], name: str, base: Path) -> pa.Table:
    """The table's known columns in :data:`COLUMNS` order and types, absent optional ones filled."""
    f = base / f"{name}.parquet"
    if name not in tables:
        raise MissingTableError(f, "table not found", hint=f"a Doctor2Vec folder holds {', '.join(TABLES)}")
    table = tables[name]
    out = {}
    for col, (typ, default) in COLUMNS[name].items():
        if col not in table.column_names:
            if default is REQUIRED:
                raise InputFileError(
                    f, f"missing column {col!r}", expected=str(typ), found=str(table.column_names)
                )
            out[col] = (
                pa.nulls(table.num_rows, typ)
                if default is None
                else pa.array([default] * table.num_rows, typ)
            )
            continue
        data = table.column(col)
        try:
            out[col] = data.cast(typ) if data.type != typ else data
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InputFileError(
                f, f"column {col!r} cannot be read as {typ}: {e}", found=str(data.type)
            ) from e
        if default is REQUIRED and not pa.types.is_list(typ) and out[col].null_count:
            row = int(np.flatnonzero(pc.is_null(out[col]).to_numpy(zero_copy_only=False))[0])
            raise InputFileError(
                f, f"column {col!r} is null in row {row} (0-based)", expected="a value in every row"
            )
    if name == "pairs" and "label" not in table.column_names and "enrolled" not in table.column_names:
        raise InputFileError(
            f, "needs a 'label' (bool) or an 'enrolled' (int32) column", found=str(table.column_names)
        )
    return pa.table(out)


def _duplicates(ids: np.ndarray, f: Path, what: str) -> None:
    values, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        dup = values[counts > 1][:SHOW].tolist()
        raise InputFileError(f, f"duplicate {what} {dup}", hint=f"each {what} must appear once")


def _check_vocab(vocab: pa.Table, n_words: int, f: Path) -> None:
    ids = vocab.column("token_id").to_numpy()
    if len(ids) != n_words or not np.array_equal(ids, np.arange(n_words)):
        raise InputFileError(
            f,
            "token ids must be 0..n_words-1 in order",
            expected=f"{n_words} rows (manifest n_words)",
            found=f"{len(ids)} rows, ids {ids[:SHOW].tolist()}...",
        )


def _flat(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Values and per-row lengths (null rows: 0) of a list column."""
    arr = col.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy().astype(np.int64)
    return arr.flatten().to_numpy(zero_copy_only=False), lengths


def _rebuild(values: np.ndarray, lengths: np.ndarray, typ: pa.DataType) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, typ.value_type))


def _patients(t: pa.Table, valid_code: np.ndarray, f: Path, skipped: Counter) -> pa.Table:
    sid = t.column("subject_id").to_numpy()
    _duplicates(sid, f, "subject_id")
    ids, n_ids = _flat(t.column("input_ids"))
    seg, n_seg = _flat(t.column("segment_ids"))
    bad = np.flatnonzero(n_ids != n_seg)
    if len(bad):
        raise InputFileError(
            f,
            f"input_ids and segment_ids differ in length for subject_id {sid[bad[:SHOW]].tolist()}",
            expected="one visit index per concept id",
        )
    keep = (ids >= 0) & (ids < len(valid_code))
    keep[keep] = valid_code[ids[keep]]
    if not keep.all():
        skipped["patient_codes_outside_program"] += int((~keep).sum())
        row = np.repeat(np.arange(len(sid)), n_ids)
        lengths = np.bincount(row[keep], minlength=len(sid))
        t = t.set_column(3, "input_ids", _rebuild(ids[keep], lengths, I32))
        t = t.set_column(4, "segment_ids", _rebuild(seg[keep], lengths, I32))
    _check_values(t, "sex", SEXES, f, "subject_id", allow_null=True)
    return t


def _check_values(
    t: pa.Table, col: str, allowed: tuple, f: Path, id_col: str, allow_null: bool = False
) -> None:
    values = t.column(col)
    ok = pc.is_in(values, value_set=pa.array(allowed, values.type)).to_numpy(zero_copy_only=False)
    if allow_null:
        ok |= pc.is_null(values).to_numpy(zero_copy_only=False)
    else:
        ok &= pc.is_valid(values).to_numpy(zero_copy_only=False)
    if not ok.all():
        rows = np.flatnonzero(~ok)[:SHOW]
        ids = t.column(id_col).take(pa.array(rows)).to_pylist()
        found = values.take(pa.array(rows)).to_pylist()
        raise InputFileError(f, f"{col} outside {list(allowed)} for {id_col} {ids}", found=str(found))


def _doctors(t: pa.Table, patients: pa.Table, f: Path, skipped: Counter) -> pa.Table:
    did = t.column("doctor_id").to_numpy()
    _duplicates(did, f, "doctor_id")
    panel, size = _flat(t.column("panel"))
    known = np.sort(patients.column("subject_id").to_numpy())
    pos = np.clip(np.searchsorted(known, panel), 0, max(len(known) - 1, 0))
    missing = np.flatnonzero(known[pos] != panel) if len(known) else np.arange(len(panel))
    if len(missing):
        row = np.repeat(np.arange(len(did)), size)[missing]
        pairs = [(int(did[r]), int(panel[m])) for r, m in zip(row[:SHOW], missing[:SHOW], strict=True)]
        raise InputFileError(
            f,
            f"{len(missing)} panel subject id(s) not in patients.parquet, (doctor_id, subject_id): {pairs}",
            hint="add those patients to patients.parquet or remove them from the panels",
        )
    empty = size == 0
    if empty.any():
        skipped["doctor_no_patients"] += int(empty.sum())
        log.warning("%s: doctors without patients skipped: %s", f, did[empty][:SHOW].tolist())
    volume = pc.if_else(pc.is_null(t.column("volume")), pa.array(size.astype(np.int32)), t.column("volume"))
    t = t.set_column(t.column_names.index("volume"), "volume", volume)
    return t.append_column("_keep", pa.array(~empty))


def _filter_codes(col: pa.ChunkedArray, valid_code: np.ndarray) -> tuple[pa.ListArray, np.ndarray, int]:
    """The list column with invalid ids dropped, the kept count per row, the number dropped."""
    ids, lengths = _flat(col)
    keep = (ids >= 0) & (ids < len(valid_code))
    keep[keep] = valid_code[ids[keep]]
    row = np.repeat(np.arange(len(lengths)), lengths)
    kept = np.bincount(row[keep], minlength=len(lengths))
    return _rebuild(ids[keep], kept, I32), kept, int((~keep).sum())


def _trials(t: pa.Table, valid_code: np.ndarray, n_words: int, f: Path, skipped: Counter) -> pa.Table:
    tid = t.column("trial_id").to_numpy()
    _duplicates(tid, f, "trial_id")
    _check_values(t, "split", SPLITS, f, "trial_id")
    _check_values(t, "sex", TRIAL_SEXES, f, "trial_id")
    lo, hi = (
        pc.fill_null(t.column(c), d).to_numpy() for c, d in zip(("age_min", "age_max"), OPEN_AGE, strict=True)
    )
    if (lo > hi).any():
        raise InputFileError(f, f"age_min > age_max for trial_id {tid[lo > hi][:SHOW].tolist()}")
    cond, n_cond, bad_c = _filter_codes(t.column("conditions"), valid_code)
    excl, _, bad_e = _filter_codes(t.column("excluded"), valid_code)
    skipped["trial_codes_outside_program"] += bad_c + bad_e
    t = t.set_column(t.column_names.index("conditions"), "conditions", cond)
    t = t.set_column(t.column_names.index("excluded"), "excluded", excl)
    words, n = _flat(t.column("text_ids"))
    bad = (words < 0) | (words >= n_words)
    if bad.any():
        skipped["text_ids_outside_vocab"] += int(bad.sum())
        t = t.set_column(
            t.column_names.index("text_ids"), "text_ids", _rebuild(np.where(bad, 1, words), n, I32)
        )
    rare = pc.if_else(
        pc.is_null(t.column("rare")), pc.equal(t.column("split"), "test_rare"), t.column("rare")
    )
    t = t.set_column(t.column_names.index("rare"), "rare", rare)
    empty = n_cond == 0
    if empty.any():
        skipped["trial_no_eligible_codes"] += int(empty.sum())
        log.warning(
            "%s: trials without a condition in the program skipped: %s", f, tid[empty][:SHOW].tolist()
        )
    return t.append_column("_keep", pa.array(~empty))


def _pairs(
    t: pa.Table, doctors: pa.Table, trials: pa.Table, min_enrolled: int, f: Path, skipped: Counter
) -> pa.Table:
    d, tr = t.column("doctor_id").to_numpy(), t.column("trial_id").to_numpy()
    for ids, table, col in ((d, doctors, "doctor_id"), (tr, trials, "trial_id")):
        unknown = ~np.isin(ids, table.column(col).to_numpy())
        if unknown.any():
            rows = np.flatnonzero(unknown)[:SHOW]
            raise InputFileError(
                f,
                f"{int(unknown.sum())} pair(s) refer to an unknown {col}: rows {rows.tolist()} (0-based), "
                f"{col} {ids[rows].tolist()}",
                hint=f"every {col} must be in {col.split('_')[0]}s.parquet",
            )
    key = d.astype(np.int64) * (int(tr.max(initial=0)) + 1) + tr
    order = np.argsort(key, kind="stable")
    dup = np.flatnonzero(key[order][1:] == key[order][:-1])
    if len(dup):
        rows = np.sort(np.unique(np.concatenate([order[dup], order[dup + 1]])))
        first = [(int(d[r]), int(tr[r])) for r in order[dup][:SHOW]]
        raise InputFileError(
            f,
            f"duplicate (doctor_id, trial_id) pairs {first} in rows {rows[: 2 * SHOW].tolist()} (0-based)",
            hint="keep one row per doctor and trial",
        )
    trial_split = dict(
        zip(trials.column("trial_id").to_pylist(), trials.column("split").to_pylist(), strict=True)
    )
    split = pa.array([trial_split[int(x)] for x in tr], pa.string())
    given = t.column("split")
    mismatch = pc.fill_null(pc.not_equal(given, split), False).to_numpy(zero_copy_only=False)
    if mismatch.any():
        rows = np.flatnonzero(mismatch)[:SHOW]
        raise InputFileError(f, f"split differs from the trial's in rows {rows.tolist()} (0-based)")
    t = t.set_column(t.column_names.index("split"), "split", split)
    if t.column("label").null_count:
        derived = pc.greater_equal(pc.fill_null(t.column("enrolled"), 0), min_enrolled)
        t = t.set_column(t.column_names.index("label"), "label", pc.coalesce(t.column("label"), derived))
    keep_d = np.isin(d, doctors.filter(doctors.column("_keep")).column("doctor_id").to_numpy())
    keep_t = np.isin(tr, trials.filter(trials.column("_keep")).column("trial_id").to_numpy())
    keep = keep_d & keep_t
    skipped["pairs_dropped"] += int((~keep).sum())
    return t.filter(pa.array(keep))


def read_demographics(f: Path, reader: str) -> pa.Table:
    """(subject_id, sex, age) of the patients in the demographics file ``f`` of a ``reader`` source
    (:data:`DEMOGRAPHICS`), sorted by subject_id."""
    sql = DEMOGRAPHICS[reader][1]
    # the path is a bound parameter, its glob characters escaped; the compression named, since DuckDB's
    # guess from the name fails on an escaped one
    csv = f"read_csv($1, header = true, all_varchar = true, nullstr = '', {compression_option(f)})"
    try:
        table = duckdb.connect().sql(sql.format(csv=csv), params=[duckdb_path(f)]).to_arrow_table()
    except duckdb.Error as e:
        raise InputFileError(f, f"cannot read demographics: {e}", hint="check the file's header") from e
    return table.filter(pc.is_valid(table.column("subject_id"))).sort_by("subject_id")
