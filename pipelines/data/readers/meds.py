"""MEDS (0.4) -> the common long table and visit labels, with DuckDB over the DataSchema Parquet shards.

The files read and their columns: ``docs/input-formats.md``, "MEDS". The shards are every
``data/**/*.parquet``, symbolic links to folders followed (``data/train`` may link to a folder of shards;
each real folder read once, a link loop skipped with a warning, a link to nothing an error); the log says
how many shards each split folder gave.

Diagnosis codes are recognised in the forms MIMIC and OMOP ETLs write: ``DIAGNOSIS//ICD//10//E119``
(MIMIC-IV MEDS ETL), ``ICD10CM/E11.9`` (OMOP style, Stanford ``meds_etl``) and ``SNOMED/<sctid>``
(OMOP standard concepts), normalised to (vocabulary, dotless code); ``SNOMED`` codes are resolved to
the program's tokens by ``prepare``. Other codes are not read: counted by prefix, and codes that look
like diagnoses in another form (``ICD10/…``, ``DIAGNOSIS//ICD//11//…``) are a finding with examples. A
visit is an admission where the data carry ``hadm_id`` (an extra column the MIMIC ETL keeps), else a
distinct timestamp; visits are ordered by time (then admission or timestamp), codes within a visit by
their row order in the shards. A visit's ``mortality_6m``: a ``MEDS_DEATH`` event 0-182 days after the
visit's time (diagnoses are dated at discharge by the ETL). ``subject_splits.parquet``
(``train``/``tuning``/``held_out``) becomes ``given_split``, which the split step honours.

``metadata/codes.parquet`` (the CodeMetadataSchema: ``code``, ``description``, ``parent_codes``) is read
when present: a code of no recognised form is read as the first of its ``parent_codes`` in a recognised
ICD form (``SNOMED/…`` parents only for codes that look like diagnoses), and descriptions name the codes
in the findings' examples. ``metadata/dataset.json`` (the DatasetMetadataSchema) is read for the
dataset's name, versions and ETL, which go into ``source.metadata``. Both are inputs of the dataset
(:func:`meds_files` lists every file that makes its id).

Checks: column types (``subject_id`` integer, ``time`` timestamp or date, ``code`` string, ``hadm_id``
integer; ``codes.parquet``: ``code`` string, ``description`` string, ``parent_codes`` list of strings)
before reading; ``dataset.json`` must be a JSON object; exact duplicate diagnosis rows dropped (a
finding); diagnosis rows without a time counted (a finding); a subject with two different splits is an
error; a ``time`` outside the years 1 to 9999 is an error naming shard and row; a ``time`` with a time
zone is converted to UTC (the finding ``shards_with_time_zone``, naming the shards and their zones).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from duckdb import DuckDBPyConnection

from ontology_compiler.api import describe_files, walk_files
from pipelines.errors import InputFileError, MissingTableError

from .common import (
    EXAMPLES,
    MORTALITY_DAYS,
    Findings,
    ReadResult,
    connect,
    duckdb_path,
    input_record,
    one,
    read_result,
    to_tables,
)

log = logging.getLogger(__name__)

DATA_COLUMNS = {"subject_id": "integer", "time": "timestamp or date", "code": "string"}
SPLIT_COLUMNS = {"subject_id": "integer", "split": "string"}
OPTIONAL_COLUMNS = {"hadm_id": "integer"}
CODES_COLUMNS = {"code": "string"}
CODES_OPTIONAL_COLUMNS = {"description": "string", "parent_codes": "list of strings"}
SPLITS_FILE = Path("metadata") / "subject_splits.parquet"
CODES_FILE = Path("metadata") / "codes.parquet"
DATASET_FILE = Path("metadata") / "dataset.json"
# dataset.json fields recorded in the manifest's source.metadata (the DatasetMetadataSchema's text fields)
DATASET_TEXT_FIELDS = ("dataset_name", "dataset_version", "etl_name", "etl_version", "meds_version",
                       "created_at", "license", "location_uri", "description_uri")  # fmt: skip
DATASET_LIST_FIELDS = ("raw_source_id_columns", "code_modifier_columns", "additional_value_modality_columns",
                       "site_id_columns", "other_extension_columns")  # fmt: skip
# (regex, vocabulary expression of the text column {col}, code group) for the diagnosis code forms
CODE_FORMS = (
    (
        r"^DIAGNOSIS//ICD//(9|10)//([^/]+)$",
        "CASE regexp_extract({col}, '{re}', 1) WHEN '9' THEN 'ICD9CM' ELSE 'ICD10CM' END",
        2,
    ),
    (r"^(ICD9CM|ICD10CM)/([^/]+)$", "regexp_extract({col}, '{re}', 1)", 2),
    (r"^(SNOMED)/([0-9]{6,18})$", "regexp_extract({col}, '{re}', 1)", 2),
)
# codes that look like diagnoses but match no form above (a finding, with examples)
DIAGNOSIS_LIKE = r"^(DIAGNOSIS|ICD|SNOMED)"
# the forms of CODE_FORMS a parent code may take for any code of no form; a SNOMED parent counts only for a
# code that looks like a diagnosis (procedures and drugs also map to SNOMED CT concepts)
ICD_PARENT = r"^(DIAGNOSIS//ICD//(9|10)//[^/]+|(ICD9CM|ICD10CM)/[^/]+)$"
PROCEDURE_LIKE = (
    r"^ICD[0-9]*(PCS|PROC)"  # ICD procedure vocabularies (OMOP ICD10PCS, ICD9Proc): never via SNOMED
)
DEATH_CODE = "MEDS_DEATH"
TOP_PREFIXES = 10  # code prefixes listed among the rows not read


def _type_ok(t: pa.DataType, want: str) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_null(t):
        return True
    return {
        "integer": pa.types.is_integer,
        "string": lambda x: (
            pa.types.is_string(x) or pa.types.is_large_string(x) or pa.types.is_string_view(x)
        ),
        "timestamp or date": lambda x: pa.types.is_timestamp(x) or pa.types.is_date(x),
        "boolean": pa.types.is_boolean,
        "list of strings": lambda x: (
            (pa.types.is_list(x) or pa.types.is_large_list(x))
            and (
                pa.types.is_string(x.value_type)
                or pa.types.is_large_string(x.value_type)
                or pa.types.is_null(x.value_type)
            )  # list<null>: a column of empty lists
        ),
    }[want](t)


def check_schema(path: Path, expected: dict[str, str], optional: dict[str, str] | None = None) -> list[str]:
    """The file's column names; raises naming the file, the expected and the found schema when a column
    of ``expected`` is missing or a column of ``expected``/``optional`` has another type."""
    try:
        schema = pq.read_schema(path)
    except Exception as e:  # pyarrow raises several types for a non-Parquet file
        raise InputFileError(path, f"not a readable Parquet file: {e}") from e
    want = ", ".join(f"{k}: {v}" for k, v in expected.items())
    found = ", ".join(f"{f.name}: {f.type}" for f in schema)
    missing = [c for c in expected if c not in schema.names]
    if missing:
        raise InputFileError(path, f"missing column(s) {', '.join(missing)}", expected=want, found=found)
    for col, kind in {**expected, **(optional or {})}.items():
        if col in schema.names and not _type_ok(schema.field(col).type, kind):
            raise InputFileError(
                path,
                f"column {col} has type {schema.field(col).type}",
                expected=f"{col}: {kind}",
                found=found,
            )
    return schema.names


def meds_root(path: str | Path) -> Path:
    """The MEDS root: the folder given (holding ``data/`` and ``metadata/``)."""
    p = Path(path)
    if not p.is_dir():
        raise InputFileError(p, "not a folder", hint="point --meds at the MEDS root that holds data/")
    return p


def meds_export(path: str | Path, *, threads: int | None = None) -> tuple[pa.Table, dict, pa.Table]:
    """What ``export-meds`` writes beyond the reader's result: each dead subject's first ``MEDS_DEATH``
    time (``subject_id``, ``time``), no titles (they are in the source's own ``codes.parquet``) and the
    source's ``MEDS_BIRTH`` and ``GENDER//…`` events as they are (``subject_id``, ``time``, ``code``)."""
    con = connect(threads)
    con.execute(
        "CREATE TEMP TABLE raw AS SELECT subject_id::BIGINT AS subject_id, time::TIMESTAMP AS time, "
        "code::VARCHAR AS code FROM read_parquet($1, union_by_name = true)",
        [[duckdb_path(s) for s in data_shards(Path(path))]],
    )
    deaths = con.sql(
        f"SELECT * FROM (SELECT subject_id, min(time) AS time FROM raw WHERE code = '{DEATH_CODE}' GROUP BY "
        "subject_id) WHERE time IS NOT NULL ORDER BY subject_id"
    ).to_arrow_table()
    static = con.sql(
        "SELECT DISTINCT subject_id, time, code FROM raw WHERE code = 'MEDS_BIRTH' OR code LIKE 'GENDER//%' "
        "ORDER BY subject_id, time NULLS FIRST, code"
    ).to_arrow_table()
    return deaths, {}, static


def data_shards(root: Path) -> list[Path]:
    """The DataSchema shards ``data/**/*.parquet`` of the MEDS root ``root``, symbolic links to folders
    followed (``data/train`` may link to a folder of shards; each real folder is read once)."""
    data = root / "data"
    return walk_files(data, lambda n: n.endswith(".parquet"), error=InputFileError) if data.is_dir() else []


def meds_files(path: str | Path) -> list[Path]:
    """Every file of the MEDS root ``path`` that a dataset prepared from it depends on (its inputs): the
    shards ``data/**/*.parquet``, then those of ``metadata/subject_splits.parquet``,
    ``metadata/codes.parquet`` and ``metadata/dataset.json`` that exist."""
    root = Path(path)
    shards = data_shards(root)
    return shards + [root / m for m in (SPLITS_FILE, CODES_FILE, DATASET_FILE) if (root / m).is_file()]


def read_meds(path: str | Path, *, threads: int | None = None) -> ReadResult:
    """Read a MEDS dataset root (``data/**/*.parquet``; optional ``metadata/subject_splits.parquet``,
    ``metadata/codes.parquet`` and ``metadata/dataset.json``)."""
    root = Path(path)
    shards = data_shards(root)
    if not shards:
        raise MissingTableError(
            root / "data", "no DataSchema shards", hint="expected data/**/*.parquet under the MEDS root"
        )
    log.info("%s: reading %s", root / "data", describe_files(root / "data", shards, "shard"))
    con = connect(threads)
    f = Findings("meds")
    metadata, dataset_input = _dataset_metadata(root, f)
    codes_input = _code_metadata(con, root, f)
    _load_shards(con, root, shards, f)
    _visits(con)
    inputs = (
        [input_record(root, s) for s in shards] + _given_splits(con, root, f) + codes_input + dataset_input
    )
    con.execute(
        "CREATE TEMP TABLE vm AS SELECT v.subject_id, v.visit_index, "
        "coalesce(bool_or(date_diff('day', v.vtime, "
        f"r.time) BETWEEN 0 AND {MORTALITY_DAYS}), false) AS mortality_6m, "
        "any_value(sp.split) AS given_split "
        f"FROM vis v LEFT JOIN raw r ON r.subject_id = v.subject_id AND r.code = '{DEATH_CODE}' "
        "LEFT JOIN sp ON sp.subject_id = v.subject_id GROUP BY v.subject_id, v.visit_index"
    )
    events, visits = to_tables(
        con,
        "SELECT subject_id, visit_index, visit_time, known_time, "
        "(row_number() OVER (PARTITION BY subject_id, visit_index "
        "ORDER BY filename, file_row_number) - 1)::INT AS seq, vocabulary, code FROM ev "
        "ORDER BY subject_id, visit_index, seq",
        "SELECT subject_id, visit_index, mortality_6m, given_split FROM vm ORDER BY subject_id, visit_index",
    )
    f.count("patients_in_source", one(con, "SELECT count(DISTINCT subject_id) FROM raw")[0])
    f.count("rows_in_source", one(con, "SELECT count(*) FROM raw")[0])
    f.count("patients_with_codes", one(con, "SELECT count(DISTINCT subject_id) FROM vis")[0])
    f.count("subjects_with_given_split", one(con, "SELECT count(*) FROM sp")[0])
    f.count("dropped_no_diagnoses", f.counts["patients_in_source"] - f.counts["patients_with_codes"])
    result = read_result("meds", root, inputs, events, visits, f.as_dict())
    if metadata is not None:
        result.source["metadata"] = metadata
    return result


def _rel(root: Path, p: str) -> str:
    try:
        return str(Path(p).relative_to(root.absolute()))
    except ValueError:
        return p


def _load_shards(con: DuckDBPyConnection, root: Path, shards: list[Path], f: Findings) -> None:
    """``raw`` (every row of the shards, with ``hadm_id`` where all shards carry it), ``dx0`` (each row's
    diagnosis vocabulary and dotless code, null vocabulary for other codes) and ``dx`` (the diagnosis rows,
    exact duplicates dropped)."""
    names = [check_schema(s, DATA_COLUMNS, OPTIONAL_COLUMNS) for s in shards]
    _time_zones(root, shards, f)
    hadm = "hadm_id::BIGINT" if all("hadm_id" in n for n in names) else "NULL::BIGINT"
    select = (
        f"SELECT subject_id::BIGINT AS subject_id, time::TIMESTAMP AS time, code::VARCHAR AS code, "
        f"{hadm} AS hadm_id, filename, file_row_number FROM read_parquet($1, union_by_name = true, "
        "filename = true, file_row_number = true)"
    )
    try:
        con.execute(f"CREATE TEMP TABLE raw AS {select}", [[duckdb_path(s) for s in shards]])
    except duckdb.Error as e:
        for s in shards:  # name the shard that fails on its own
            try:
                con.execute(f"CREATE OR REPLACE TEMP TABLE probe AS {select}", [[duckdb_path(s)]])
            except duckdb.Error as e1:
                raise InputFileError(s, f"cannot be read: {str(e1).strip().splitlines()[0]}") from e1
        raise InputFileError(root / "data", f"the shards cannot be read together: {e}") from e
    missing = one(
        con, "SELECT filename, file_row_number FROM raw WHERE subject_id IS NULL ORDER BY ALL LIMIT 1"
    )
    if missing:  # the DataSchema's subject_id is not nullable; a row without one belongs to no patient
        raise InputFileError(
            Path(missing[0]),
            f"empty subject_id at file_row_number {missing[1]}",
            expected="a subject_id on every row",
        )
    _check_time_range(con)
    # a code of no form is read as its parent code (metadata/codes.parquet), where it has a usable one
    con.execute(
        "CREATE TEMP TABLE via AS SELECT child, parent FROM (SELECT code AS child, list_filter(parent_codes, "
        f"lambda p: regexp_matches(p, '{ICD_PARENT}') OR (regexp_matches(p, '{CODE_FORMS[2][0]}') AND "
        f"regexp_matches(upper(code), '{DIAGNOSIS_LIKE}') AND NOT regexp_matches(upper(code), "
        f"'{PROCEDURE_LIKE}')))[1] AS parent FROM codes WHERE NOT ({_any_form('code')})) "
        "WHERE parent IS NOT NULL"
    )
    con.execute(
        "CREATE TEMP TABLE raw1 AS SELECT r.*, coalesce(v.parent, r.code) AS read_code FROM raw r "
        "LEFT JOIN via v ON v.child = r.code ORDER BY r.filename, r.file_row_number"
    )
    vocab, dcode = _form_sql("read_code")
    con.execute(
        "CREATE TEMP TABLE dx0 AS SELECT subject_id, time, hadm_id, filename, file_row_number, "
        "code AS source_code, "
        f"{vocab} AS vocabulary, upper(replace(trim({dcode}), '.', '')) AS code, read_code <> source_code AS "
        "via_parent FROM raw1 ORDER BY filename, file_row_number"
    )
    f.count("rows_read_through_parent_codes", one(con, "SELECT count(*) FROM dx0 WHERE via_parent")[0])
    dup = con.execute(
        "SELECT filename, file_row_number, first_f, first_r FROM (SELECT filename, file_row_number, "
        "first_value(filename) OVER w AS first_f, first_value(file_row_number) OVER w AS first_r FROM dx0 "
        "WHERE vocabulary IS NOT NULL WINDOW w AS (PARTITION BY subject_id, time, hadm_id, source_code "
        "ORDER BY filename, file_row_number)) WHERE NOT (filename = first_f AND file_row_number = first_r) "
        "ORDER BY filename, file_row_number"
    ).fetchall()
    f.finding(
        "duplicate_diagnosis_rows",
        len(dup),
        [
            f"{_rel(root, a)} file_row_number {b} repeats {_rel(root, c)} file_row_number {d}"
            for a, b, c, d in dup
        ],
        "exact duplicate diagnosis rows (subject_id, time, code, hadm_id) dropped",
    )
    con.execute(
        "CREATE TEMP TABLE dx AS SELECT * FROM dx0 WHERE vocabulary IS NOT NULL QUALIFY row_number() OVER "
        "(PARTITION BY subject_id, time, hadm_id, source_code ORDER BY filename, file_row_number) = 1"
    )
    _not_read(con, root, f)


def _time_zones(root: Path, shards: list[Path], f: Findings) -> None:
    """Warn once (the finding ``shards_with_time_zone``, each example a shard and its zone) when shards'
    ``time`` carries a time zone: such times are instants, read as UTC wall-clock times (the zone dropped)."""
    zoned = []
    for s in shards:
        t = pq.read_schema(s).field("time").type
        if pa.types.is_timestamp(t) and t.tz:
            zoned.append(f"{_rel(root, str(s.absolute()))} ({t.tz})")
    f.finding(
        "shards_with_time_zone",
        len(zoned),
        zoned,
        "shard(s) whose time column has a time zone: their times were converted to UTC and read as UTC "
        "wall-clock times (visit days and the 182-day mortality window are counted in UTC)",
    )


# the times a shard may hold: those of a calendar year 1 to 9999 (DuckDB reads far more, and infinity)
TIME_RANGE = ("0001-01-01", "9999-12-31 23:59:59.999999")


def _check_time_range(con: DuckDBPyConnection) -> None:
    """Raise naming the shard and row of the first time outside :data:`TIME_RANGE` (year 10000 and later,
    before year 1, or infinity)."""
    bad = one(
        con,
        f"SELECT filename, file_row_number, time::VARCHAR FROM raw WHERE time NOT BETWEEN "
        f"TIMESTAMP '{TIME_RANGE[0]}' AND TIMESTAMP '{TIME_RANGE[1]}' ORDER BY filename, file_row_number "
        "LIMIT 1",
    )
    if bad:
        raise InputFileError(
            Path(bad[0]),
            f"time {bad[2]} at file_row_number {bad[1]} is out of range",
            expected=f"a time from {TIME_RANGE[0]} to 9999-12-31",
        )


def _form_sql(col: str) -> tuple[str, str]:
    """SQL of the diagnosis vocabulary and the (dotted) code of the text column ``col`` (null when ``col``
    has no form of :data:`CODE_FORMS`)."""
    vocab = " ".join(
        f"WHEN regexp_matches({col}, '{rx}') THEN {v.format(re=rx, col=col)}" for rx, v, _ in CODE_FORMS
    )
    dcode = " ".join(
        f"WHEN regexp_matches({col}, '{rx}') THEN regexp_extract({col}, '{rx}', {g})"
        for rx, _, g in CODE_FORMS
    )
    return f"CASE {vocab} END", f"CASE {dcode} END"


def _any_form(col: str) -> str:
    return " OR ".join(f"regexp_matches({col}, '{rx}')" for rx, _, _ in CODE_FORMS)


def _not_read(con: DuckDBPyConnection, root: Path, f: Findings) -> None:
    """Count the rows whose code is not a diagnosis (by prefix), and find diagnosis-like codes of no known
    form."""
    f.count("non_diagnosis_rows", one(con, "SELECT count(*) FROM dx0 WHERE vocabulary IS NULL")[0])
    top = con.execute(
        "SELECT coalesce(regexp_extract(source_code, '^([^/]*)', 1), '(null)') AS prefix, count(*) AS n "
        "FROM dx0 "
        f"WHERE vocabulary IS NULL GROUP BY ALL ORDER BY n DESC, prefix LIMIT {TOP_PREFIXES}"
    ).fetchall()
    f.counts["non_diagnosis_prefixes"] = {p: int(n) for p, n in top}
    cond = (
        f"FROM dx0 LEFT JOIN codes c ON c.code = dx0.source_code WHERE vocabulary IS NULL AND source_code <> "
        f"'{DEATH_CODE}' AND regexp_matches(upper(source_code), '{DIAGNOSIS_LIKE}')"
    )
    n = one(con, f"SELECT count(*) {cond}")[0]
    ex = con.execute(
        f"SELECT source_code, count(*) AS n, any_value(c.description) {cond} GROUP BY source_code "
        f"ORDER BY n DESC, source_code LIMIT {EXAMPLES}"
    ).fetchall()
    f.finding(
        "unrecognised_diagnosis_codes",
        n,
        [f"{c!r} ({f'{d}, ' if d else ''}{k} rows)" for c, k, d in ex],
        "rows with a diagnosis-like code in no form the reader reads "
        "(not read; see docs/input-formats.md, MEDS)",
    )
    cond = "FROM dx WHERE vocabulary IS NOT NULL AND time IS NULL"
    n = one(con, f"SELECT count(*) {cond}")[0]
    ex = con.execute(
        f"SELECT filename, file_row_number, subject_id, source_code {cond} "
        "ORDER BY filename, file_row_number "
        f"LIMIT {EXAMPLES}"
    ).fetchall()
    f.finding(
        "diagnosis_rows_without_time",
        n,
        [f"{_rel(root, a)} file_row_number {b}: subject_id {c}, {d!r}" for a, b, c, d in ex],
        "diagnosis rows without a time (kept only where an hadm_id joins them to a timed visit)",
    )


def _visits(con: DuckDBPyConnection) -> None:
    """``vis`` (a visit: an admission, else a timestamp, with its first time, the time its last code is known
    and its rank) and ``ev`` (the codes with their visit's times and rank)."""
    con.execute(
        "CREATE TEMP TABLE vis AS SELECT subject_id, vkey, vtime, ktime, "
        "(dense_rank() OVER (PARTITION BY subject_id "
        "ORDER BY vtime, vkey) - 1)::INT AS visit_index FROM (SELECT subject_id, "
        "coalesce(hadm_id::VARCHAR, time::VARCHAR) AS vkey, min(time) AS vtime, max(time) AS ktime FROM dx "
        "WHERE time IS NOT NULL AND code <> '' GROUP BY ALL)"
    )
    con.execute(
        "CREATE TEMP TABLE ev AS SELECT d.subject_id, v.vtime AS visit_time, v.ktime AS known_time, "
        "d.vocabulary, d.code, "
        "v.visit_index, "
        "d.filename, d.file_row_number FROM dx d JOIN vis v ON v.subject_id = d.subject_id "
        "AND v.vkey = coalesce(d.hadm_id::VARCHAR, d.time::VARCHAR) WHERE d.code <> ''"
    )


def _given_splits(con: DuckDBPyConnection, root: Path, f: Findings) -> list[dict]:
    """``sp`` (subject_id -> the split ``metadata/subject_splits.parquet`` names, empty without it); the
    splits file's input record when there is one. A subject with two different splits is an error."""
    splits = root / SPLITS_FILE
    if not splits.is_file():
        con.execute("CREATE TEMP TABLE sp (subject_id BIGINT, split VARCHAR)")
        return []
    check_schema(splits, SPLIT_COLUMNS)
    try:
        con.execute(
            "CREATE TEMP TABLE sp0 AS SELECT subject_id::BIGINT AS subject_id, split::VARCHAR AS split "
            "FROM read_parquet($1)",
            [duckdb_path(splits)],
        )
    except duckdb.Error as e:
        raise InputFileError(splits, f"cannot be read: {str(e).strip().splitlines()[0]}") from e
    dup = con.execute(
        "SELECT subject_id, count(*) FROM sp0 GROUP BY subject_id, split HAVING count(*) > 1 "
        "ORDER BY subject_id"
    ).fetchall()
    f.finding(
        "duplicate_split_rows",
        sum(n - 1 for _, n in dup),
        [f"subject_id {s} listed {n} times" for s, n in dup],
        "exact duplicate rows in subject_splits.parquet dropped",
    )
    bad = con.execute(
        "SELECT subject_id, list(DISTINCT split ORDER BY split) FROM sp0 GROUP BY subject_id "
        f"HAVING count(DISTINCT split) > 1 ORDER BY subject_id LIMIT {EXAMPLES + 1}"
    ).fetchall()
    if bad:
        raise InputFileError(
            splits,
            f"subject_id(s) {', '.join(str(s) for s, _ in bad[:EXAMPLES])}"
            f"{' …' if len(bad) > EXAMPLES else ''} "
            "with more than one split",
            expected="one split per subject_id",
            found=f"subject_id {bad[0][0]}: {', '.join(map(str, bad[0][1]))}",
        )
    con.execute(
        "CREATE TEMP TABLE sp AS SELECT DISTINCT subject_id, split FROM sp0 WHERE subject_id IS NOT NULL"
    )
    return [input_record(root, splits)]


def _code_metadata(con: DuckDBPyConnection, root: Path, f: Findings) -> list[dict]:
    """``codes`` (``code``, ``description``, ``parent_codes``; one row per code) from
    ``metadata/codes.parquet``, empty without it; the file's input record when there is one. A code listed
    twice keeps its first row (a finding); rows without a code are dropped (a finding)."""
    path = root / CODES_FILE
    con.execute("CREATE TEMP TABLE codes (code VARCHAR, description VARCHAR, parent_codes VARCHAR[])")
    if not path.is_file():
        return []
    names = check_schema(path, CODES_COLUMNS, CODES_OPTIONAL_COLUMNS)
    desc = "description::VARCHAR" if "description" in names else "NULL::VARCHAR"
    parents = "parent_codes::VARCHAR[]" if "parent_codes" in names else "NULL::VARCHAR[]"
    try:
        con.execute(
            f"CREATE TEMP TABLE codes0 AS SELECT code::VARCHAR AS code, {desc} AS description, {parents} AS "
            "parent_codes, file_row_number FROM read_parquet($1, file_row_number = true)",
            [duckdb_path(path)],
        )
    except duckdb.Error as e:
        raise InputFileError(path, f"cannot be read: {str(e).strip().splitlines()[0]}") from e
    rows = con.execute("SELECT file_row_number FROM codes0 WHERE code IS NULL ORDER BY ALL").fetchall()
    f.finding(
        "code_metadata_rows_without_code",
        len(rows),
        [f"file_row_number {r}" for (r,) in rows],
        "rows of metadata/codes.parquet without a code dropped",
    )
    dup = con.execute(
        "SELECT code, list(file_row_number ORDER BY file_row_number) FROM codes0 WHERE code IS NOT NULL "
        "GROUP BY code HAVING count(*) > 1 ORDER BY min(file_row_number)"
    ).fetchall()
    f.finding(
        "code_metadata_duplicate_codes",
        sum(len(r) - 1 for _, r in dup),
        [f"{c!r} at file_row_number {', '.join(map(str, r))}" for c, r in dup],
        "codes listed more than once in metadata/codes.parquet (the first row is used)",
    )
    con.execute(
        "INSERT INTO codes SELECT code, description, parent_codes FROM codes0 WHERE code IS NOT NULL "
        "QUALIFY row_number() OVER (PARTITION BY code ORDER BY file_row_number) = 1"
    )
    n, described, with_parents = one(
        con, "SELECT count(*), count(description), count(*) FILTER (WHERE len(parent_codes) > 0) FROM codes"
    )
    f.count("codes_in_metadata", n)
    f.count("codes_with_description", described)
    f.count("codes_with_parent_codes", with_parents)
    return [input_record(root, path)]


def _dataset_metadata(root: Path, f: Findings) -> tuple[dict | None, list[dict]]:
    """The text and list fields of ``metadata/dataset.json`` (None without the file) and its input record.
    Not a JSON object: an error; a field of another type than the DatasetMetadataSchema's: a finding."""
    path = root / DATASET_FILE
    if not path.is_file():
        return None, []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputFileError(
            path, f"not valid JSON ({e})", expected="a JSON object (MEDS DatasetMetadataSchema)"
        ) from e
    if not isinstance(data, dict):
        raise InputFileError(
            path,
            "not a JSON object",
            expected="a JSON object (MEDS DatasetMetadataSchema)",
            found=type(data).__name__,
        )
    out, bad = {}, []
    for key in (*DATASET_TEXT_FIELDS, *DATASET_LIST_FIELDS):
        v = data.get(key)
        if v is None:
            continue
        text = key in DATASET_TEXT_FIELDS
        if (text and isinstance(v, str)) or (
            not text and isinstance(v, list) and all(isinstance(x, str) for x in v)
        ):
            out[key] = v
        else:
            bad.append(f"{key}: {v!r}")
    f.finding(
        "dataset_metadata_fields_of_another_type",
        len(bad),
        bad,
        "fields of metadata/dataset.json of another type than MEDS specifies (not recorded)",
    )
    return out, [input_record(root, path)]
