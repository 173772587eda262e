"""MEDS (0.4) -> the common long table and labels, with DuckDB over the DataSchema Parquet shards.

The files read and their columns: ``docs/input-formats.md``, "MEDS".

Diagnosis codes are recognised in both forms MIMIC ETLs write: ``DIAGNOSIS//ICD//10//E119`` (MIMIC-IV
MEDS ETL) and ``ICD10CM/E11.9`` (OMOP style, Stanford ``meds_etl``), normalised to (vocabulary, dotless
code); other codes are ignored (counted). A visit is an admission where the data carry ``hadm_id``
(an extra column the MIMIC ETL keeps), else a distinct timestamp; visits are ordered by time, codes
within a visit by their row order in the shard. ``mortality_6m``: a ``MEDS_DEATH`` event within 182
days after the last visit's time (diagnoses are dated at discharge by the ETL). ``subject_splits.parquet``
(``train``/``tuning``/``held_out``) becomes ``given_split``, which the split step honours.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from duckdb import DuckDBPyConnection

from pipelines.errors import InputFileError, MissingTableError

from .common import MORTALITY_DAYS, ReadResult, connect, events_and_labels, input_record, one, read_result

DATA_COLUMNS = {"subject_id": "int64", "time": "timestamp[us]", "code": "string"}
SPLIT_COLUMNS = {"subject_id": "int64", "split": "string"}
# (regex, vocabulary expression, code group) for the two diagnosis code forms
CODE_FORMS = (
    (
        r"^DIAGNOSIS//ICD//(9|10)//([^/]+)$",
        "CASE regexp_extract(code, '{re}', 1) WHEN '9' THEN 'ICD9CM' ELSE 'ICD10CM' END",
        2,
    ),
    (r"^(ICD9CM|ICD10CM)/([^/]+)$", "regexp_extract(code, '{re}', 1)", 2),
)
DEATH_CODE = "MEDS_DEATH"


def _check_schema(path: Path, expected: dict[str, str]) -> list[str]:
    try:
        schema = pq.read_schema(path)
    except Exception as e:  # pyarrow raises several types for a non-Parquet file
        raise InputFileError(path, f"not a readable Parquet file: {e}") from e
    missing = [c for c in expected if c not in schema.names]
    if missing:
        raise InputFileError(
            path,
            f"missing column(s) {', '.join(missing)}",
            expected=", ".join(f"{k}: {v}" for k, v in expected.items()),
            found=", ".join(f"{f.name}: {f.type}" for f in schema),
        )
    return schema.names


def read_meds(path: str | Path, *, threads: int | None = None) -> ReadResult:
    """Read a MEDS dataset root (``data/**/*.parquet``, optional ``metadata/subject_splits.parquet``)."""
    root = Path(path)
    shards = sorted((root / "data").rglob("*.parquet")) if (root / "data").is_dir() else []
    if not shards:
        raise MissingTableError(
            root / "data", "no DataSchema shards", hint="expected data/**/*.parquet under the MEDS root"
        )
    con = connect(threads)
    _load_shards(con, shards)
    _visits(con)
    inputs = [input_record(root, s) for s in shards] + _given_splits(con, root)
    con.execute(
        "CREATE TEMP TABLE mort AS SELECT l.subject_id, coalesce(bool_or(date_diff('day', l.t, r.time) "
        f"BETWEEN 0 AND {MORTALITY_DAYS}), false) AS mortality_6m, any_value(sp.split) AS given_split FROM lastv l "
        f"LEFT JOIN raw r ON r.subject_id = l.subject_id AND r.code = '{DEATH_CODE}' LEFT JOIN sp "
        "ON sp.subject_id = l.subject_id GROUP BY l.subject_id"
    )
    events, labels = events_and_labels(
        con,
        "SELECT subject_id, visit_index, visit_time, (row_number() OVER (PARTITION BY subject_id, visit_index "
        "ORDER BY filename, file_row_number) - 1)::INT AS seq, vocabulary, code FROM ev ORDER BY subject_id, visit_index, seq",
    )
    counts = {
        "patients_in_source": one(con, "SELECT count(DISTINCT subject_id) FROM raw")[0],
        "rows_in_source": one(con, "SELECT count(*) FROM raw")[0],
        "non_diagnosis_rows": one(con, "SELECT count(*) FROM dx WHERE vocabulary IS NULL")[0],
        "diagnosis_rows_without_time": one(con, "SELECT count(*) FROM dx WHERE vocabulary IS NOT NULL AND time IS NULL")[0],
        "patients_with_codes": labels.num_rows,
        "subjects_with_given_split": one(con, "SELECT count(*) FROM sp")[0],
    }  # fmt: skip
    counts["dropped_no_diagnoses"] = counts["patients_in_source"] - labels.num_rows
    return read_result("meds", root, inputs, events, labels, counts)


def _load_shards(con: DuckDBPyConnection, shards: list[Path]) -> None:
    """``raw`` (every row of the shards, with ``hadm_id`` where all shards carry it) and ``dx`` (each row's
    diagnosis vocabulary and dotless code, null vocabulary for other codes)."""
    names = [_check_schema(s, DATA_COLUMNS) for s in shards]
    hadm = "hadm_id::BIGINT" if all("hadm_id" in n for n in names) else "NULL::BIGINT"
    files = ", ".join(f"'{s}'" for s in shards)
    con.execute(
        f"CREATE TEMP TABLE raw AS SELECT subject_id::BIGINT AS subject_id, time::TIMESTAMP AS time, code, "
        f"{hadm} AS hadm_id, filename, file_row_number FROM read_parquet([{files}], union_by_name=true, "
        "filename=true, file_row_number=true)"
    )
    vocab = (
        "CASE "
        + " ".join(f"WHEN regexp_matches(code, '{rx}') THEN {v.format(re=rx)}" for rx, v, _ in CODE_FORMS)
        + " END"
    )
    dcode = (
        "CASE "
        + " ".join(
            f"WHEN regexp_matches(code, '{rx}') THEN regexp_extract(code, '{rx}', {g})"
            for rx, _, g in CODE_FORMS
        )
        + " END"
    )
    con.execute(
        f"CREATE TEMP TABLE dx AS SELECT subject_id, time, hadm_id, filename, file_row_number, {vocab} AS vocabulary, "
        f"upper(replace(trim({dcode}), '.', '')) AS code FROM raw"
    )


def _visits(con: DuckDBPyConnection) -> None:
    """``vis`` (a visit: an admission, else a timestamp), ``ev`` (the codes with their visit's rank) and
    ``lastv`` (each patient's last visit and its time)."""
    con.execute(
        "CREATE TEMP TABLE vis AS SELECT subject_id, coalesce(hadm_id::VARCHAR, time::VARCHAR) AS vkey, "
        "min(time) AS vtime FROM dx WHERE vocabulary IS NOT NULL AND time IS NOT NULL AND code <> '' GROUP BY ALL"
    )
    con.execute(
        "CREATE TEMP TABLE ev AS SELECT d.subject_id, v.vtime AS visit_time, d.vocabulary, d.code, "
        "(dense_rank() OVER (PARTITION BY d.subject_id ORDER BY v.vtime, v.vkey) - 1)::INT AS visit_index, "
        "d.filename, d.file_row_number FROM dx d JOIN vis v ON v.subject_id = d.subject_id "
        "AND v.vkey = coalesce(d.hadm_id::VARCHAR, d.time::VARCHAR) WHERE d.vocabulary IS NOT NULL AND d.code <> ''"
    )
    con.execute(
        "CREATE TEMP TABLE lastv AS SELECT subject_id, max(visit_index) AS visit_index, max(visit_time) AS t FROM ev GROUP BY ALL"
    )


def _given_splits(con: DuckDBPyConnection, root: Path) -> list[dict]:
    """``sp`` (subject_id -> the split ``metadata/subject_splits.parquet`` names, empty without it); the
    splits file's input record when there is one."""
    splits = root / "metadata" / "subject_splits.parquet"
    if not splits.is_file():
        con.execute("CREATE TEMP TABLE sp (subject_id BIGINT, split VARCHAR)")
        return []
    _check_schema(splits, SPLIT_COLUMNS)
    con.execute(
        f"CREATE TEMP TABLE sp AS SELECT subject_id::BIGINT AS subject_id, any_value(split) AS split FROM read_parquet('{splits}') GROUP BY ALL"
    )
    return [input_record(root, splits)]
