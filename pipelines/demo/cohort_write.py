"""Writers for the synthetic cohort: MIMIC-IV ``hosp/`` and eICU tables (gzip CSV, exact column order of
the real releases, quotes only around fields that need them, as DuckDB writes them) and ``ground_truth/``.

Numeric arrays come from ``cohort.simulate_hospital``; every string (timestamps, dotted codes,
categorical columns) is formatted by DuckDB over Arrow tables, so nothing loops per row in Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ontology_compiler.icd import ICD9CM, ICD10CM, dotted_code
from ontology_compiler.sqlsafe import quote_literal

from .cohort_space import CodeSpace

MIMIC_COLUMNS = {
    "patients": "subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod",
    "admissions": (
        "subject_id,hadm_id,admittime,dischtime,deathtime,admission_type,admit_provider_id,admission_location,"
        "discharge_location,insurance,language,marital_status,race,edregtime,edouttime,hospital_expire_flag"
    ),
    "diagnoses_icd": "subject_id,hadm_id,seq_num,icd_code,icd_version",
    "d_icd_diagnoses": "icd_code,icd_version,long_title",
}
EICU_COLUMNS = {
    "patient": (
        "patientunitstayid,patienthealthsystemstayid,gender,age,ethnicity,hospitalid,wardid,apacheadmissiondx,"
        "admissionheight,hospitaladmittime24,hospitaladmitoffset,hospitaladmitsource,hospitaldischargeyear,"
        "hospitaldischargetime24,hospitaldischargeoffset,hospitaldischargelocation,hospitaldischargestatus,"
        "unittype,unitadmittime24,unitadmitsource,unitvisitnumber,unitstaytype,admissionweight,dischargeweight,"
        "unitdischargetime24,unitdischargeoffset,unitdischargelocation,unitdischargestatus,uniquepid"
    ),
    "diagnosis": "diagnosisid,patientunitstayid,activeupondischarge,diagnosisoffset,diagnosisstring,icd9code,diagnosispriority",
}
ADMISSION_TYPES = ["EW EMER.", "EU OBSERVATION", "OBSERVATION ADMIT", "URGENT", "SURGICAL SAME DAY ADMISSION",
                   "DIRECT EMER.", "ELECTIVE", "DIRECT OBSERVATION", "AMBULATORY OBSERVATION"]  # fmt: skip
ADMISSION_LOCATIONS = ["EMERGENCY ROOM", "PHYSICIAN REFERRAL", "TRANSFER FROM HOSPITAL", "WALK-IN/SELF REFERRAL",
                       "CLINIC REFERRAL", "PROCEDURE SITE", "TRANSFER FROM SKILLED NURSING FACILITY", "PACU"]  # fmt: skip
DISCHARGE_LOCATIONS = ["HOME", "HOME HEALTH CARE", "SKILLED NURSING FACILITY", "REHAB",
                       "CHRONIC/LONG TERM ACUTE CARE", "HOSPICE", "AGAINST ADVICE", "PSYCH FACILITY"]  # fmt: skip
INSURANCE = ["Medicare", "Medicaid", "Other"]
MARITAL = ["MARRIED", "SINGLE", "WIDOWED", "DIVORCED"]
RACE = ["WHITE", "BLACK/AFRICAN AMERICAN", "HISPANIC/LATINO - PUERTO RICAN", "ASIAN", "OTHER", "UNKNOWN",
        "WHITE - OTHER EUROPEAN", "ASIAN - CHINESE"]  # fmt: skip
EICU_UNITS = ["Med-Surg ICU", "MICU", "CCU-CTICU", "SICU", "Neuro ICU", "Cardiac ICU", "CSICU", "CTICU"]
EICU_SOURCES = ["Emergency Department", "Operating Room", "Floor", "Direct Admit", "Other Hospital"]
EICU_ETHNICITY = ["Caucasian", "African American", "Hispanic", "Asian", "Native American", "Other/Unknown"]
EICU_DISCHARGE = ["Home", "Skilled Nursing Facility", "Other External", "Rehabilitation", "Other Hospital"]


@dataclass
class Hospital:
    """Every array the writers need for one hospital (P patients, V visits, R code rows, Q conditions)."""

    subject: np.ndarray  # (P,) int64 subject ids
    age: np.ndarray  # (P,) int first-visit age
    female: np.ndarray  # (P,) bool
    mortality_p: np.ndarray  # (P,) float: probability of death within 182 days of the last discharge
    died_6m: np.ndarray  # (P,) bool
    death_time: np.ndarray  # (P,) int64 seconds, -1 when no death is recorded
    died_in_hospital: np.ndarray  # (P,) bool
    visit_patient: np.ndarray  # (V,) int64 patient index
    visit_local: np.ndarray  # (V,) int visit number within the patient (0-based)
    admit: np.ndarray  # (V,) int64 seconds
    disch: np.ndarray  # (V,) int64 seconds
    visit_id: np.ndarray  # (V,) int64 hadm_id / patienthealthsystemstayid
    row_visit: np.ndarray  # (R,) int64 visit index
    row_seq: np.ndarray  # (R,) int32 1-based order within the visit
    row_code: np.ndarray  # (R,) int32 index into the code space's code_str (ICD-9 or ICD-10)
    row_code10: np.ndarray  # (R,) int32 the ICD-10 code of the row (eICU writes both)
    row_condition: np.ndarray  # (R,) int32 condition index
    cond_patient: np.ndarray  # (Q,) int64
    cond_condition: np.ndarray  # (Q,) int32
    cond_onset: np.ndarray  # (Q,) int onset visit


def _lit(values: list[str]) -> str:
    return "[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"


def _pick(rng: np.random.Generator, n: int, k: int, skew: float = 1.3) -> np.ndarray:
    """Indices 1..k (DuckDB lists are 1-based), Zipf-skewed so the first option is the most common."""
    p = 1.0 / np.arange(1, k + 1) ** skew
    return rng.choice(k, size=n, p=p / p.sum()).astype(np.int32) + 1


def _copy(con: duckdb.DuckDBPyConnection, sql: str, path: Path, columns: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # COPY takes no bound parameter for its target: the path goes through the one quoting helper
    con.execute(
        f"COPY (SELECT {columns} FROM ({sql})) TO {quote_literal(str(path))} (HEADER, COMPRESSION gzip)"
    )


def _ts(col: str) -> str:
    return f"strftime(make_timestamp(({col})::BIGINT * 1000000), '%Y-%m-%d %H:%M:%S')"


def _codes_table(space: CodeSpace) -> pa.Table:
    vocabulary = {9: ICD9CM, 10: ICD10CM}
    dots = [
        dotted_code(c, vocabulary[int(v)])
        for c, v in zip(space.code_str.tolist(), space.code_version.tolist(), strict=True)
    ]
    return pa.table(
        {
            "code_idx": np.arange(len(space.code_str), dtype=np.int32),
            "icd_code": space.code_str,
            "icd_version": space.code_version,
            "dotted": dots,
            "long_title": space.code_title,
        }
    )


def write_mimic(
    con: duckdb.DuckDBPyConnection, hosp: Path, space: CodeSpace, h: Hospital, rng: np.random.Generator
) -> None:
    n, v = len(h.subject), len(h.visit_patient)
    first_admit = h.admit[np.concatenate([[0], np.flatnonzero(np.diff(h.visit_patient)) + 1])]
    last = np.zeros(v, dtype=bool)
    last[np.concatenate([np.flatnonzero(np.diff(h.visit_patient)), [v - 1]])] = True
    died_here = last & h.died_in_hospital[h.visit_patient]
    con.register("p", pa.table({"subject_id": h.subject, "female": h.female, "age": h.age,
                                "first_admit": first_admit, "death": h.death_time}))  # fmt: skip
    _copy(con, "SELECT *, year(make_timestamp(first_admit * 1000000)) AS anchor_year FROM p",
          hosp / "patients.csv.gz",
          "subject_id, CASE WHEN female THEN 'F' ELSE 'M' END AS gender, "
          "CASE WHEN age > 89 THEN 91 ELSE age END AS anchor_age, anchor_year, "
          "printf('%d - %d', 2008 + 3 * ((anchor_year - 2108) // 3), 2010 + 3 * ((anchor_year - 2108) // 3)) "
          "AS anchor_year_group, CASE WHEN death >= 0 THEN make_timestamp(death * 1000000)::DATE END AS dod")  # fmt: skip
    adm_type = _pick(rng, v, len(ADMISSION_TYPES))
    ed = np.isin(adm_type, [1, 2, 6])
    con.register("a", pa.table({
        "subject_id": h.subject[h.visit_patient], "hadm_id": h.visit_id, "admit": h.admit, "disch": h.disch,
        "died": died_here, "t": adm_type, "prov": rng.integers(10000, 99999, v), "aloc": _pick(rng, v, 8),
        "dloc": _pick(rng, v, 8), "ins": _pick(rng, n, 3)[h.visit_patient], "mar": _pick(rng, n, 5)[h.visit_patient],
        "race": _pick(rng, n, len(RACE))[h.visit_patient], "lang": rng.random(n)[h.visit_patient] < 0.9,
        "ed_in": np.where(ed, h.admit - rng.integers(1, 9, v) * 3600 - rng.integers(0, 60, v) * 60, -1),
    }))  # fmt: skip
    _copy(con, "SELECT * FROM a ORDER BY subject_id, admit", hosp / "admissions.csv.gz",
          f"subject_id, hadm_id, {_ts('admit')} AS admittime, {_ts('disch')} AS dischtime, "
          f"CASE WHEN died THEN {_ts('disch')} END AS deathtime, {_lit(ADMISSION_TYPES)}[t] AS admission_type, "
          f"printf('P%05X', prov) AS admit_provider_id, {_lit(ADMISSION_LOCATIONS)}[aloc] AS admission_location, "
          f"CASE WHEN died THEN 'DIED' WHEN dloc = 8 THEN NULL ELSE {_lit(DISCHARGE_LOCATIONS)}[dloc] END "
          f"AS discharge_location, {_lit(INSURANCE)}[ins] AS insurance, CASE WHEN lang THEN 'ENGLISH' ELSE '?' END "
          f"AS language, CASE WHEN mar <= 4 THEN {_lit(MARITAL)}[mar] END AS marital_status, {_lit(RACE)}[race] "
          f"AS race, CASE WHEN ed_in >= 0 THEN {_ts('ed_in')} END AS edregtime, CASE WHEN ed_in >= 0 THEN "
          f"{_ts('admit + 600')} END AS edouttime, died::INT AS hospital_expire_flag")  # fmt: skip
    con.register("codes", _codes_table(space))
    con.register("d", pa.table({"subject_id": h.subject[h.visit_patient[h.row_visit]],
                                "hadm_id": h.visit_id[h.row_visit], "seq_num": h.row_seq, "code_idx": h.row_code}))  # fmt: skip
    _copy(con, "SELECT * FROM d JOIN codes USING (code_idx) ORDER BY subject_id, hadm_id, seq_num",
          hosp / "diagnoses_icd.csv.gz", MIMIC_COLUMNS["diagnoses_icd"])  # fmt: skip
    _copy(con, "SELECT * FROM codes ORDER BY icd_code, icd_version", hosp / "d_icd_diagnoses.csv.gz",
          MIMIC_COLUMNS["d_icd_diagnoses"])  # fmt: skip


def write_eicu(
    con: duckdb.DuckDBPyConnection, root: Path, space: CodeSpace, h: Hospital, rng: np.random.Generator
) -> None:
    """``patient.csv.gz`` (a hospital stay has one unit stay, or two for 15 %) and ``diagnosis.csv.gz``."""
    n_units, unit_len = _write_eicu_patients(con, root, space, h, rng)
    _write_eicu_diagnoses(con, root, space, h, rng, n_units, unit_len)


def _write_eicu_patients(
    con: duckdb.DuckDBPyConnection, root: Path, space: CodeSpace, h: Hospital, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``patient.csv.gz``, one row per unit stay (temp tables ``u`` and ``cats`` stay registered); the
    unit stays of each visit and the length of each unit stay (minutes)."""
    v = len(h.visit_patient)
    n_units = 1 + (rng.random(v) < 0.15)
    unit_visit = np.repeat(np.arange(v), n_units)
    unit_no = np.arange(len(unit_visit)) - np.repeat(np.cumsum(n_units) - n_units, n_units) + 1
    u = len(unit_visit)
    last_visit = np.r_[h.visit_patient[1:] != h.visit_patient[:-1], True]
    expired = last_visit & h.died_in_hospital[h.visit_patient]
    los_min = (h.disch - h.admit) // 60
    pre = rng.integers(0, 1440, v)
    unit_len = np.maximum(los_min[unit_visit] // (n_units[unit_visit] + 1), 60)
    hosp_admit_off = -(pre[unit_visit] + (unit_no - 1) * unit_len)
    con.register("u", pa.table({
        "stay": 200_000 + rng.choice(9_000_000, size=u, replace=False), "hss": h.visit_id[unit_visit],
        "female": h.female[h.visit_patient[unit_visit]], "age": h.age[h.visit_patient[unit_visit]],
        "eth": _pick(rng, len(h.subject), 6)[h.visit_patient[unit_visit]], "hosp": _pick(rng, len(h.subject), 12)[h.visit_patient[unit_visit]] * 7,
        "cond": h.row_condition[np.searchsorted(h.row_visit, unit_visit)], "admit": h.admit[unit_visit],
        "disch": h.disch[unit_visit], "hoff": hosp_admit_off, "dis_off": hosp_admit_off + los_min[unit_visit],
        "ulen": unit_len, "unit_no": unit_no, "n_units": n_units[unit_visit], "expired": expired[unit_visit],
        "status_missing": rng.random(u) < 0.01, "unit": _pick(rng, u, 8), "src": _pick(rng, u, 5),
        "dloc": _pick(rng, u, 5), "height": np.round(rng.normal(170, 10, u), 1), "weight": np.round(rng.normal(82, 18, u), 1),
        "pid": h.subject[h.visit_patient[unit_visit]], "ward": rng.integers(1, 1200, u),
    }))  # fmt: skip
    con.register("cats", pa.table({"cond": np.arange(len(space.conditions), dtype=np.int32),
                                   "category": space.conditions, "chapter": space.chapter}))  # fmt: skip
    t24 = "strftime(make_timestamp(({0})::BIGINT * 1000000), '%H:%M:%S')"
    _copy(con, "SELECT * FROM u JOIN cats USING (cond) ORDER BY pid, admit, unit_no", root / "patient.csv.gz",
          "stay AS patientunitstayid, hss AS patienthealthsystemstayid, CASE WHEN female THEN 'Female' ELSE 'Male' "
          f"END AS gender, CASE WHEN age > 89 THEN '> 89' ELSE age::VARCHAR END AS age, {_lit(EICU_ETHNICITY)}[eth] "
          "AS ethnicity, hosp AS hospitalid, ward AS wardid, printf('%s, chapter %d', category, chapter) "
          f"AS apacheadmissiondx, height AS admissionheight, {t24.format('admit')} AS hospitaladmittime24, "
          f"hoff AS hospitaladmitoffset, {_lit(EICU_SOURCES)}[src] AS hospitaladmitsource, "
          f"year(make_timestamp(disch * 1000000)) - 100 AS hospitaldischargeyear, {t24.format('disch')} "
          "AS hospitaldischargetime24, dis_off AS hospitaldischargeoffset, CASE WHEN expired THEN 'Death' ELSE "
          f"{_lit(EICU_DISCHARGE)}[dloc] END AS hospitaldischargelocation, CASE WHEN status_missing THEN NULL "
          "WHEN expired THEN 'Expired' ELSE 'Alive' END AS hospitaldischargestatus, "
          f"{_lit(EICU_UNITS)}[unit] AS unittype, {t24.format('admit - hoff * 60')} AS unitadmittime24, "
          f"{_lit(EICU_SOURCES)}[src] AS unitadmitsource, unit_no AS unitvisitnumber, CASE WHEN unit_no > 1 "
          "THEN 'stepdown/other' ELSE 'admit' END AS unitstaytype, weight AS admissionweight, "
          "round(weight - 1.5, 1) AS dischargeweight, "
          f"{t24.format('admit - hoff * 60 + ulen * 60')} AS unitdischargetime24, ulen AS unitdischargeoffset, "
          "CASE WHEN unit_no < n_units THEN 'Step-Down Unit (SDU)' WHEN expired THEN 'Death' ELSE 'Floor' END "
          "AS unitdischargelocation, CASE WHEN expired AND unit_no = n_units THEN 'Expired' ELSE 'Alive' END "
          "AS unitdischargestatus, printf('%03d-%05d', hosp, pid) AS uniquepid")  # fmt: skip
    return n_units, unit_len


def _write_eicu_diagnoses(con: duckdb.DuckDBPyConnection, root: Path, space: CodeSpace, h: Hospital,
                          rng: np.random.Generator, n_units: np.ndarray, unit_len: np.ndarray) -> None:  # fmt: skip
    """``diagnosis.csv.gz``: each code row in a unit stay of its visit, ``icd9code`` holding the ICD-9 code,
    the ICD-10 code, both or nothing, with the stray separators and blanks of the real table."""
    u = int(n_units.sum())
    r = len(h.row_visit)
    first_unit = np.cumsum(n_units) - n_units
    row_unit = first_unit[h.row_visit] + (rng.random(r) * n_units[h.row_visit]).astype(np.int64)
    con.register("g", pa.table({
        "did": 1_000_000 + rng.choice(90_000_000, size=r, replace=False), "unit_row": row_unit,
        "c9": h.row_code, "c10": h.row_code10, "cond": h.row_condition, "seq": h.row_seq,
        "mode": rng.choice(4, size=r, p=[0.55, 0.2, 0.1, 0.15]), "stray": rng.choice(4, size=r, p=[0.94, 0.02, 0.02, 0.02]),
        "active": rng.random(r) < 0.6, "off": (rng.random(r) * unit_len[row_unit]).astype(np.int64),
    }))  # fmt: skip
    con.register(
        "stays",
        pa.table({"unit_row": np.arange(u), "stay": con.sql("SELECT stay FROM u").fetchnumpy()["stay"]}),
    )
    con.register("codes", _codes_table(space))
    parts = "CASE mode WHEN 0 THEN k9.dotted || ', ' || k10.dotted WHEN 1 THEN k9.dotted WHEN 2 THEN k10.dotted ELSE '' END"
    _copy(con,
          f"SELECT g.*, s.stay, cats.category, cats.chapter, k9.dotted AS d9, ({parts}) AS base FROM g "
          "JOIN stays s USING (unit_row) JOIN cats USING (cond) JOIN codes k9 ON k9.code_idx = g.c9 "
          "JOIN codes k10 ON k10.code_idx = g.c10 ORDER BY s.stay, g.seq",
          root / "diagnosis.csv.gz",
          "did AS diagnosisid, stay AS patientunitstayid, CASE WHEN active THEN 'True' ELSE 'False' END "
          "AS activeupondischarge, off AS diagnosisoffset, printf('chapter %d|%s', chapter, category) "
          "AS diagnosisstring, CASE WHEN base = '' THEN NULL WHEN stray = 1 THEN '  ' || replace(base, ', ', ' ,  ') "
          "|| ' ' WHEN stray = 2 THEN base || ', ' WHEN stray = 3 THEN replace(base, ', ', ',, ') ELSE base END "
          "AS icd9code, CASE WHEN seq = 1 THEN 'Primary' WHEN seq <= 3 THEN 'Major' ELSE 'Other' END "
          "AS diagnosispriority")  # fmt: skip


def write_ground_truth(root: Path, space: CodeSpace, hospitals: dict[str, Hospital], seed: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    pats, conds, codes = [], [], []
    for name, h in hospitals.items():
        n_visits = np.bincount(h.visit_patient, minlength=len(h.subject))
        pats.append(pa.table({
            "hospital": [name] * len(h.subject), "subject_id": h.subject, "age": h.age, "female": h.female,
            "n_visits": n_visits, "n_conditions": np.bincount(h.cond_patient, minlength=len(h.subject)),
            "mortality_prob": h.mortality_p, "died_6m": h.died_6m, "died_in_hospital": h.died_in_hospital,
            "death_time": pa.array(np.where(h.death_time >= 0, h.death_time, 0).astype("datetime64[s]"),
                                   mask=h.death_time < 0),
        }))  # fmt: skip
        conds.append(pa.table({
            "hospital": [name] * len(h.cond_patient), "subject_id": h.subject[h.cond_patient],
            "condition": space.conditions[h.cond_condition], "chapter": space.chapter[h.cond_condition],
            "severity": space.severity[h.cond_condition], "onset_visit": h.cond_onset,
        }))  # fmt: skip
        codes.append(pa.table({
            "hospital": [name] * len(h.row_visit), "subject_id": h.subject[h.visit_patient[h.row_visit]],
            "visit_id": h.visit_id[h.row_visit], "seq_num": h.row_seq, "icd_code": space.code_str[h.row_code],
            "icd_version": space.code_version[h.row_code], "condition": space.conditions[h.row_condition],
        }))  # fmt: skip
    pq.write_table(pa.concat_tables(pats), root / "patients.parquet")
    pq.write_table(pa.concat_tables(conds), root / "conditions.parquet")
    pq.write_table(pa.concat_tables(codes), root / "codes.parquet")
    n_cand = np.diff(space.cand_offsets)
    pq.write_table(pa.table({
        "condition": space.conditions, "chapter": space.chapter, "severity": space.severity,
        "prevalence_mimic": space.prevalence, "prevalence_eicu": space.prevalence_eicu, "n_codes": n_cand,
    }), root / "condition_catalog.parquet")  # fmt: skip
    (root / "README.json").write_text(json.dumps({
        "generator": "pipelines.demo.cohort", "seed": seed, "note": "synthetic patients; not real EHR data",
        "files": ["patients.parquet", "conditions.parquet", "codes.parquet", "condition_catalog.parquet"],
    }, indent=2) + "\n")  # fmt: skip
