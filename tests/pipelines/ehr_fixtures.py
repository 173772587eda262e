"""Tiny EHR fixtures in the real MIMIC-IV, eICU and MEDS layouts, written by the tests into tmp_path."""

from __future__ import annotations

import csv
import gzip
from datetime import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.demo.cohort_write import EICU_COLUMNS, MIMIC_COLUMNS

MINI_RELEASE = Path(__file__).resolve().parents[1] / "data" / "snomed_mini_20220531"


def mini_program(out: Path) -> Path:
    """The program compiled from the mini RF2 fixture (ICD-10-CM tokens only: E119, I10, J45909,
    N1830, ...)."""
    from ontology_compiler import compile_ontology

    return compile_ontology(MINI_RELEASE, out=out).path


def write_csv_gz(path: Path, header: str, rows: list[list[object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header.split(","))
        w.writerows([["" if v is None else v for v in r] for r in rows])
    return path


ADM_TAIL = ["EW EMER.", "P1", "EMERGENCY ROOM", "HOME", "Medicare", "ENGLISH", "MARRIED", "WHITE", None, None]


def adm(subject: int, hadm: int, admit: str, disch: str, death: str | None = None) -> list[object]:
    """An ``admissions.csv.gz`` row (times ``YYYY-MM-DD HH:MM:SS``)."""
    tail = ADM_TAIL if death is None else [*ADM_TAIL[:3], "DIED", *ADM_TAIL[4:]]
    return [subject, hadm, admit, disch, death, *tail, int(death is not None)]


# Patient 5: three admissions whose hadm_id order and dischtime order both disagree with admittime
# (503 admitted first and discharged last; 502 lies inside 503; 501 is the latest). Patient 6: the last
# admission holds only K219, a code the mini program does not know; dod 30 days after that admission
# but 300 days after the earlier one.
ORDER_PATIENTS = [[5, "M", 60, 2113, "2011 - 2013", None], [6, "F", 65, 2115, "2014 - 2016", "2116-11-10"]]
ORDER_ADMISSIONS = [
    adm(5, 501, "2114-06-01 09:00:00", "2114-06-05 09:00:00"),
    adm(5, 502, "2113-01-10 09:00:00", "2113-01-20 09:00:00"),
    adm(5, 503, "2113-01-01 09:00:00", "2113-03-01 09:00:00"),
    adm(6, 601, "2116-01-01 00:00:00", "2116-01-15 00:00:00"),
    adm(6, 602, "2116-10-01 00:00:00", "2116-10-11 00:00:00"),
]
ORDER_DIAGNOSES = [
    [5, 501, 1, "J45909", 10], [5, 502, 1, "I10", 10], [5, 503, 1, "E119", 10],
    [6, 601, 1, "I10", 10], [6, 602, 1, "K219", 10],
]  # fmt: skip


def write_mimic(root: Path, *, admissions=None, diagnoses=None, patients=None) -> Path:
    """Patient 1: two admissions written out of time order, ICD-9 then ICD-10, died 100 days after the
    last discharge. Patient 2: died in hospital (deathtime). Patient 3: died 200 days after (label false).
    Patient 4: no diagnoses (dropped). Patients 5 and 6: :data:`ORDER_ADMISSIONS`."""
    hosp = root / "hosp"
    patients = patients or [
        [1, "F", 70, 2110, "2008 - 2010", "2116-04-10"],
        [2, "M", 80, 2120, "2017 - 2019", "2120-03-05"],
        [3, "F", 50, 2112, "2011 - 2013", "2113-01-20"],
        [4, "M", 40, 2111, "2008 - 2010", None],
        *ORDER_PATIENTS,
    ]
    admissions = admissions or [
        adm(1, 102, "2116-01-01 10:00:00", "2116-01-01 20:00:00"),
        adm(1, 101, "2114-05-01 08:00:00", "2114-05-03 12:00:00"),
        adm(2, 201, "2120-03-01 00:00:00", "2120-03-05 00:00:00", "2120-03-05 00:00:00"),
        adm(3, 301, "2112-07-01 00:00:00", "2112-07-04 00:00:00"),
        adm(4, 401, "2111-07-01 00:00:00", "2111-07-04 00:00:00"),
        *ORDER_ADMISSIONS,
    ]
    diagnoses = diagnoses or [
        [1, 102, 2, "E119", 10],
        [1, 102, 1, "I10", 10],
        [1, 101, 1, "4019", 9],
        [1, 101, 2, "25000", 9],
        [2, 201, 1, "J45909", 10],
        [2, 201, 2, "ZZZ99", 10],
        [3, 301, 1, "N1830", 10],
        *ORDER_DIAGNOSES,
    ]
    write_csv_gz(hosp / "patients.csv.gz", MIMIC_COLUMNS["patients"], patients)
    write_csv_gz(hosp / "admissions.csv.gz", MIMIC_COLUMNS["admissions"], admissions)
    write_csv_gz(hosp / "diagnoses_icd.csv.gz", MIMIC_COLUMNS["diagnoses_icd"], diagnoses)
    write_csv_gz(
        hosp / "d_icd_diagnoses.csv.gz",
        MIMIC_COLUMNS["d_icd_diagnoses"],
        [["4019", 9, "Unspecified essential hypertension"], ["I10", 10, "Essential (primary) hypertension"]],
    )
    return root


def _stay(
    stay: int, hss: int, pid: str, year: int, unit_no: int, offset: int, status: str | None
) -> list[object]:
    row = dict.fromkeys(EICU_COLUMNS["patient"].split(","))
    row.update(
        patientunitstayid=stay,
        patienthealthsystemstayid=hss,
        gender="Male",
        age="> 89",
        hospitalid=73,
        hospitaladmitoffset=offset,
        hospitaldischargeyear=year,
        hospitaldischargestatus=status,
        unitvisitnumber=unit_no,
        uniquepid=pid,
    )
    return list(row.values())


def write_eicu(root: Path, *, patient=None, diagnosis=None) -> Path:
    """002-00001: hospital stay 11 (2014, units 1 and 2) then 12 (2015, Expired). 002-00002: one stay,
    no codes at all. 002-00003: hospital stay 32 (2013) before stay 31 (2015), so stay ids disagree
    with the discharge years. Codes carry stray spaces, empty parts and one unparseable part."""
    patient = patient or [
        _stay(112, 11, "002-00001", 2014, 2, -900, "Alive"),
        _stay(111, 11, "002-00001", 2014, 1, -60, "Alive"),
        _stay(121, 12, "002-00001", 2015, 1, -10, "Expired"),
        _stay(201, 20, "002-00002", 2014, 1, -5, None),
        _stay(311, 31, "002-00003", 2015, 1, -5, "Alive"),
        _stay(321, 32, "002-00003", 2013, 1, -5, "Alive"),
    ]
    diagnosis = diagnosis or [
        [1, 112, "True", 30, "renal|acute renal failure", "584.9, N17.9", "Major"],
        [2, 111, "True", 10, "pulmonary|respiratory failure", "  518.81 ,, J96.00, ", "Primary"],
        [3, 111, "False", 20, "cardiovascular|hypertension", "401.9,I10", "Other"],
        [4, 121, "True", 5, "infectious|sepsis", "038.9, A41.9, junk!", "Primary"],
        [5, 121, "True", 6, "pulmonary|respiratory failure", "J96.00", "Major"],
        [6, 201, "True", 5, "burns|burn", None, "Primary"],
        [7, 201, "True", 6, "burns|burn", " , ", "Other"],
        [8, 311, "True", 5, "endocrine|diabetes", "E11.9", "Primary"],
        [9, 321, "True", 5, "cardiovascular|hypertension", "I10", "Primary"],
    ]
    write_csv_gz(root / "patient.csv.gz", EICU_COLUMNS["patient"], patient)
    write_csv_gz(root / "diagnosis.csv.gz", EICU_COLUMNS["diagnosis"], diagnosis)
    return root


def meds_shard(rows: list[tuple], *, hadm: bool = False) -> pa.Table:
    """A MEDS DataSchema shard from ``(subject_id, time, code[, hadm_id])`` rows."""
    cols = list(zip(*rows, strict=True))
    t = {
        "subject_id": pa.array(cols[0], pa.int64()),
        "time": pa.array(cols[1], pa.timestamp("us")),
        "code": pa.array(cols[2], pa.string()),
        "numeric_value": pa.array([None] * len(rows), pa.float32()),
    }
    if hadm:
        t["hadm_id"] = pa.array(cols[3], pa.int64())
    return pa.table(t)


def write_meds_shards(root: Path, shards: dict[str, pa.Table], splits: dict[int, str] | None = None) -> Path:
    """Write ``shards`` (path under ``data/`` -> table) and, given, ``metadata/subject_splits.parquet``."""
    for rel, table in shards.items():
        (root / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / "data" / rel)
    if splits:
        (root / "metadata").mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.table({"subject_id": pa.array(list(splits), pa.int64()), "split": list(splits.values())}),
            root / "metadata" / "subject_splits.parquet",
        )
    return root


def write_meds(root: Path, *, splits: bool = True) -> Path:
    """Two shards; subject 1 (both code forms, two visits, MEDS_DEATH 30 days after), subject 2 (one visit,
    no death), subject 3 (only non-diagnosis codes: dropped)."""
    return write_meds_shards(
        root,
        {
            "train/0.parquet": meds_shard(
                [
                    (1, None, "MEDS_BIRTH"),
                    (1, dt(2110, 1, 5), "HOSPITAL_ADMISSION//EW EMER.//EMERGENCY ROOM"),
                    (1, dt(2110, 1, 9), "DIAGNOSIS//ICD//9//4019"),
                    (1, dt(2110, 1, 9), "DIAGNOSIS//ICD//9//25000"),
                    (1, dt(2116, 2, 1), "ICD10CM/E11.9"),
                    (1, dt(2116, 2, 1), "DIAGNOSIS//ICD//10//I10"),
                    (1, dt(2116, 3, 2), "MEDS_DEATH"),
                ]
            ),
            "train/1.parquet": meds_shard(
                [
                    (2, dt(2120, 5, 1), "ICD9CM/518.81"),
                    (2, dt(2120, 5, 1), "LAB//50912//mg/dL"),
                    (3, dt(2121, 1, 1), "GENDER//F"),
                ]
            ),
        },
        {1: "train", 2: "held_out", 3: "tuning"} if splits else None,
    )


def write_meds_admissions(root: Path) -> Path:
    """One subject (7) with ``hadm_id``: admission 900 (2112) is later than 901 (2111), and 902 (2113)
    has one diagnosis dated at discharge and one without a time (joined to 902 by its hadm_id)."""
    return write_meds_shards(
        root,
        {
            "0.parquet": meds_shard(
                [
                    (7, dt(2112, 5, 3), "DIAGNOSIS//ICD//10//I10", 900),
                    (7, dt(2111, 2, 7), "DIAGNOSIS//ICD//10//E119", 901),
                    (7, dt(2113, 9, 9), "DIAGNOSIS//ICD//10//J45909", 902),
                    (7, None, "DIAGNOSIS//ICD//10//N1830", 902),
                ],
                hadm=True,
            ),
        },
    )


def add_column(path: Path, name: str, value: str = "1") -> Path:
    """Append a column ``name`` (every row ``value``) to the gzip CSV ``path``, quoting as CSV needs."""
    with gzip.open(path, "rt", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    with gzip.open(path, "wt", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow([*rows[0], name])
        w.writerows([*r, value] for r in rows[1:])
    return path


def edit_lines(path: Path, edit) -> Path:
    """Rewrite the gzip text file ``path`` as ``edit(list of lines without newline)``."""
    with gzip.open(path, "rt", newline="", encoding="utf-8") as f:
        lines = f.read().splitlines()
    with gzip.open(path, "wt", newline="", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in edit(lines)))
    return path


def prepare_cli(*args: object, out: Path, program: Path):
    """``hrrbert prepare ARGS --program PROGRAM --out OUT --rood-codes 0`` through click's test runner."""
    from click.testing import CliRunner

    from pipelines.cli import main

    argv = ["prepare", *map(str, args), "--program", str(program), "--out", str(out), "--rood-codes", "0"]
    return CliRunner().invoke(main, argv)


def written_datasets(out: Path) -> list[Path]:
    """The dataset folders under ``out`` (``<name>/<id>``)."""
    return sorted(p for p in out.glob("*/*") if p.is_dir()) if out.exists() else []


def assert_refused(res, out: Path, *needles: str) -> str:
    """The command failed cleanly (exit 1, an ``Error:`` line, no traceback) naming every needle, and left
    no dataset and no ``.tmp-*`` folder under ``out``."""
    assert res.exit_code == 1, (res.exit_code, res.output, res.exception)
    assert isinstance(res.exception, SystemExit), res.exception
    assert "Error:" in res.output and "Traceback" not in res.output, res.output
    for n in needles:
        assert n in res.output, (n, res.output)
    assert written_datasets(out) == [], written_datasets(out)
    assert list(out.rglob(".tmp-*")) == [] if out.exists() else True
    return res.output
