"""Property-based fuzzing of the input readers (Hypothesis): any input gives a correct result or one of the
project's own errors, never another exception.

- RF2: the fixture release with one file (Relationship, Description, Concept, Language or ExtendedMap)
  carrying generated malformed rows: wrong column counts, non-numeric ids, bad dates, empty fields, odd
  unicode, stray quotes, TABs and CRs, bytes that are not UTF-8. Compiled: a program or an
  ``OntologyCompilerError``.
- MIMIC-IV (``diagnoses_icd``, ``admissions``) and eICU (``diagnosis``, ``patient``): generated rows mixing
  valid and hostile values, then raw byte edits of the written lines (ragged rows, quotes, bad UTF-8),
  gzip or plain CSV. Read: a :class:`ReadResult` that keeps the common table's invariants, or a
  ``PipelineError``.
- MEDS: Parquet shards whose ``subject_id``, ``time``, ``code`` (and ``hadm_id``) have generated types and
  values (nulls, extreme times, zoned times, odd codes), now and then a file that is not Parquet.

The default run tries 25 examples per reader (a few seconds each); ``-m slow`` runs 300. Examples are
derandomized (the same on every run, no example database), so CI never meets a new one by chance.
"""

from __future__ import annotations

import csv
import gzip
import io
import shutil
import tempfile
from datetime import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from ehr_fixtures import adm, write_eicu, write_mimic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rf2_edit import FIXTURE, INT, read_lines, write_lines

from ontology_compiler import OntologyCompilerError, compile_ontology
from pipelines.data.readers.common import EVENT_SCHEMA, LABEL_SCHEMA, VISIT_SCHEMA
from pipelines.data.readers.eicu import read_eicu
from pipelines.data.readers.meds import read_meds
from pipelines.data.readers.mimic import read_mimic
from pipelines.demo.cohort_write import EICU_COLUMNS, MIMIC_COLUMNS
from pipelines.errors import PipelineError

COMMON = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EXAMPLES = [pytest.param(25, id="25"), pytest.param(300, id="300", marks=pytest.mark.slow)]


def run_property(prop, strategy, n: int) -> None:
    settings(max_examples=n, **COMMON)(given(strategy)(prop))()


# --- hostile values ----------------------------------------------------------------------------------------
ODD = [
    "", " ", "  ", "\t", '"', '""', "'", '"quoted"', "a\"b", "\\", "\x00", "\r", "\n", "\r\n", ",", ";", "|",
    "\u200b", "\ufeff", "\u00a0", "é", "ß", "İ", "𝔘𝔫𝔦", "😀", "\u202e", "NULL", "null", "NaN", "nan", "None",
    "inf", "-1", "0", "00", "1.5", "1e5", "+1", "0x1F", "9" * 19, "9" * 25, "-" + "9" * 19,
    "123456789012345678", "20201341", "20200230", "00000000", "99991231", "2020-01-31", "2020013",
    "202001311", "١٢٣",
    "2116-01-01 10:00:00", "2116-13-01 00:00:00", "2116-02-30 00:00:00", "0000-01-01 00:00:00",
    "9999-12-31 23:59:59", "1-01-01 00:00:00", "2116-01-01", "2116-01-01T10:00:00", "24:00:00",
]  # fmt: skip
odd_text = st.one_of(
    st.sampled_from(ODD),
    st.text(max_size=12),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.from_regex(r"[0-9]{1,22}", fullmatch=True),
)


def cell(valid: list) -> st.SearchStrategy:
    """A value of a column: one of ``valid`` (often) or a hostile one."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), odd_text, st.none())


# raw edits of a written file's lines: (op, line index, column index, payload); line 0 is the header
line_edit = st.tuples(
    st.sampled_from(["set", "set", "drop", "add", "line", "bytes", "dup", "insert", "truncate"]),
    st.integers(min_value=0, max_value=400),
    st.integers(min_value=0, max_value=30),
    st.one_of(odd_text.map(lambda s: s.encode("utf-8")), st.binary(max_size=12)),
)


def edit_rows(lines: list[bytes], edits: list[tuple], sep: bytes, *, header: bool = True) -> list[bytes]:
    """Apply ``edits`` to ``lines`` (a file split at its line ends, without them; the header first)."""
    lines = list(lines)
    for op, i, j, payload in edits:
        lo = 0 if header or len(lines) < 2 else 1
        k = lo + i % max(1, len(lines) - lo) if lines else 0
        if not lines:
            lines = [b""]
        fields = lines[k].split(sep)
        j %= len(fields)
        if op == "set":
            fields[j] = payload
        elif op == "drop" and len(fields) > 1:
            del fields[j]
        elif op == "add":
            fields.insert(j, payload)
        elif op == "line":
            lines[k] = payload
            continue
        elif op == "bytes":
            fields[j] = fields[j][: len(fields[j]) // 2] + payload + fields[j][len(fields[j]) // 2 :]
        elif op == "dup":
            lines.insert(k, lines[k])
            continue
        elif op == "insert":
            lines.insert(k + 1, sep.join([payload] * (j + 1)))
            continue
        elif op == "truncate":
            lines[k] = lines[k][: j % (len(lines[k]) + 1)]
            continue
        lines[k] = sep.join(fields)
    return lines


# --- RF2 ---------------------------------------------------------------------------------------------------
RF2_FILES = [
    "sct2_Relationship_Snapshot_INT_*.txt",
    "sct2_Description_Snapshot-en_INT_*.txt",
    "sct2_Concept_Snapshot_INT_*.txt",
    "der2_cRefset_LanguageSnapshot-en_INT_*.txt",
    "der2_iisssccRefset_ExtendedMapSnapshot_INT_*.txt",
]
RF2_VALUES = [
    "", "0", "1", "2", "20200131", "20220531", "900000000000207008", "138875005", "116680003",
    "900000000000011006", "900000000000227009", "900000000000003001", "900000000000013009", "9990001024",
    "en", "TRUE", "OTHERWISE TRUE", "IFA 248152002 | Female (finding) |", "E11.9", "447562003",
]  # fmt: skip
rf2_case = st.tuples(
    st.sampled_from(RF2_FILES),
    st.lists(
        st.tuples(
            st.sampled_from(
                ["set", "set", "set", "drop", "add", "line", "bytes", "dup", "insert", "truncate"]
            ),
            st.integers(min_value=0, max_value=400),
            st.integers(min_value=0, max_value=30),
            st.one_of(cell(RF2_VALUES).map(lambda s: (s or "").encode("utf-8")), st.binary(max_size=12)),
        ),
        min_size=1,
        max_size=4,
    ),
)


def _rf2_property(case) -> None:
    pattern, edits = case
    with tempfile.TemporaryDirectory() as d:
        release = Path(d) / "release"
        shutil.copytree(FIXTURE / INT / "Snapshot", release / INT / "Snapshot")
        hits = sorted(release.rglob(pattern))
        assert len(hits) == 1, hits
        lines = read_lines(hits[0])
        end = lines[-1] == b""
        body = edit_rows(lines[:-1] if end else lines, edits, b"\t", header=False)
        write_lines(hits[0], [*body, b""] if end else body)
        try:
            res = compile_ontology(release, out=Path(d) / "out")
        except OntologyCompilerError as e:
            assert str(e)
            return
        assert (res.path / "manifest.json").is_file(), res.path


@pytest.mark.parametrize("n", EXAMPLES)
def test_rf2_fuzzed_rows_give_a_program_or_a_compiler_error(n):
    run_property(_rf2_property, rf2_case, n)


# --- the EHR readers' shared checks ------------------------------------------------------------------------
def _check_read(read, root: Path, vocabularies: set[str]) -> None:
    """``read(root)`` gives a result keeping the common table's invariants, or a PipelineError."""
    try:
        r = read(root)
        labels = r.labels
    except PipelineError as e:
        assert str(e)
        return
    assert r.events.schema == EVENT_SCHEMA and r.visits.schema == VISIT_SCHEMA
    assert labels.schema == LABEL_SCHEMA
    ev = r.events.drop_columns(["visit_time"]).to_pylist()  # a time past year 9999 has no Python datetime
    keys = [(e["subject_id"], e["visit_index"], e["seq"]) for e in ev]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all(e["vocabulary"] in vocabularies and e["code"] and "." not in e["code"] for e in ev), ev
    visits = {(v["subject_id"], v["visit_index"]) for v in r.visits.to_pylist()}
    assert {(s, v) for s, v, _ in keys} == visits
    assert pc.count_distinct(r.visits["subject_id"]).as_py() == labels.num_rows


def _csv_bytes(header: str, rows: list[list]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header.split(","))
    w.writerows([["" if v is None else v for v in r] for r in rows])
    return buf.getvalue().encode("utf-8", "surrogatepass")


def _write_table(path: Path, header: str, rows: list[list], edits: list[tuple], gz: bool) -> None:
    lines = _csv_bytes(header, rows).split(b"\n")[:-1]
    data = b"".join(line + b"\n" for line in edit_rows(lines, edits, b",", header=False))
    path.unlink()
    if gz:
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.with_suffix("").write_bytes(data)


def ehr_case(rows: st.SearchStrategy) -> st.SearchStrategy:
    """(rows, raw line edits, gzip or plain CSV)."""
    return st.tuples(
        st.lists(rows, max_size=6), st.lists(line_edit, max_size=3), st.sampled_from([True, True, False])
    )


# --- MIMIC-IV ----------------------------------------------------------------------------------------------
SUBJECTS, HADMS = [1, 2, 3, 5, 6, 99], [101, 102, 201, 301, 501, 999]
TIMES = ["2116-01-01 10:00:00", "2114-05-03 12:00:00", "2120-03-05 00:00:00", None]
diagnosis_row = st.tuples(
    cell(SUBJECTS), cell(HADMS), cell([1, 2, 3]), cell(["E119", "I10", "4019", "e11.9 ", "250.00"]),
    cell([9, 10, 11]),
).map(list)  # fmt: skip
admission_row = st.tuples(
    cell(SUBJECTS), cell(HADMS), cell(TIMES), cell(TIMES), cell(TIMES), st.booleans(), odd_text
).map(lambda t: [t[0], t[1], t[2], t[3], t[4], *adm(0, 0, "", "")[5:-1], t[6] if t[5] else 0])
mimic_case = st.tuples(st.sampled_from(["diagnoses_icd", "admissions"]), ehr_case(diagnosis_row),
                       ehr_case(admission_row))  # fmt: skip


def _mimic_property(case) -> None:
    table, dx, ad = case
    with tempfile.TemporaryDirectory() as d:
        root = write_mimic(Path(d) / "m")
        rows, edits, gz = dx if table == "diagnoses_icd" else ad
        base = [[1, 102, 1, "I10", 10], [3, 301, 1, "N1830", 10]] if table == "diagnoses_icd" else [
            adm(1, 102, "2116-01-01 10:00:00", "2116-01-01 20:00:00"),
            adm(3, 301, "2112-07-01 00:00:00", "2112-07-04 00:00:00"),
        ]  # fmt: skip
        _write_table(root / "hosp" / f"{table}.csv.gz", MIMIC_COLUMNS[table], base + rows, edits, gz)
        _check_read(read_mimic, root, {"ICD9CM", "ICD10CM"})


@pytest.mark.parametrize("n", EXAMPLES)
def test_mimic_fuzzed_rows_give_a_result_or_a_pipeline_error(n):
    run_property(_mimic_property, mimic_case, n)


# --- eICU --------------------------------------------------------------------------------------------------
STAYS = [111, 112, 121, 201, 311, 999]
eicu_diagnosis_row = st.tuples(
    cell([1, 2, 3, 10, 11]), cell(STAYS), cell(["True", "False"]), cell([5, 10, -3]),
    cell(["renal|acute renal failure"]),
    cell(["584.9, N17.9", "E11.9", " , ", "401.9,I10", "V58.61", "E879.8"]),
    cell(["Primary", "Major", "Other"]),
).map(list)  # fmt: skip
PATIENT_COLS = EICU_COLUMNS["patient"].split(",")
eicu_patient_row = st.fixed_dictionaries(
    {
        "patientunitstayid": cell(STAYS),
        "patienthealthsystemstayid": cell([11, 12, 20]),
        "hospitaladmitoffset": cell([-60, 0, -900]),
        "hospitaldischargeyear": cell([2014, 2015]),
        "hospitaldischargestatus": cell(["Alive", "Expired"]),
        "unitvisitnumber": cell([1, 2]),
        "uniquepid": cell(["002-00001", "002-00002"]),
        "age": cell(["> 89", "70"]),
    }
).map(lambda r: [r.get(c) for c in PATIENT_COLS])
eicu_case = st.tuples(st.sampled_from(["diagnosis", "patient"]), ehr_case(eicu_diagnosis_row),
                      ehr_case(eicu_patient_row))  # fmt: skip


def _eicu_property(case) -> None:
    table, dx, pt = case
    with tempfile.TemporaryDirectory() as d:
        root = write_eicu(Path(d) / "e")
        rows, edits, gz = dx if table == "diagnosis" else pt
        if table == "diagnosis":
            base = [[1, 111, "True", 10, "pulmonary|respiratory failure", "518.81, J96.00", "Primary"]]
        else:
            base = [
                dict.fromkeys(PATIENT_COLS)
                | {
                    "patientunitstayid": 111,
                    "patienthealthsystemstayid": 11,
                    "uniquepid": "002-00001",
                    "hospitaldischargeyear": 2014,
                }
            ]
            base = [[b[c] for c in PATIENT_COLS] for b in base]
        _write_table(root / f"{table}.csv.gz", EICU_COLUMNS[table], base + rows, edits, gz)
        _check_read(read_eicu, root, {"ICD9CM", "ICD10CM"})


@pytest.mark.parametrize("n", EXAMPLES)
def test_eicu_fuzzed_rows_give_a_result_or_a_pipeline_error(n):
    run_property(_eicu_property, eicu_case, n)


# --- MEDS --------------------------------------------------------------------------------------------------
MEDS_CODES = [
    "DIAGNOSIS//ICD//10//E119", "DIAGNOSIS//ICD//9//4019", "ICD10CM/E11.9", "ICD9CM/250.00",
    "SNOMED/44054006", "MEDS_DEATH", "MEDS_BIRTH", "ICD10/E11.9", "DIAGNOSIS//ICD//11//X",
    "DIAGNOSIS//ICD//10//", "ICD10CM/.",
    "ICD10CM/ ", "LAB//50912//mg/dL", "SNOMED/123", "DIAGNOSIS//ICD//10//e11.9 ", "", "/", "//",
]  # fmt: skip
INT64 = (-(2**63), 2**63 - 1)
TIME_TYPES = {
    "timestamp[us]": (pa.timestamp("us"), INT64),
    "timestamp[ns]": (pa.timestamp("ns"), INT64),
    "timestamp[s]": (pa.timestamp("s"), (-(INT64[1] // 1000), INT64[1] // 1000)),  # Parquet stores it in ms
    "timestamp[ms, UTC]": (pa.timestamp("ms", tz="UTC"), INT64),
    "timestamp[us, +05:30]": (pa.timestamp("us", tz="+05:30"), INT64),
    "date32": (pa.date32(), (-(2**31), 2**31 - 1)),
    "date64": (pa.date64(), INT64),
    "int64": (pa.int64(), INT64),
    "string": (pa.string(), None),
}
NEAR_TIMES = [0, 1, -1, 4_000_000_000_000_000, 4_500_000_000_000_000, -62_000_000_000_000_000]


INT_BOUNDS = {pa.int8(): (-128, 127), pa.int32(): (-(2**31), 2**31 - 1), pa.uint64(): (0, 2**64 - 1)}
SID_TYPES = [pa.int64(), pa.int64(), pa.int32(), pa.uint64(), pa.int8(), pa.string(), pa.float64(), pa.null()]
CODE_TYPES = ["string", "string", "large_string", "dictionary", "int64", "null", "binary"]


@st.composite
def meds_shard(draw) -> pa.Table | bytes:
    """A DataSchema shard of generated column types and values (or, now and then, bytes that are not
    Parquet)."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.binary(max_size=64))
    n = draw(st.integers(0, 6))

    def values(strategy: st.SearchStrategy) -> list:
        return draw(st.lists(strategy, min_size=n, max_size=n))

    sid_type = draw(st.sampled_from(SID_TYPES))
    if pa.types.is_null(sid_type):
        sid = pa.nulls(n)
    elif pa.types.is_integer(sid_type):
        lo, hi = INT_BOUNDS.get(sid_type, INT64)
        sid = pa.array(values(st.sampled_from([1, 2, 3]) | st.integers(lo, hi) | st.none()), sid_type)
    elif sid_type == pa.string():
        sid = pa.array(values(st.sampled_from(["1", "2"]) | odd_text), pa.string())
    else:
        sid = pa.array(values(st.floats()), pa.float64())
    ttype, bounds = TIME_TYPES[draw(st.sampled_from(list(TIME_TYPES)))]
    if bounds is None:
        time = pa.array(values(st.sampled_from(TIMES) | odd_text), pa.string())
    else:
        usual = pa.array([dt(2116, 1, 1), dt(2120, 5, 1)], pa.timestamp("us")).cast(pa.int64()).to_pylist()
        raw = values(st.sampled_from(usual) | st.sampled_from(NEAR_TIMES) | st.integers(*bounds) | st.none())
        raw = [None if v is None else max(bounds[0], min(bounds[1], v)) for v in raw]
        time = pa.array(raw, pa.int32() if ttype == pa.date32() else pa.int64()).cast(ttype)
    ctype = draw(st.sampled_from(CODE_TYPES))
    codes = values(st.sampled_from(MEDS_CODES) | odd_text | st.none())
    if ctype == "int64":
        code = pa.array(values(st.integers(*INT64) | st.none()), pa.int64())
    elif ctype == "null":
        code = pa.nulls(n)
    elif ctype == "binary":
        code = pa.array([None if c is None else c.encode() for c in codes], pa.binary())
    else:
        code = pa.array(codes, pa.large_string() if ctype == "large_string" else pa.string())
        code = code.dictionary_encode() if ctype == "dictionary" else code
    cols = {"subject_id": sid, "time": time, "code": code}
    cols.pop(draw(st.sampled_from([None] * 6 + ["subject_id", "time", "code"])), None)
    hadm = draw(st.sampled_from([None, None, "int64", "string"]))
    if hadm == "int64":
        cols["hadm_id"] = pa.array(values(st.sampled_from([900, 901]) | st.integers(*INT64) | st.none()))
    elif hadm == "string":
        cols["hadm_id"] = pa.array(values(odd_text), pa.string())
    return pa.table(cols)


meds_case = st.lists(meds_shard(), min_size=1, max_size=3)


def _meds_property(shards) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "meds"
        (root / "data").mkdir(parents=True)
        for i, s in enumerate(shards):
            if isinstance(s, bytes):
                (root / "data" / f"{i}.parquet").write_bytes(s)
            else:
                pq.write_table(s, root / "data" / f"{i}.parquet")
        _check_read(read_meds, root, {"ICD9CM", "ICD10CM", "SNOMED"})


@pytest.mark.parametrize("n", EXAMPLES)
def test_meds_fuzzed_shards_give_a_result_or_a_pipeline_error(n):
    run_property(_meds_property, meds_case, n)


# --- regressions found by the fuzzing -----------------------------------------------------------------------
def test_meds_row_without_subject_id_names_shard_and_row(tmp_path):
    """A null ``subject_id`` used to give a visit ``(None, 0)`` without any event (its join to the visits
    never matched); the DataSchema's ``subject_id`` is not nullable, so it is an error naming the shard."""
    root = tmp_path / "meds"
    (root / "data").mkdir(parents=True)
    t = pa.table(
        {
            "subject_id": pa.array([1, None], pa.int64()),
            "time": pa.array([dt(2116, 1, 1), dt(2116, 1, 1)], pa.timestamp("us")),
            "code": ["DIAGNOSIS//ICD//10//E119", "DIAGNOSIS//ICD//10//E119"],
        }
    )
    pq.write_table(t, root / "data" / "0.parquet")
    with pytest.raises(PipelineError, match=r"0\.parquet: empty subject_id at file_row_number 1"):
        read_meds(root)
