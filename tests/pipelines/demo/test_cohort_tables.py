"""The demo cohort's extra MIMIC-IV tables (icu/icustays, hosp/procedures_icd, hosp/d_icd_procedures,
hosp/prescriptions): exact v2.2 layouts, consistent with the admissions, readable as PyHealth 2.1's
MIMIC-IV loader reads them, and without any effect on the files hrrbert reads."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import duckdb
import pytest

from pipelines.demo import cohort as cohort_module
from pipelines.demo.cohort import SWITCH, generate_cohort
from pipelines.demo.cohort_write import MIMIC_EXTRA_COLUMNS

# PyHealth 2.1.0, pyhealth/datasets/configs/mimic4_ehr.yaml (the tables MIMIC4EHRDataset loads always, and
# those its MIMIC-IV tasks need): file, patient id, timestamp, attributes, (join file, key, columns)
PYHEALTH_TABLES = {
    "patients": ("hosp/patients.csv.gz", "subject_id", None,
                 ["gender", "anchor_age", "anchor_year", "anchor_year_group", "dod"], None),
    "admissions": ("hosp/admissions.csv.gz", "subject_id", "admittime",
                   ["hadm_id", "admission_type", "admission_location", "insurance", "language",
                    "marital_status", "race", "discharge_location", "dischtime", "hospital_expire_flag"],
                   None),
    "icustays": ("icu/icustays.csv.gz", "subject_id", "intime",
                 ["hadm_id", "stay_id", "first_careunit", "last_careunit", "outtime"], None),
    "diagnoses_icd": ("hosp/diagnoses_icd.csv.gz", "subject_id", "dischtime",
                      ["hadm_id", "icd_code", "icd_version", "seq_num"],
                      ("hosp/admissions.csv.gz", "hadm_id", ["dischtime"])),
    "procedures_icd": ("hosp/procedures_icd.csv.gz", "subject_id", "dischtime",
                       ["hadm_id", "icd_code", "icd_version", "seq_num"],
                       ("hosp/admissions.csv.gz", "hadm_id", ["dischtime"])),
    "prescriptions": ("hosp/prescriptions.csv.gz", "subject_id", "starttime",
                      ["hadm_id", "drug", "ndc", "prod_strength", "dose_val_rx", "dose_unit_rx", "route",
                       "stoptime"],
                      None),
}  # fmt: skip
OLD_FILES = (
    "hosp/patients.csv.gz", "hosp/admissions.csv.gz", "hosp/diagnoses_icd.csv.gz",
    "hosp/d_icd_diagnoses.csv.gz", "eicu/patient.csv.gz", "eicu/diagnosis.csv.gz",
    "ground_truth/patients.parquet", "ground_truth/conditions.parquet", "ground_truth/codes.parquet",
    "ground_truth/condition_catalog.parquet", "ground_truth/README.json",
)  # fmt: skip


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return generate_cohort(tmp_path_factory.mktemp("tables") / "c", n_patients=250, seed=5)


def _header(path) -> str:
    with gzip.open(path, "rt", newline="") as f:
        return f.readline().rstrip("\n")


def _sql(cohort, query: str) -> list[tuple]:
    """``query`` over views of the cohort's tables, every column read as text (as PyHealth reads them)."""
    con = duckdb.connect()
    for rel in (*MIMIC_EXTRA_COLUMNS, "hosp/admissions", "hosp/patients", "hosp/diagnoses_icd"):
        path = str(cohort / f"{rel}.csv.gz").replace("'", "''")
        con.execute(
            f"CREATE VIEW {rel.split('/')[1]} AS SELECT * FROM "
            f"read_csv('{path}', all_varchar=true, header=true)"
        )
    return con.execute(query).fetchall()


def test_exact_v22_headers(cohort):
    for rel, header in MIMIC_EXTRA_COLUMNS.items():
        assert _header(cohort / f"{rel}.csv.gz") == header
    assert MIMIC_EXTRA_COLUMNS["icu/icustays"].split(",")[:3] == ["subject_id", "hadm_id", "stay_id"]


def test_rows_lie_inside_their_admissions(cohort):
    n = _sql(
        cohort,
        "SELECT (SELECT count(*) FROM icustays), (SELECT count(*) FROM procedures_icd), "
        "(SELECT count(*) FROM prescriptions), (SELECT count(*) FROM admissions)",
    )[0]
    assert all(x > 0 for x in n)
    for table, start, stop in (
        ("icustays", "intime", "outtime"),
        ("prescriptions", "starttime", "stoptime"),
        ("procedures_icd", "chartdate", "chartdate"),
    ):
        bad = _sql(
            cohort,
            f"""
            SELECT count(*) FROM {table} t LEFT JOIN admissions a USING (hadm_id)
            WHERE a.hadm_id IS NULL OR a.subject_id <> t.subject_id
               OR t.{start}::TIMESTAMP < a.admittime::TIMESTAMP::DATE::TIMESTAMP
               OR t.{stop}::TIMESTAMP > a.dischtime::TIMESTAMP
               OR t.{stop}::TIMESTAMP < t.{start}::TIMESTAMP""",
        )[0][0]
        assert bad == 0, table
    # times to the second inside the admission for the timed tables
    assert (
        _sql(
            cohort,
            "SELECT count(*) FROM prescriptions p JOIN admissions a USING (hadm_id) "
            "WHERE p.starttime::TIMESTAMP < a.admittime::TIMESTAMP",
        )[0][0]
        == 0
    )
    assert (
        _sql(
            cohort,
            "SELECT count(*) FROM icustays i JOIN admissions a USING (hadm_id) "
            "WHERE i.intime::TIMESTAMP < a.admittime::TIMESTAMP",
        )[0][0]
        == 0
    )


def test_ids_codes_and_values(cohort):
    assert _sql(cohort, "SELECT count(*) = count(DISTINCT stay_id) FROM icustays")[0][0]
    assert _sql(cohort, "SELECT count(*) = count(DISTINCT pharmacy_id) FROM prescriptions")[0][0]
    los = _sql(
        cohort,
        "SELECT max(abs(los::DOUBLE - epoch(outtime::TIMESTAMP - intime::TIMESTAMP) / 86400)) FROM icustays",
    )[0][0]
    assert los < 1e-9
    # procedures: ICD-9-CM before the switch and ICD-10-PCS after, as the diagnoses; all in d_icd_procedures
    switch = datetime.fromtimestamp(SWITCH, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    rows = _sql(
        cohort,
        f"""
        SELECT p.icd_version, a.admittime < '{switch}' AS before, count(*), count(d.icd_code)
        FROM procedures_icd p JOIN admissions a USING (hadm_id)
        LEFT JOIN d_icd_procedures d ON d.icd_code = p.icd_code AND d.icd_version = p.icd_version
        GROUP BY ALL""",
    )
    assert {(v, b) for v, b, _, _ in rows} == {("9", True), ("10", False)}
    assert all(n == known for _, _, n, known in rows)
    assert (
        _sql(
            cohort, "SELECT count(*) FROM procedures_icd WHERE icd_version = '10' AND length(icd_code) <> 7"
        )[0][0]
        == 0
    )
    # seq_num 1..n within an admission; poe_id = subject_id-poe_seq where given
    assert (
        _sql(
            cohort,
            "SELECT count(*) FROM (SELECT hadm_id, max(seq_num::INT) m, count(*) n FROM procedures_icd "
            "GROUP BY hadm_id) WHERE m <> n",
        )[0][0]
        == 0
    )
    assert (
        _sql(cohort, "SELECT count(*) FROM prescriptions WHERE poe_id <> subject_id || '-' || poe_seq")[0][0]
        == 0
    )
    types = {r[0] for r in _sql(cohort, "SELECT DISTINCT drug_type FROM prescriptions")}
    assert types <= {"MAIN", "BASE", "ADDITIVE"} and "MAIN" in types
    assert (
        _sql(cohort, "SELECT count(*) FROM prescriptions WHERE length(ndc) <> 11 OR drug IS NULL")[0][0] == 0
    )


def test_pyhealth_mimic4_loader_layout(cohort):
    """What PyHealth 2.1's loader needs: each table's file, its patient id, attribute and timestamp columns,
    join keys, timestamps that parse strictly; and, for its MIMIC-IV tasks (mortality, readmission, length of
    stay, drug recommendation), admissions with diagnoses, procedures and prescriptions inside them."""
    for name, (rel, pid, ts, attributes, join) in PYHEALTH_TABLES.items():
        path = cohort / rel
        assert path.is_file(), name
        columns = set(_header(path).split(","))
        needed = {pid, *attributes} | ({ts} if ts and not join else set())
        assert needed <= columns, (name, needed - columns)
        if join:
            jrel, key, jcols = join
            assert key in columns and {key, *jcols} <= set(_header(cohort / jrel).split(","))
        if ts and not join:
            table = rel.split("/")[1].removesuffix(".csv.gz")
            values = [r[0] for r in _sql(cohort, f"SELECT {ts} FROM {table}")]
            assert values and all(datetime.strptime(v, "%Y-%m-%d %H:%M:%S") for v in values), name
    full = _sql(
        cohort,
        """
        SELECT count(*) FILTER (WHERE d AND p AND r), count(*) FROM (
          SELECT a.hadm_id,
                 EXISTS (SELECT 1 FROM diagnoses_icd x WHERE x.hadm_id = a.hadm_id) AS d,
                 EXISTS (SELECT 1 FROM procedures_icd x WHERE x.hadm_id = a.hadm_id) AS p,
                 EXISTS (SELECT 1 FROM prescriptions x WHERE x.hadm_id = a.hadm_id) AS r
          FROM admissions a)""",
    )[0]
    assert full[0] > 0.5 * full[1]


def test_extra_tables_leave_every_other_file_unchanged(tmp_path, monkeypatch):
    with_extra = generate_cohort(tmp_path / "a", n_patients=40, seed=11)
    again = generate_cohort(tmp_path / "c", n_patients=40, seed=11)
    for rel in MIMIC_EXTRA_COLUMNS:  # deterministic
        a, b = ((x / f"{rel}.csv.gz").read_bytes() for x in (with_extra, again))
        assert gzip.decompress(a) == gzip.decompress(b), rel
    monkeypatch.setattr(
        cohort_module, "write_mimic_extra", lambda *a, **k: dict.fromkeys(MIMIC_EXTRA_COLUMNS, 0)
    )
    without = generate_cohort(tmp_path / "b", n_patients=40, seed=11)
    assert not (without / "icu").exists()
    for rel in OLD_FILES:
        a, b = (with_extra / rel).read_bytes(), (without / rel).read_bytes()
        if rel.endswith(".gz"):
            a, b = gzip.decompress(a), gzip.decompress(b)
        assert a == b, rel
