"""Tiny EHR fixtures in the real MIMIC-IV, eICU and MEDS layouts, written by the tests into tmp_path."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.demo.cohort_write import EICU_COLUMNS, MIMIC_COLUMNS


def write_csv_gz(path: Path, header: str, rows: list[list[object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header.split(","))
        w.writerows([["" if v is None else v for v in r] for r in rows])
    return path


ADM_TAIL = ["EW EMER.", "P1", "EMERGENCY ROOM", "HOME", "Medicare", "ENGLISH", "MARRIED", "WHITE", None, None]


def write_mimic(root: Path, *, admissions=None, diagnoses=None, patients=None) -> Path:
    """Patient 1: two admissions written out of time order, ICD-9 then ICD-10, died 100 days after the
    last discharge. Patient 2: died in hospital (deathtime). Patient 3: died 200 days after (label false).
    Patient 4: no diagnoses (dropped)."""
    hosp = root / "hosp"
    patients = patients or [
        [1, "F", 70, 2110, "2008 - 2010", "2116-04-10"],
        [2, "M", 80, 2120, "2017 - 2019", "2120-03-05"],
        [3, "F", 50, 2112, "2011 - 2013", "2113-01-20"],
        [4, "M", 40, 2111, "2008 - 2010", None],
    ]
    admissions = admissions or [
        [1, 102, "2116-01-01 10:00:00", "2116-01-01 20:00:00", None, *ADM_TAIL, 0],
        [1, 101, "2114-05-01 08:00:00", "2114-05-03 12:00:00", None, *ADM_TAIL, 0],
        [2, 201, "2120-03-01 00:00:00", "2120-03-05 00:00:00", "2120-03-05 00:00:00", *ADM_TAIL[:3], "DIED", *ADM_TAIL[4:], 1],
        [3, 301, "2112-07-01 00:00:00", "2112-07-04 00:00:00", None, *ADM_TAIL, 0],
        [4, 401, "2111-07-01 00:00:00", "2111-07-04 00:00:00", None, *ADM_TAIL, 0],
    ]  # fmt: skip
    diagnoses = diagnoses or [
        [1, 102, 2, "E119", 10], [1, 102, 1, "I10", 10], [1, 101, 1, "4019", 9], [1, 101, 2, "25000", 9],
        [2, 201, 1, "J45909", 10], [2, 201, 2, "ZZZ99", 10], [3, 301, 1, "N1830", 10],
    ]  # fmt: skip
    write_csv_gz(hosp / "patients.csv.gz", MIMIC_COLUMNS["patients"], patients)
    write_csv_gz(hosp / "admissions.csv.gz", MIMIC_COLUMNS["admissions"], admissions)
    write_csv_gz(hosp / "diagnoses_icd.csv.gz", MIMIC_COLUMNS["diagnoses_icd"], diagnoses)
    write_csv_gz(hosp / "d_icd_diagnoses.csv.gz", MIMIC_COLUMNS["d_icd_diagnoses"],
                 [["4019", 9, "Unspecified essential hypertension"], ["I10", 10, "Essential (primary) hypertension"]])  # fmt: skip
    return root


def _stay(
    stay: int, hss: int, pid: str, year: int, unit_no: int, offset: int, status: str | None
) -> list[object]:
    row = dict.fromkeys(EICU_COLUMNS["patient"].split(","))
    row.update(
        patientunitstayid=stay, patienthealthsystemstayid=hss, gender="Male", age="> 89", hospitalid=73,
        hospitaladmitoffset=offset, hospitaldischargeyear=year, hospitaldischargestatus=status,
        unitvisitnumber=unit_no, uniquepid=pid,
    )  # fmt: skip
    return list(row.values())


def write_eicu(root: Path) -> Path:
    """002-00001: hospital stay 11 (2014, units 1 and 2) then 12 (2015, Expired). 002-00002: one stay,
    no codes at all. Codes carry stray spaces, empty parts and one unparseable part."""
    patient = [
        _stay(112, 11, "002-00001", 2014, 2, -900, "Alive"),
        _stay(111, 11, "002-00001", 2014, 1, -60, "Alive"),
        _stay(121, 12, "002-00001", 2015, 1, -10, "Expired"),
        _stay(201, 20, "002-00002", 2014, 1, -5, None),
    ]
    diagnosis = [
        [1, 112, "True", 30, "renal|acute renal failure", "584.9, N17.9", "Major"],
        [2, 111, "True", 10, "pulmonary|respiratory failure", "  518.81 ,, J96.00, ", "Primary"],
        [3, 111, "False", 20, "cardiovascular|hypertension", "401.9,I10", "Other"],
        [4, 121, "True", 5, "infectious|sepsis", "038.9, A41.9, junk!", "Primary"],
        [5, 121, "True", 6, "pulmonary|respiratory failure", "J96.00", "Major"],
        [6, 201, "True", 5, "burns|burn", None, "Primary"],
        [7, 201, "True", 6, "burns|burn", " , ", "Other"],
    ]
    write_csv_gz(root / "patient.csv.gz", EICU_COLUMNS["patient"], patient)
    write_csv_gz(root / "diagnosis.csv.gz", EICU_COLUMNS["diagnosis"], diagnosis)
    return root


def write_meds(root: Path, *, splits: bool = True) -> Path:
    """Two shards; subject 1 (both code forms, two visits, MEDS_DEATH 30 days after), subject 2 (one visit,
    no death), subject 3 (only non-diagnosis codes: dropped)."""
    ts = pa.timestamp("us")

    def shard(rows: list[tuple]) -> pa.Table:
        sid, t, code = zip(*rows, strict=True)
        return pa.table({"subject_id": pa.array(sid, pa.int64()), "time": pa.array(t, ts), "code": pa.array(code),
                         "numeric_value": pa.array([None] * len(rows), pa.float32())})  # fmt: skip

    from datetime import datetime as dt

    (root / "data" / "train").mkdir(parents=True, exist_ok=True)
    pq.write_table(shard([
        (1, None, "MEDS_BIRTH"), (1, dt(2110, 1, 5), "HOSPITAL_ADMISSION//EW EMER.//EMERGENCY ROOM"),
        (1, dt(2110, 1, 9), "DIAGNOSIS//ICD//9//4019"), (1, dt(2110, 1, 9), "DIAGNOSIS//ICD//9//25000"),
        (1, dt(2116, 2, 1), "ICD10CM/E11.9"), (1, dt(2116, 2, 1), "DIAGNOSIS//ICD//10//I10"),
        (1, dt(2116, 3, 2), "MEDS_DEATH"),
    ]), root / "data" / "train" / "0.parquet")  # fmt: skip
    pq.write_table(shard([
        (2, dt(2120, 5, 1), "ICD9CM/518.81"), (2, dt(2120, 5, 1), "LAB//50912//mg/dL"),
        (3, dt(2121, 1, 1), "GENDER//F"),
    ]), root / "data" / "train" / "1.parquet")  # fmt: skip
    if splits:
        (root / "metadata").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"subject_id": pa.array([1, 2, 3], pa.int64()), "split": ["train", "held_out", "tuning"]}),
                       root / "metadata" / "subject_splits.parquet")  # fmt: skip
    return root
