"""MEDS label files: a binary task a user brings (``finetune --labels DIR``), placed in a tokenized dataset.

A task is one folder of Parquet files (``DIR/**/*.parquet``, as ACES and MEDS-DEV write them) in the MEDS
LabelSchema: ``subject_id`` (integer), ``prediction_time`` (timestamp), ``boolean_value`` (the label).
The other label columns (``integer_value``, ``float_value``, ``categorical_value``) and any others are not
read; the folder's name is the task's name (``docs/input-formats.md``, "MEDS label files").

:func:`read_label_task` checks and reads the files: the three columns with their types, no nulls in them
(the schema makes them non-nullable), exact duplicate rows dropped (counted), two rows of one
(``subject_id``, ``prediction_time``) with different labels an error naming both.

:func:`place_labels` places each row in a dataset: the model input is the patient's sequence cut after the
last visit whose codes are known at or before ``prediction_time`` (the dataset's ``visit_known_times``,
MIMIC-IV: discharge; MEDS: data may be used "up to and including this time"), and the row follows the
patient's split (``finetune_train``, ``finetune_val``, ``test`` are the ones fine-tuning uses; rows of
the others are counted and warned). Rows of subjects the dataset does not hold, rows without any visit
known by their prediction time and rows whose earlier visits truncation cut are counted and left out.

Dimension legend: N label rows, P patients, V visits (all patients), T tokens (all patients).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from ontology_compiler.api import describe_files, walk_files
from pipelines.errors import InputFileError, MissingTableError

from .readers.common import EXAMPLES, connect, duckdb_path, input_record
from .readers.meds import check_schema
from .splits import SPLITS

log = logging.getLogger(__name__)

LABEL_COLUMNS = {"subject_id": "integer", "prediction_time": "timestamp or date", "boolean_value": "boolean"}
ROWS_SCHEMA = pa.schema(
    [("subject_id", pa.int64()), ("prediction_time", pa.timestamp("us")), ("boolean_value", pa.bool_())]
)
FINETUNE_SPLITS = ("finetune_train", "finetune_val", "test")
# the dataset columns placing a label needs
PLACE_COLUMNS = ("subject_id", "split", "segment_ids", "visit_times", "visit_known_times")


@dataclass
class LabelTask:
    """The rows of one label folder, where they came from and what was counted on the way."""

    name: str  # the folder's name
    path: Path
    rows: pa.Table  # ROWS_SCHEMA, sorted by (subject_id, prediction_time)
    inputs: list[dict]  # each file: path (relative to the folder), sha256, bytes
    counts: dict = field(default_factory=dict)

    def record(self) -> dict:
        """What a run records about the task (config and results): name, folder, files, counts."""
        return {"name": self.name, "path": str(self.path), "inputs": self.inputs, "counts": self.counts}


@dataclass
class PlacedLabels:
    """The usable label rows of a task in one dataset (N rows)."""

    task: LabelTask
    row: np.ndarray  # (N,) int64 row of patients.parquet
    length: (
        np.ndarray
    )  # (N,) int64 tokens of the input: [CLS] + the codes of the visits up to prediction_time
    label: np.ndarray  # (N,) bool boolean_value
    split: np.ndarray  # (N,) object the patient's split
    counts: dict = field(default_factory=dict)
    prediction_time: np.ndarray = field(default_factory=lambda: np.zeros(0, "datetime64[us]"))  # (N,)


def read_label_task(path: str | Path, *, threads: int | None = None) -> LabelTask:
    """Read the MEDS label folder ``path`` (one binary task) and check it (module docstring)."""
    root = Path(path)
    if not root.is_dir():
        raise InputFileError(root, "not a folder", hint="--labels takes a folder of MEDS label Parquet files")
    files = walk_files(root, lambda n: n.endswith(".parquet"), error=InputFileError)  # links followed
    if not files:
        raise MissingTableError(
            root, "no label files", hint="expected DIR/**/*.parquet in the MEDS label schema"
        )
    log.info("%s: reading %s", root, describe_files(root, files, "label file"))
    for f in files:
        names = check_schema(f, {k: v for k, v in LABEL_COLUMNS.items() if k != "boolean_value"})
        if "boolean_value" not in names:
            have = [c for c in ("integer_value", "float_value", "categorical_value") if c in names]
            raise InputFileError(
                f,
                "no boolean_value column: a label task here is binary",
                expected="boolean_value: boolean",
                found=f"label column(s) {', '.join(have)}" if have else ", ".join(names),
            )
        check_schema(f, LABEL_COLUMNS)
    con = connect(threads)
    try:
        con.execute("SET TimeZone = 'UTC'")  # a zoned prediction_time is read as UTC
    except duckdb.Error:  # pragma: no cover (DuckDB without ICU has no time zones at all)
        pass
    try:
        con.execute(
            "CREATE TEMP TABLE lab0 AS SELECT subject_id::BIGINT AS subject_id, "
            "prediction_time::TIMESTAMP AS "
            "prediction_time, boolean_value::BOOLEAN AS boolean_value, filename, file_row_number "
            "FROM read_parquet($1, union_by_name = true, filename = true, file_row_number = true)",
            [[duckdb_path(f) for f in files]],
        )
    except duckdb.Error as e:
        raise InputFileError(root, f"the label files cannot be read: {str(e).strip().splitlines()[0]}") from e
    counts = {"rows_in_files": _one(con, "SELECT count(*) FROM lab0")}
    for col in LABEL_COLUMNS:
        bad = con.execute(
            f"SELECT filename, file_row_number FROM lab0 WHERE {col} IS NULL ORDER BY ALL LIMIT 1"
        ).fetchall()
        if bad:
            raise InputFileError(
                Path(bad[0][0]),
                f"{col} is null at file_row_number {bad[0][1]}",
                expected=f"a {col} on every row (MEDS LabelSchema: not nullable)",
            )
    counts["duplicate_rows"] = _one(
        con, "SELECT count(*) - count(DISTINCT (subject_id, prediction_time, boolean_value)) FROM lab0"
    )
    conflict = con.execute(
        "SELECT subject_id, prediction_time, list(filename ORDER BY filename, file_row_number), "
        "list(file_row_number ORDER BY filename, file_row_number) FROM lab0 "
        "GROUP BY subject_id, prediction_time "
        "HAVING count(DISTINCT boolean_value) > 1 ORDER BY subject_id, prediction_time LIMIT 1"
    ).fetchall()
    if conflict:
        s, t, fs, rs = conflict[0]
        where = "; ".join(f"{_rel(root, a)} file_row_number {b}" for a, b in zip(fs, rs, strict=True))
        raise InputFileError(
            Path(fs[0]),
            f"subject_id {s} at prediction_time {t} has both labels ({where})",
            expected="one boolean_value per (subject_id, prediction_time)",
        )
    rows = (
        con.sql(
            "SELECT DISTINCT subject_id, prediction_time, boolean_value FROM lab0 "
            "ORDER BY subject_id, prediction_time"
        )
        .to_arrow_table()
        .cast(ROWS_SCHEMA)
    )
    if rows.num_rows == 0:
        raise InputFileError(root, "the label files hold no rows", expected="at least one label row")
    counts["rows"] = rows.num_rows
    counts["subjects"] = len(np.unique(rows["subject_id"].to_numpy()))
    counts["positives"] = int(np.asarray(rows["boolean_value"]).sum())
    if counts["duplicate_rows"]:
        log.warning("%s: %d exact duplicate label rows dropped", root, counts["duplicate_rows"])
    return LabelTask(root.name, root, rows, [input_record(root, f) for f in files], counts)


def place_labels(task: LabelTask, patients: pa.Table, where: Path) -> PlacedLabels:
    """Place ``task``'s rows in the dataset whose ``patients.parquet`` (at ``where``) is ``patients``.

    Each row's input is its patient's sequence up to the end of the last visit at or before
    ``prediction_time``; it keeps the patient's split. Counted: rows of subjects not in the dataset (with
    examples), rows without a visit at or before their prediction time (both left out), rows per split and
    their positives, rows whose sequence was truncated by ``prepare`` (older visits may be missing).
    """
    missing = [c for c in PLACE_COLUMNS if c not in patients.column_names]
    if missing:
        raise InputFileError(
            where,
            f"missing column(s) {', '.join(missing)} needed to cut sequences at a label's prediction_time",
            hint="the dataset was prepared by an earlier version, before visit times (and the times its "
            "codes are known) were stored: run `hrrbert prepare` again",
        )
    subj = patients["subject_id"].to_numpy()
    order = np.argsort(subj, kind="stable")
    lab_subj = task.rows["subject_id"].to_numpy()
    lab_t = task.rows["prediction_time"].cast(pa.int64()).to_numpy()  # (N,) microseconds
    pos = np.minimum(np.searchsorted(subj[order], lab_subj), max(len(subj) - 1, 0))
    known = (subj[order][pos] == lab_subj) if len(subj) else np.zeros(len(lab_subj), bool)
    row = order[pos[known]].astype(np.int64)
    k = _visits_at_or_before(patients, row, lab_t[known], where)
    length = _cut_lengths(patients, row, k)
    has_history = k > 0
    split_names = np.asarray(patients["split"].cast(pa.string()).to_numpy(zero_copy_only=False), dtype=object)
    truncated = (
        np.asarray(patients["truncated"].fill_null(False).to_numpy(zero_copy_only=False), bool)
        if "truncated" in patients.column_names
        else np.zeros(len(subj), bool)
    )
    label = np.asarray(task.rows["boolean_value"].to_numpy(zero_copy_only=False), bool)[known]
    # a truncated sequence lost its oldest visits: a row before its first kept one lost its input to that
    cut = ~has_history & truncated[row]
    keep = has_history
    placed = PlacedLabels(task, row[keep], length[keep], label[keep], split_names[row[keep]])
    placed.prediction_time = lab_t[known][keep].astype("datetime64[us]")
    unknown_subjects = np.unique(lab_subj[~known])
    placed.counts = {
        "rows": int(len(lab_subj)),
        "rows_subject_not_in_dataset": int((~known).sum()),
        "subjects_not_in_dataset": int(len(unknown_subjects)),
        "rows_without_history": int((~has_history & ~cut).sum()),
        "rows_cut_by_truncation": int(cut.sum()),
        "rows_by_split": {s: int((placed.split == s).sum()) for s in SPLITS},
        "positives_by_split": {s: int(placed.label[placed.split == s].sum()) for s in SPLITS},
        "rows_of_truncated_sequences": int(truncated[placed.row].sum()),
        "examples": {
            "subjects_not_in_dataset": [int(s) for s in unknown_subjects[:EXAMPLES]],
            "rows_without_history": _examples(task, known, ~has_history & ~cut),
            "rows_cut_by_truncation": _examples(task, known, cut),
        },
    }
    c = placed.counts
    c["rows_outside_finetuning_splits"] = sum(
        n for s, n in c["rows_by_split"].items() if s not in FINETUNE_SPLITS
    )
    _log_placed(task.name, c)
    return placed


def _log_placed(name: str, c: dict) -> None:
    """What placing a task's rows found (``c``: :class:`PlacedLabels` counts): the rows used, and each kind
    of row left out, with examples."""
    used = sum(c["rows_by_split"][s] for s in FINETUNE_SPLITS)
    log.info(
        "labels %s: %d rows, %d in the fine-tuning splits (%s)",
        name,
        c["rows"],
        used,
        ", ".join(f"{s} {c['rows_by_split'][s]}" for s in FINETUNE_SPLITS),
    )
    if c["rows_outside_finetuning_splits"]:
        other = [s for s in SPLITS if s not in FINETUNE_SPLITS and c["rows_by_split"][s]]
        log.warning(
            "labels %s: %d rows of patients in %s are not used (fine-tuning reads finetune_train, "
            "finetune_val and test, whose sizes `hrrbert prepare` sets: --finetune-train, --finetune-val, "
            "--test; a MEDS source's subject_splits decide which patients they draw from)",
            name,
            c["rows_outside_finetuning_splits"],
            ", ".join(f"{s} ({c['rows_by_split'][s]})" for s in other),
        )
    if c["rows_subject_not_in_dataset"]:
        log.warning(
            "labels %s: %d rows of %d subjects the dataset does not hold left out (e.g. subject_id %s)",
            name,
            c["rows_subject_not_in_dataset"],
            c["subjects_not_in_dataset"],
            ", ".join(map(str, c["examples"]["subjects_not_in_dataset"])),
        )
    if c["rows_without_history"]:
        log.warning(
            "labels %s: %d rows without any visit known by their prediction_time left out (e.g. %s)",
            name,
            c["rows_without_history"],
            "; ".join(c["examples"]["rows_without_history"]),
        )
    if c["rows_cut_by_truncation"]:
        log.warning(
            "labels %s: %d rows left out: `prepare` cut the visits before their prediction_time to fit "
            "--max-len / --max-visits (it keeps the latest visits; e.g. %s)",
            name,
            c["rows_cut_by_truncation"],
            "; ".join(c["examples"]["rows_cut_by_truncation"]),
        )


def _examples(task: LabelTask, known: np.ndarray, mask: np.ndarray) -> list[str]:
    """Up to :data:`EXAMPLES` rows of ``mask`` (over the rows of ``known`` subjects), as text."""
    subj = task.rows["subject_id"].to_numpy()[known][mask][:EXAMPLES]
    times = task.rows["prediction_time"].filter(pa.array(known)).filter(pa.array(mask)).to_pylist()
    return [f"subject_id {int(s)} at {t}" for s, t in zip(subj, times, strict=False)]


def _visits_at_or_before(patients: pa.Table, row: np.ndarray, t: np.ndarray, where: Path) -> np.ndarray:
    """(N,) how many of patient ``row[i]``'s first visits are known at or before ``t[i]`` (microseconds).

    A visit is known at its ``visit_known_times`` entry (MIMIC-IV: discharge; null elements fall back to
    ``visit_times``). The input is a prefix of visits, so a visit counts only when it and every visit before
    it are known by then: the running maximum of the known times is what is compared (an earlier admission
    discharged after a later one holds the later one back, never the reverse)."""
    vt = patients["visit_times"].combine_chunks()
    off = vt.offsets.to_numpy().astype(np.int64)  # (P+1,) into vt.values
    values = vt.values.slice(off[0], off[-1] - off[0])
    n_per_row = np.diff(off)
    if values.null_count:
        raise InputFileError(
            where,
            "visit_times holds nulls: the dataset's source has no visit times (eICU)",
            expected="a time for every visit, to cut sequences at a label's prediction_time",
        )
    times = values.cast(pa.int64()).to_numpy()  # (V,)
    vrow = np.repeat(np.arange(len(n_per_row), dtype=np.int64), n_per_row)
    if len(times) > 1 and np.any((np.diff(times) < 0) & (vrow[1:] == vrow[:-1])):
        raise InputFileError(
            where, "visit_times are not in time order within a patient", expected="ascending"
        )
    kt = patients["visit_known_times"].combine_chunks()
    kv = kt.values.slice(kt.offsets[0].as_py(), len(times))
    known = np.where(kv.is_null().to_numpy(zero_copy_only=False), times, kv.cast(pa.int64()).fill_null(0))
    known = _running_max(known.astype(np.int64), off - off[0])  # (V,) ascending within each patient
    # one sorted key per visit (patient, time rank); a label's count is a binary search of (patient, its time)
    uniq = np.unique(np.concatenate([known, t]))
    m = len(uniq) + 1
    key_v = vrow * m + np.searchsorted(uniq, known)
    key_l = row * m + np.searchsorted(uniq, t)
    return np.searchsorted(key_v, key_l, side="right") - (off[row] - off[0])


def _running_max(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(V,) the running maximum of ``x`` within each run ``offsets[i]:offsets[i + 1]``."""
    if not len(x):
        return x
    uniq, rank = np.unique(x, return_inverse=True)  # ranks < V, so the lifted keys fit int64
    run = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    lifted = rank.astype(np.int64) + run * len(uniq)  # each run above every earlier one
    return uniq[np.maximum.accumulate(lifted) - run * len(uniq)]


def _cut_lengths(patients: pa.Table, row: np.ndarray, k: np.ndarray) -> np.ndarray:
    """(N,) tokens of ``[CLS]`` + the codes of patient ``row[i]``'s first ``k[i]`` visits (segments < k)."""
    seg = patients["segment_ids"].combine_chunks()
    off = seg.offsets.to_numpy().astype(np.int64)
    n_tok = np.diff(off)
    values = seg.values.slice(off[0], off[-1] - off[0]).to_numpy(zero_copy_only=False).astype(np.int64)
    body = np.ones(len(values), bool)
    body[(off[:-1] - off[0])[n_tok > 0]] = False  # the [CLS] of each sequence
    srow = np.repeat(np.arange(len(n_tok), dtype=np.int64), n_tok)[body]
    s = int(values.max(initial=0)) + 2
    key = srow * s + values[body]  # ascending: patients in order, segments ascending within one
    start = (off[row] - off[0]) - row  # codes of the patients before row[i]
    return 1 + np.searchsorted(key, row * s + np.minimum(k, s - 1), side="left") - start


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(con.execute(sql).fetchall()[0][0])


def _rel(root: Path, p: str) -> str:
    try:
        return str(Path(p).relative_to(root.absolute()))
    except ValueError:
        return p
