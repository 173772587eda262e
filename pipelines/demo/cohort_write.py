"""Writers for the synthetic cohort: MIMIC-IV ``hosp/`` and eICU tables (gzip CSV, exact column order of
the real releases, quotes only around fields that need them, as DuckDB writes them), ``ground_truth/``,
and the MIMIC-IV tables only other tools read (``icu/icustays``, procedures, prescriptions).

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

from ontology_compiler.api import ICD9CM, ICD10CM, dotted_code, quote_literal

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
    "diagnosis": (
        "diagnosisid,patientunitstayid,activeupondischarge,diagnosisoffset,diagnosisstring,icd9code,"
        "diagnosispriority"
    ),
}
ADMISSION_TYPES = ["EW EMER.", "EU OBSERVATION", "OBSERVATION ADMIT", "URGENT", "SURGICAL SAME DAY ADMISSION",
                   "DIRECT EMER.", "ELECTIVE", "DIRECT OBSERVATION", "AMBULATORY OBSERVATION"]  # fmt: skip
ADMISSION_LOCATIONS = ["EMERGENCY ROOM", "PHYSICIAN REFERRAL", "TRANSFER FROM HOSPITAL",
                       "WALK-IN/SELF REFERRAL", "CLINIC REFERRAL", "PROCEDURE SITE",
                       "TRANSFER FROM SKILLED NURSING FACILITY", "PACU"]  # fmt: skip
DISCHARGE_LOCATIONS = ["HOME", "HOME HEALTH CARE", "SKILLED NURSING FACILITY", "REHAB",
                       "CHRONIC/LONG TERM ACUTE CARE", "HOSPICE", "AGAINST ADVICE",
                       "PSYCH FACILITY"]  # fmt: skip
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
    cond_patient: np.ndarray  # (Q,) int64 (chronic conditions)
    cond_condition: np.ndarray  # (Q,) int32
    cond_onset: np.ndarray  # (Q,) int onset visit
    cond_code: np.ndarray  # (Q,) int32 the ICD-10 code (code_str index) the condition is written with
    reserved: np.ndarray  # (P,) bool: flagged patient, coded with reserved codes only
    systems_offsets: np.ndarray  # (P+1,) int64 CSR offsets into systems
    systems: np.ndarray  # (S,) int64 the patients' body systems (ICD-10 chapters)
    chapter_probs: np.ndarray  # (P, 22) float64 true P(chapter i+1 in the last visit)
    label_mortality_p: np.ndarray  # (P,) float64 true P(mortality label) as the hospital's reader labels it
    reader_subject: np.ndarray  # (P,) int64 subject_id as the hospital's reader numbers patients
    # the most probable next-visit categories of each patient's last visit
    # (cohort_truth.category_probabilities: names (L,), then patient, label, probability per row); None: none
    next_visit: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None


def _lit(values: list[str]) -> str:
    return "[" + ", ".join(quote_literal(v) for v in values) + "]"


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
    con.register(
        "p",
        pa.table(
            {
                "subject_id": h.subject,
                "female": h.female,
                "age": h.age,
                "first_admit": first_admit,
                "death": h.death_time,
            }
        ),
    )
    _copy(
        con,
        "SELECT *, year(make_timestamp(first_admit * 1000000)) AS anchor_year FROM p",
        hosp / "patients.csv.gz",
        "subject_id, CASE WHEN female THEN 'F' ELSE 'M' END AS gender, "
        "CASE WHEN age > 89 THEN 91 ELSE age END AS anchor_age, anchor_year, "
        "printf('%d - %d', 2008 + 3 * ((anchor_year - 2108) // 3), 2010 + 3 * ((anchor_year - 2108) // 3)) "
        "AS anchor_year_group, CASE WHEN death >= 0 THEN make_timestamp(death * 1000000)::DATE END AS dod",
    )
    adm_type = _pick(rng, v, len(ADMISSION_TYPES))
    ed = np.isin(adm_type, [1, 2, 6])
    con.register(
        "a",
        pa.table(
            {
                "subject_id": h.subject[h.visit_patient],
                "hadm_id": h.visit_id,
                "admit": h.admit,
                "disch": h.disch,
                "died": died_here,
                "t": adm_type,
                "prov": rng.integers(10000, 99999, v),
                "aloc": _pick(rng, v, 8),
                "dloc": _pick(rng, v, 8),
                "ins": _pick(rng, n, 3)[h.visit_patient],
                "mar": _pick(rng, n, 5)[h.visit_patient],
                "race": _pick(rng, n, len(RACE))[h.visit_patient],
                "lang": rng.random(n)[h.visit_patient] < 0.9,
                "ed_in": np.where(
                    ed, h.admit - rng.integers(1, 9, v) * 3600 - rng.integers(0, 60, v) * 60, -1
                ),
            }
        ),
    )
    _copy(
        con,
        "SELECT * FROM a ORDER BY subject_id, admit",
        hosp / "admissions.csv.gz",
        f"subject_id, hadm_id, {_ts('admit')} AS admittime, {_ts('disch')} AS dischtime, "
        f"CASE WHEN died THEN {_ts('disch')} END AS deathtime, {_lit(ADMISSION_TYPES)}[t] AS admission_type, "
        "printf('P%05X', prov) AS admit_provider_id, "
        f"{_lit(ADMISSION_LOCATIONS)}[aloc] AS admission_location, "
        f"CASE WHEN died THEN 'DIED' WHEN dloc = 8 THEN NULL ELSE {_lit(DISCHARGE_LOCATIONS)}[dloc] END "
        f"AS discharge_location, {_lit(INSURANCE)}[ins] AS insurance, "
        "CASE WHEN lang THEN 'ENGLISH' ELSE '?' END "
        f"AS language, CASE WHEN mar <= 4 THEN {_lit(MARITAL)}[mar] END AS marital_status, "
        f"{_lit(RACE)}[race] "
        f"AS race, CASE WHEN ed_in >= 0 THEN {_ts('ed_in')} END AS edregtime, CASE WHEN ed_in >= 0 THEN "
        f"{_ts('admit + 600')} END AS edouttime, died::INT AS hospital_expire_flag",
    )
    con.register("codes", _codes_table(space))
    con.register(
        "d",
        pa.table(
            {
                "subject_id": h.subject[h.visit_patient[h.row_visit]],
                "hadm_id": h.visit_id[h.row_visit],
                "seq_num": h.row_seq,
                "code_idx": h.row_code,
            }
        ),
    )
    _copy(
        con,
        "SELECT * FROM d JOIN codes USING (code_idx) ORDER BY subject_id, hadm_id, seq_num",
        hosp / "diagnoses_icd.csv.gz",
        MIMIC_COLUMNS["diagnoses_icd"],
    )
    _copy(
        con,
        "SELECT * FROM codes ORDER BY icd_code, icd_version",
        hosp / "d_icd_diagnoses.csv.gz",
        MIMIC_COLUMNS["d_icd_diagnoses"],
    )


def write_eicu(
    con: duckdb.DuckDBPyConnection, root: Path, space: CodeSpace, h: Hospital, rng: np.random.Generator
) -> np.ndarray:
    """``patient.csv.gz`` (a hospital stay has one unit stay, or two for 15 %) and ``diagnosis.csv.gz``.
    Returns each patient's ``subject_id`` as the eICU reader numbers them (dense rank of ``uniquepid``)."""
    n_units, unit_len, hospital = _write_eicu_patients(con, root, space, h, rng)
    _write_eicu_diagnoses(con, root, space, h, rng, n_units, unit_len)
    uniquepid = np.array(
        [f"{a:03d}-{b:05d}" for a, b in zip(hospital.tolist(), h.subject.tolist(), strict=True)]
    )
    return (np.unique(uniquepid, return_inverse=True)[1] + 1).astype(np.int64)


def _write_eicu_patients(
    con: duckdb.DuckDBPyConnection, root: Path, space: CodeSpace, h: Hospital, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``patient.csv.gz``, one row per unit stay (temp tables ``u`` and ``cats`` stay registered); the
    unit stays of each visit, the length of each unit stay (minutes) and each patient's ``hospitalid``."""
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
    stay = 200_000 + rng.choice(9_000_000, size=u, replace=False)
    eth = _pick(rng, len(h.subject), 6)
    hospital = _pick(rng, len(h.subject), 12) * 7
    con.register(
        "u",
        pa.table(
            {
                "stay": stay,
                "hss": h.visit_id[unit_visit],
                "female": h.female[h.visit_patient[unit_visit]],
                "age": h.age[h.visit_patient[unit_visit]],
                "eth": eth[h.visit_patient[unit_visit]],
                "hosp": hospital[h.visit_patient[unit_visit]],
                "cond": h.row_condition[np.searchsorted(h.row_visit, unit_visit)],
                "admit": h.admit[unit_visit],
                "disch": h.disch[unit_visit],
                "hoff": hosp_admit_off,
                "dis_off": hosp_admit_off + los_min[unit_visit],
                "ulen": unit_len,
                "unit_no": unit_no,
                "n_units": n_units[unit_visit],
                "expired": expired[unit_visit],
                "status_missing": rng.random(u) < 0.01,
                "unit": _pick(rng, u, 8),
                "src": _pick(rng, u, 5),
                "dloc": _pick(rng, u, 5),
                "height": np.round(rng.normal(170, 10, u), 1),
                "weight": np.round(rng.normal(82, 18, u), 1),
                "pid": h.subject[h.visit_patient[unit_visit]],
                "ward": rng.integers(1, 1200, u),
            }
        ),
    )
    con.register(
        "cats",
        pa.table(
            {
                "cond": np.arange(len(space.conditions), dtype=np.int32),
                "category": space.conditions,
                "chapter": space.chapter,
            }
        ),
    )
    t24 = "strftime(make_timestamp(({0})::BIGINT * 1000000), '%H:%M:%S')"
    _copy(
        con,
        "SELECT * FROM u JOIN cats USING (cond) ORDER BY pid, admit, unit_no",
        root / "patient.csv.gz",
        "stay AS patientunitstayid, hss AS patienthealthsystemstayid, "
        "CASE WHEN female THEN 'Female' ELSE 'Male' "
        "END AS gender, CASE WHEN age > 89 THEN '> 89' ELSE age::VARCHAR END AS age, "
        f"{_lit(EICU_ETHNICITY)}[eth] "
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
        "AS unitdischargestatus, printf('%03d-%05d', hosp, pid) AS uniquepid",
    )
    return n_units, unit_len, hospital


def _write_eicu_diagnoses(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    space: CodeSpace,
    h: Hospital,
    rng: np.random.Generator,
    n_units: np.ndarray,
    unit_len: np.ndarray,
) -> None:
    """``diagnosis.csv.gz``: each code row in a unit stay of its visit, ``icd9code`` holding the ICD-9 code,
    the ICD-10 code, both or nothing, with the stray separators and blanks of the real table."""
    u = int(n_units.sum())
    r = len(h.row_visit)
    first_unit = np.cumsum(n_units) - n_units
    row_unit = first_unit[h.row_visit] + (rng.random(r) * n_units[h.row_visit]).astype(np.int64)
    con.register(
        "g",
        pa.table(
            {
                "did": 1_000_000 + rng.choice(90_000_000, size=r, replace=False),
                "unit_row": row_unit,
                "c9": h.row_code,
                "c10": h.row_code10,
                "cond": h.row_condition,
                "seq": h.row_seq,
                "mode": rng.choice(4, size=r, p=[0.55, 0.2, 0.1, 0.15]),
                "stray": rng.choice(4, size=r, p=[0.94, 0.02, 0.02, 0.02]),
                "active": rng.random(r) < 0.6,
                "off": (rng.random(r) * unit_len[row_unit]).astype(np.int64),
            }
        ),
    )
    con.register(
        "stays",
        pa.table({"unit_row": np.arange(u), "stay": con.sql("SELECT stay FROM u").fetchnumpy()["stay"]}),
    )
    con.register("codes", _codes_table(space))
    parts = (
        "CASE mode WHEN 0 THEN k9.dotted || ', ' || k10.dotted WHEN 1 THEN k9.dotted WHEN 2 THEN k10.dotted "
        "ELSE '' END"
    )
    _copy(
        con,
        f"SELECT g.*, s.stay, cats.category, cats.chapter, k9.dotted AS d9, ({parts}) AS base FROM g "
        "JOIN stays s USING (unit_row) JOIN cats USING (cond) JOIN codes k9 ON k9.code_idx = g.c9 "
        "JOIN codes k10 ON k10.code_idx = g.c10 ORDER BY s.stay, g.seq",
        root / "diagnosis.csv.gz",
        "did AS diagnosisid, stay AS patientunitstayid, CASE WHEN active THEN 'True' ELSE 'False' END "
        "AS activeupondischarge, off AS diagnosisoffset, printf('chapter %d|%s', chapter, category) "
        "AS diagnosisstring, CASE WHEN base = '' THEN NULL "
        "WHEN stray = 1 THEN '  ' || replace(base, ', ', ' ,  ') "
        "|| ' ' WHEN stray = 2 THEN base || ', ' WHEN stray = 3 THEN replace(base, ', ', ',, ') "
        "ELSE base END "
        "AS icd9code, CASE WHEN seq = 1 THEN 'Primary' WHEN seq <= 3 THEN 'Major' ELSE 'Other' END "
        "AS diagnosispriority",
    )


def write_ground_truth(
    root: Path, space: CodeSpace, hospitals: dict[str, Hospital], seed: int, version: str
) -> None:
    """``ground_truth/``: patients (with ``reserved``), chronic conditions, the condition behind every code,
    the condition catalogue, the reserved codes, the true task probabilities and ``README.json``."""
    root.mkdir(parents=True, exist_ok=True)
    tables = _ground_truth_tables(space, hospitals)
    for name, table in tables.items():
        tmp = root / f".{name}.tmp"
        pq.write_table(table, tmp)
        tmp.replace(root / name)
    readme = _ground_truth_readme(space, hospitals, seed, version, sorted(tables))
    tmp = root / ".README.json.tmp"
    tmp.write_text(json.dumps(readme, indent=2) + "\n")
    tmp.replace(root / "README.json")


def _ground_truth_tables(space: CodeSpace, hospitals: dict[str, Hospital]) -> dict[str, pa.Table]:
    """The Parquet tables of ``ground_truth/``, by file name."""
    pats, conds, codes, probs = [], [], [], []
    for name, h in hospitals.items():
        n = len(h.subject)
        n_visits = np.bincount(h.visit_patient, minlength=n)
        pats.append(
            pa.table(
                {
                    "hospital": [name] * n,
                    "subject_id": h.subject,
                    "age": h.age,
                    "female": h.female,
                    "n_visits": n_visits,
                    "n_conditions": np.bincount(h.cond_patient, minlength=n),
                    "mortality_prob": h.mortality_p,
                    "died_6m": h.died_6m,
                    "died_in_hospital": h.died_in_hospital,
                    "death_time": pa.array(
                        np.where(h.death_time >= 0, h.death_time, 0).astype("datetime64[s]"),
                        mask=h.death_time < 0,
                    ),
                    "reserved": h.reserved,
                    "systems": pa.ListArray.from_arrays(
                        pa.array(h.systems_offsets.astype(np.int32)), pa.array(h.systems.astype(np.int8))
                    ),
                }
            )
        )
        conds.append(
            pa.table(
                {
                    "hospital": [name] * len(h.cond_patient),
                    "subject_id": h.subject[h.cond_patient],
                    "condition": space.conditions[h.cond_condition],
                    "chapter": space.chapter[h.cond_condition],
                    "severity": space.severity[h.cond_condition],
                    "onset_visit": h.cond_onset,
                    "icd10_code": space.code_str[h.cond_code],
                }
            )
        )
        codes.append(
            pa.table(
                {
                    "hospital": [name] * len(h.row_visit),
                    "subject_id": h.subject[h.visit_patient[h.row_visit]],
                    "visit_id": h.visit_id[h.row_visit],
                    "seq_num": h.row_seq,
                    "icd_code": space.code_str[h.row_code],
                    "icd_version": space.code_version[h.row_code],
                    "condition": space.conditions[h.row_condition],
                }
            )
        )
        flat = pa.array(h.chapter_probs.reshape(-1).astype(np.float64))
        offsets = pa.array(np.arange(0, h.chapter_probs.size + 1, h.chapter_probs.shape[1], dtype=np.int32))
        probs.append(
            pa.table(
                {
                    "hospital": [name] * n,
                    "subject_id": h.reader_subject.astype(np.int64),
                    "mortality": h.label_mortality_p.astype(np.float64),
                    "chapters": pa.ListArray.from_arrays(offsets, flat),
                }
            )
        )
    next_visit = [_next_visit_table(name, h) for name, h in hospitals.items() if h.next_visit is not None]
    res = np.flatnonzero(space.cand_reserved)
    owner = np.repeat(np.arange(len(space.conditions)), np.diff(space.cand_offsets))
    reserved = pa.table(
        {
            "vocabulary": pa.array(["ICD10CM"] * len(res), pa.string()),
            "code": pa.array(space.code_str[space.cand_icd10[res]].tolist(), pa.string()),
            "condition": pa.array(space.conditions[owner[res]].tolist(), pa.string()),
        }
    )
    return {
        "patients.parquet": pa.concat_tables(pats),
        "conditions.parquet": pa.concat_tables(conds),
        "codes.parquet": pa.concat_tables(codes),
        "condition_catalog.parquet": pa.table(
            {
                "condition": space.conditions,
                "chapter": space.chapter,
                "severity": space.severity,
                "chronic": space.chronic,
                "prevalence_mimic": space.prevalence,
                "prevalence_eicu": space.prevalence_eicu,
                "n_codes": np.diff(space.cand_offsets),
                "n_reserved": np.bincount(
                    owner, weights=space.cand_reserved, minlength=len(space.conditions)
                ).astype(np.int64),
            }
        ),
        "reserved_codes.parquet": reserved,
        "task_probabilities.parquet": pa.concat_tables(probs),
    } | ({"next_visit_probabilities.parquet": pa.concat_tables(next_visit)} if next_visit else {})


def _next_visit_table(name: str, h: Hospital) -> pa.Table:
    """The rows of ``next_visit_probabilities.parquet`` of one hospital: each patient's most probable
    last-visit categories, ``rank`` 1 the most probable."""
    names, patient, label, prob = h.next_visit
    first = np.r_[True, patient[1:] != patient[:-1]] if len(patient) else np.zeros(0, bool)
    start = np.maximum.accumulate(np.where(first, np.arange(len(patient)), 0)) if len(patient) else patient
    return pa.table(
        {
            "hospital": [name] * len(patient),
            "subject_id": pa.array(h.reader_subject[patient].astype(np.int64)),
            "rank": pa.array((np.arange(len(patient)) - start + 1).astype(np.int16)),
            "category": pa.array(names[label].tolist(), pa.string()).dictionary_encode(),
            "probability": pa.array(prob.astype(np.float64)),
        }
    )


def _ground_truth_readme(
    space: CodeSpace, hospitals: dict[str, Hospital], seed: int, version: str, files: list[str]
) -> dict:
    """``ground_truth/README.json``: version, seed, what each file holds, counts."""
    counts = {
        name: {
            "patients": len(h.subject),
            "visits": len(h.visit_patient),
            "diagnosis_rows": len(h.row_visit),
            "reserved_patients": int(h.reserved.sum()),
        }
        for name, h in hospitals.items()
    }
    return {
        "generator": "pipelines.demo.cohort",
        "version": version,
        "seed": seed,
        "note": "synthetic patients; not real EHR data",
        "files": files,
        "contents": {
            "patients.parquet": "one row per patient; reserved = flagged (all its codes are reserved codes); "
            "systems = its body systems (ICD-10 chapters)",
            "conditions.parquet": "the chronic conditions of each patient, their onset visit and ICD-10 code",
            "codes.parquet": "the condition behind every diagnosis row",
            "condition_catalog.parquet": "every condition (ICD-10-CM category) with its prevalences",
            "reserved_codes.parquet": "the codes only flagged patients have "
            "(vocabulary, dotless code, condition)",
            "task_probabilities.parquet": "true label probabilities given the generator's latent state",
            "next_visit_probabilities.parquet": "per patient its 30 most probable next-visit categories "
            "(ICD10CM:<3 characters>, ICD9CM:<category>) of the last visit given the latent state, "
            "rank 1 the most probable; subject_id as in task_probabilities (eICU: approximate)",
        },
        "counts": counts,
        "reserved_codes": int(np.count_nonzero(space.cand_reserved)),
        "reserved_codes_excluded": dict(space.reserved_excluded),
        "task_probabilities": (
            "subject_id: as the reader numbers patients (MIMIC-IV: subject_id; eICU: dense rank of "
            "uniquepid). "
            "mortality: true P(label) (MIMIC-IV: death within 182 days of the last discharge; eICU: death in "
            "hospital, ignoring the 1 % of stays without a discharge status). "
            "chapters: true P(chapter i+1 among "
            "the last visit's codes), exact for MIMIC-IV; for eICU the same formula, an approximation (eICU "
            "writes a code's ICD-9 part, ICD-10 part, both or neither)."
        ),
    }


# ---------------------------------------------------------------- the tables other MIMIC-IV tools read
# Written after everything else from their own random stream (``cohort.EXTRA_TABLES_STREAM``), so the
# files above and ``ground_truth/`` are byte-identical with or without them. Layouts: MIMIC-IV v2.2.
MIMIC_EXTRA_COLUMNS = {
    "icu/icustays": "subject_id,hadm_id,stay_id,first_careunit,last_careunit,intime,outtime,los",
    "hosp/procedures_icd": "subject_id,hadm_id,seq_num,chartdate,icd_code,icd_version",
    "hosp/d_icd_procedures": "icd_code,icd_version,long_title",
    "hosp/prescriptions": (
        "subject_id,hadm_id,pharmacy_id,poe_id,poe_seq,order_provider_id,starttime,stoptime,drug_type,drug,"
        "formulary_drug_cd,gsn,ndc,prod_strength,form_rx,dose_val_rx,dose_unit_rx,form_val_disp,form_unit_disp,"
        "doses_per_24_hrs,route"
    ),
}
DAY_S = 86400
ICU = -1  # group of the catalogue entries drawn for ICU admissions; 0: any admission; 1-22: ICD-10 chapter
# ICD procedures: (ICD-9-CM vol. 3 code, its title, ICD-10-PCS code, its title, group)
PROCEDURES = [
    ("3893", "Venous catheterization, not elsewhere classified", "02HV33Z",
     "Insertion of Infusion Device into Superior Vena Cava, Percutaneous Approach", ICU),
    ("9671", "Continuous invasive mechanical ventilation for less than 96 consecutive hours", "5A1945Z",
     "Respiratory Ventilation, 24-96 Consecutive Hours", ICU),
    ("9672", "Continuous invasive mechanical ventilation for 96 consecutive hours or more", "5A1955Z",
     "Respiratory Ventilation, Greater than 96 Consecutive Hours", ICU),
    ("9604", "Insertion of endotracheal tube", "0BH17EZ",
     "Insertion of Endotracheal Airway into Trachea, Via Natural or Artificial Opening", ICU),
    ("9904", "Transfusion of packed cells", "30233N1",
     "Transfusion of Nonautologous Red Blood Cells into Peripheral Vein, Percutaneous Approach", 0),
    ("5794", "Insertion of indwelling urinary catheter", "0T9B70Z",
     "Drainage of Bladder with Drainage Device, Via Natural or Artificial Opening", 0),
    ("9921", "Injection of antibiotic", "3E03329",
     "Introduction of Other Anti-infective into Peripheral Vein, Percutaneous Approach", 1),
    ("9915", "Parenteral infusion of concentrated nutritional substances", "3E0436Z",
     "Introduction of Nutritional Substance into Central Vein, Percutaneous Approach", 2),
    ("0331", "Spinal tap", "009U3ZX", "Drainage of Spinal Canal, Percutaneous Approach, Diagnostic", 6),
    ("8703", "Computerized axial tomography of head", "B020ZZZ",
     "Computerized Tomography (CT Scan) of Brain", 6),
    ("4311", "Percutaneous [endoscopic] gastrostomy [PEG]", "0DH63UZ",
     "Insertion of Feeding Device into Stomach, Percutaneous Approach", 6),
    ("8872", "Diagnostic ultrasound of heart", "B246ZZZ", "Ultrasonography of Right and Left Heart", 9),
    ("8856", "Coronary arteriography using two catheters", "B2111ZZ",
     "Fluoroscopy of Multiple Coronary Arteries using Low Osmolar Contrast", 9),
    ("3722", "Left heart cardiac catheterization", "4A023N7",
     "Measurement of Cardiac Sampling and Pressure, Left Heart, Percutaneous Approach", 9),
    ("3607", "Insertion of drug-eluting coronary artery stent(s)", "027034Z",
     "Dilation of Coronary Artery, One Artery with Drug-eluting Intraluminal Device, "
     "Percutaneous Approach", 9),
    ("3611", "(Aorto)coronary bypass of one coronary artery", "021009W",
     "Bypass Coronary Artery, One Artery from Aorta with Autologous Venous Tissue, Open Approach", 9),
    ("3491", "Thoracentesis", "0W993ZZ", "Drainage of Right Pleural Cavity, Percutaneous Approach", 10),
    ("9390", "Non-invasive mechanical ventilation", "5A09357",
     "Assistance with Respiratory Ventilation, Less than 24 Consecutive Hours, "
     "Continuous Positive Airway Pressure", 10),
    ("4516", "Esophagogastroduodenoscopy [EGD] with closed biopsy", "0DB68ZX",
     "Excision of Stomach, Via Natural or Artificial Opening Endoscopic, Diagnostic", 11),
    ("5123", "Laparoscopic cholecystectomy", "0FT44ZZ",
     "Resection of Gallbladder, Percutaneous Endoscopic Approach", 11),
    ("4701", "Laparoscopic appendectomy", "0DTJ4ZZ",
     "Resection of Appendix, Percutaneous Endoscopic Approach", 11),
    ("5491", "Percutaneous abdominal drainage", "0W9G3ZZ",
     "Drainage of Peritoneal Cavity, Percutaneous Approach", 11),
    ("8622", "Excisional debridement of wound, infection, or burn", "0JBN0ZZ",
     "Excision of Right Lower Leg Subcutaneous Tissue and Fascia, Open Approach", 12),
    ("8154", "Total knee replacement", "0SRD0J9",
     "Replacement of Left Knee Joint with Synthetic Substitute, Cemented, Open Approach", 13),
    ("8151", "Total hip replacement", "0SR9019",
     "Replacement of Right Hip Joint with Metal on Polyethylene Synthetic Substitute, Cemented, "
     "Open Approach", 13),
    ("3995", "Hemodialysis", "5A1D70Z",
     "Performance of Urinary Filtration, Intermittent, Less than 6 Hours Per Day", 14),
    ("741", "Low cervical cesarean section", "10D00Z1",
     "Extraction of Products of Conception, Low, Open Approach", 15),
    ("7935", "Open reduction of fracture with internal fixation, femur", "0QS604Z",
     "Reposition Right Upper Femur with Internal Fixation Device, Open Approach", 19),
]  # fmt: skip
# Drugs: (drug, drug_type, prod_strength, dose_val_rx, dose_unit_rx, form_val_disp, form_unit_disp,
# doses_per_24_hrs, route, group). Names and strengths as MIMIC writes them; the codes written with them
# (formulary_drug_cd, gsn, ndc) are synthetic (see ``_drugs_table``), not real product codes.
DRUGS = [
    ("Sodium Chloride 0.9%  Flush", "MAIN", "10 mL Syringe", "3", "mL", "0.3", "SYR", 3, "IV", 0),
    ("Heparin", "MAIN", "5000 Units / mL- 1mL Vial", "5000", "UNIT", "1", "mL", 3, "SC", 0),
    ("Acetaminophen", "MAIN", "325mg Tablet", "650", "mg", "2", "TAB", 4, "PO/NG", 0),
    ("Docusate Sodium", "MAIN", "100mg Capsule", "100", "mg", "1", "CAP", 2, "PO", 0),
    ("Senna", "MAIN", "8.6 mg Tab", "8.6", "mg", "1", "TAB", 2, "PO", 0),
    ("Ondansetron", "MAIN", "2mg/mL-2mL", "4", "mg", "2", "mL", 3, "IV", 0),
    ("Pantoprazole", "MAIN", "40mg Tablet", "40", "mg", "1", "TAB", 1, "PO", 0),
    ("0.9% Sodium Chloride", "BASE", "1000mL Bag", "1000", "mL", "1000", "mL", 1, "IV", 0),
    ("Potassium Chloride", "ADDITIVE", "20mEq Premix", "20", "mEq", "1", "BAG", 1, "IV", 0),
    ("Magnesium Sulfate", "MAIN", "2 g / 50 mL Premix Bag", "2", "gm", "1", "BAG", 1, "IV", 0),
    ("Propofol", "MAIN", "1000mg/100mL Vial", "10", "mcg/kg/min", "0.1", "VIAL", 1, "IV DRIP", ICU),
    ("Norepinephrine", "MAIN", "4mg/250mL Premix Bag", "0.06", "mcg/kg/min", "0.1", "BAG", 1, "IV DRIP", ICU),
    ("Fentanyl Citrate", "MAIN", "2500mcg/50mL Premix", "50", "mcg/hr", "1", "BAG", 1, "IV DRIP", ICU),
    ("Vancomycin", "MAIN", "1g Vial", "1000", "mg", "1", "VIAL", 2, "IV", 1),
    ("Piperacillin-Tazobactam", "MAIN", "4.5 g Vial", "4.5", "g", "1", "VIAL", 3, "IV", 1),
    ("CeftriaXONE", "MAIN", "1g Vial", "1", "gm", "1", "VIAL", 1, "IV", 1),
    ("Morphine Sulfate", "MAIN", "2mg Syringe", "2", "mg", "1", "SYR", 6, "IV", 2),
    ("Dexamethasone", "MAIN", "4mg Tab", "4", "mg", "1", "TAB", 2, "PO", 2),
    ("Insulin", "MAIN", "100 Units / mL - 10 mL Vial", "0", "UNIT", "0", "mL", 4, "SC", 4),
    ("MetFORMIN (Glucophage)", "MAIN", "500 mg Tab", "500", "mg", "1", "TAB", 2, "PO", 4),
    ("Levothyroxine Sodium", "MAIN", "50mcg Tablet", "50", "mcg", "1", "TAB", 1, "PO", 4),
    ("Atorvastatin", "MAIN", "40mg Tablet", "40", "mg", "1", "TAB", 1, "PO", 4),
    ("Sertraline", "MAIN", "50mg Tablet", "50", "mg", "1", "TAB", 1, "PO", 5),
    ("Lorazepam", "MAIN", "0.5mg Tablet", "0.5", "mg", "1", "TAB", 2, "PO", 5),
    ("QUEtiapine Fumarate", "MAIN", "25mg Tablet", "25", "mg", "1", "TAB", 1, "PO", 5),
    ("LevETIRAcetam", "MAIN", "500mg Tablet", "500", "mg", "1", "TAB", 2, "PO", 6),
    ("Gabapentin", "MAIN", "300mg Capsule", "300", "mg", "1", "CAP", 3, "PO", 6),
    ("Furosemide", "MAIN", "20mg/2mL Vial", "40", "mg", "4", "mL", 2, "IV", 9),
    ("Metoprolol Tartrate", "MAIN", "25mg Tablet", "25", "mg", "1", "TAB", 2, "PO", 9),
    ("Aspirin", "MAIN", "81mg Tablet", "81", "mg", "1", "TAB", 1, "PO", 9),
    ("Lisinopril", "MAIN", "10mg Tablet", "10", "mg", "1", "TAB", 1, "PO", 9),
    ("Warfarin", "MAIN", "5mg Tablet", "5", "mg", "1", "TAB", 1, "PO", 9),
    ("Clopidogrel", "MAIN", "75mg Tablet", "75", "mg", "1", "TAB", 1, "PO", 9),
    ("Albuterol 0.083% Neb Soln", "MAIN", "2.5mg/3mL Neb", "1", "NEB", "1", "NEB", 4, "IH", 10),
    ("Ipratropium Bromide Neb", "MAIN", "0.5mg/2.5mL Neb", "1", "NEB", "1", "NEB", 4, "IH", 10),
    ("PredniSONE", "MAIN", "20mg Tablet", "40", "mg", "2", "TAB", 1, "PO", 10),
    ("Lactulose", "MAIN", "30mL UD", "30", "mL", "1", "UDCUP", 3, "PO", 11),
    ("Famotidine", "MAIN", "20mg Tablet", "20", "mg", "1", "TAB", 2, "PO", 11),
    ("OxyCODONE (Immediate Release)", "MAIN", "5mg Tablet", "5", "mg", "1", "TAB", 4, "PO", 13),
    ("Enoxaparin Sodium", "MAIN", "40mg / 0.4 mL Syringe", "40", "mg", "1", "SYR", 1, "SC", 13),
    ("Tamsulosin", "MAIN", "0.4mg Capsule", "0.4", "mg", "1", "CAP", 1, "PO", 14),
    ("Sodium Bicarbonate", "MAIN", "650mg Tablet", "650", "mg", "1", "TAB", 2, "PO", 14),
    ("Oxytocin", "MAIN", "30 Units / 500 mL Premix Bag", "30", "UNIT", "1", "BAG", 1, "IV", 15),
    ("HYDROmorphone (Dilaudid)", "MAIN", "2mg Tablet", "2", "mg", "1", "TAB", 6, "PO", 19),
]  # fmt: skip
CARE_UNITS = ["Medical Intensive Care Unit (MICU)", "Medical/Surgical Intensive Care Unit (MICU/SICU)",
              "Surgical Intensive Care Unit (SICU)", "Cardiac Vascular Intensive Care Unit (CVICU)",
              "Coronary Care Unit (CCU)", "Trauma SICU (TSICU)",
              "Neuro Surgical Intensive Care Unit (Neuro SICU)"]  # fmt: skip


@dataclass
class _Visits:
    """Per admission of one hospital: what the extra tables are drawn from."""

    subject: np.ndarray  # (V,) subject_id
    hadm: np.ndarray  # (V,) hadm_id
    admit: np.ndarray  # (V,) seconds
    disch: np.ndarray  # (V,) seconds
    icd9: np.ndarray  # (V,) bool: coded in ICD-9 (admitted before the switch)
    died: np.ndarray  # (V,) bool: died in this admission (deathtime = dischtime)
    first_row: np.ndarray  # (V,) first diagnosis row
    n_rows: np.ndarray  # (V,) diagnosis rows (>= 1)
    row_chapter: np.ndarray  # (R,) ICD-10 chapter of each diagnosis row's condition


def write_mimic_extra(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    space: CodeSpace,
    h: Hospital,
    switch: int,
    rng: np.random.Generator,
) -> dict[str, int]:
    """``icu/icustays``, ``hosp/procedures_icd``, ``hosp/d_icd_procedures`` and ``hosp/prescriptions``
    (MIMIC-IV v2.2 layouts, gzip CSV) for the admissions of ``h``; every row lies inside its admission and
    carries its ``subject_id`` and ``hadm_id``. ``rng`` is used by nothing else. Returns the row counts."""
    v = len(h.visit_patient)
    last = np.r_[h.visit_patient[1:] != h.visit_patient[:-1], True]
    n_rows = np.bincount(h.row_visit, minlength=v)
    vis = _Visits(
        subject=h.subject[h.visit_patient],
        hadm=h.visit_id,
        admit=h.admit,
        disch=h.disch,
        icd9=h.admit < switch,
        died=last & h.died_in_hospital[h.visit_patient],
        first_row=np.cumsum(n_rows) - n_rows,
        n_rows=n_rows,
        row_chapter=space.chapter[h.row_condition].astype(np.int64),
    )
    icu_visit = rng.random(v) < np.where(vis.died, 0.8, 0.2)
    counts = {"icu/icustays": _write_icustays(con, root, vis, icu_visit, rng)}
    counts.update(_write_procedures(con, root, vis, icu_visit, rng))
    counts["hosp/prescriptions"] = _write_prescriptions(con, root, vis, icu_visit, rng)
    return counts


def _chapter_draw(
    rng: np.random.Generator,
    vis: _Visits,
    row_visit: np.ndarray,
    icu: np.ndarray,
    groups: np.ndarray,
    p_icu: float,
    p_chapter: float,
) -> np.ndarray:
    """One catalogue index per row: for a row of an ICU admission an ICU entry with ``p_icu``; else with
    ``p_chapter`` an entry of the chapter of one of the admission's diagnoses (when the catalogue has
    one); else an entry for any admission (Zipf-skewed)."""
    n = len(row_visit)
    diag = vis.first_row[row_visit] + (rng.random(n) * vis.n_rows[row_visit]).astype(np.int64)
    chapter = vis.row_chapter[diag]
    u_icu, u_chapter, pick = rng.random(n), rng.random(n), rng.random(n)
    general = np.flatnonzero(groups == 0)
    out = general[_pick(rng, n, len(general)) - 1]
    by_chapter = [np.flatnonzero(groups == c) for c in range(23)]
    size = np.array([len(x) for x in by_chapter])
    offsets = np.concatenate([[0], np.cumsum(size)])
    flat = np.concatenate(by_chapter)
    tied = (u_chapter < p_chapter) & (size[chapter] > 0)
    out[tied] = flat[offsets[chapter[tied]] + (pick[tied] * size[chapter[tied]]).astype(np.int64)]
    icu_entries = np.flatnonzero(groups == ICU)
    to_icu = icu[row_visit] & (u_icu < p_icu)
    out[to_icu] = icu_entries[(pick[to_icu] * len(icu_entries)).astype(np.int64)]
    return out


def _write_icustays(
    con: duckdb.DuckDBPyConnection, root: Path, vis: _Visits, icu_visit: np.ndarray, rng: np.random.Generator
) -> int:
    """One ICU stay in each ICU admission, two (in its two halves) in 8 % of those longer than 3 days."""
    span = vis.disch - vis.admit
    two = icu_visit & (span > 3 * DAY_S) & (rng.random(len(span)) < 0.08)
    n_stays = icu_visit.astype(np.int64) + two
    stay_visit = np.repeat(np.arange(len(span)), n_stays)
    second = np.r_[False, stay_visit[1:] == stay_visit[:-1]]
    half = np.where(two[stay_visit], span[stay_visit] // 2, span[stay_visit])
    w0 = vis.admit[stay_visit] + np.where(second, half, 0)
    w1 = np.where(two[stay_visit] & ~second, w0 + half, vis.disch[stay_visit])
    s = len(stay_visit)
    intime = w0 + (rng.random(s) * 0.4 * (w1 - w0)).astype(np.int64)
    outtime = intime + ((0.2 + 0.75 * rng.random(s)) * (w1 - intime)).astype(np.int64)
    last_stay = np.r_[~second[1:], True]
    dies_in_icu = vis.died[stay_visit] & last_stay & (rng.random(s) < 0.7)
    outtime = np.where(dies_in_icu, vis.disch[stay_visit], np.maximum(outtime, intime + 3600))
    outtime = np.minimum(outtime, vis.disch[stay_visit])
    chapter = vis.row_chapter[vis.first_row[stay_visit]]
    first = (
        np.select(
            [chapter == 9, chapter == 6, chapter == 19],
            [3 + (rng.random(s) < 0.5), 6, 5],
            _pick(rng, s, 3) - 1,
        )
        + 1
    )
    moved = rng.random(s) < 0.12
    lastu = np.where(moved, _pick(rng, s, len(CARE_UNITS)), first)
    con.register(
        "icu",
        pa.table(
            {
                "subject_id": vis.subject[stay_visit],
                "hadm_id": vis.hadm[stay_visit],
                "stay_id": 30_000_000 + rng.choice(9_000_000, size=s, replace=False),
                "first": first,
                "lastu": lastu,
                "intime": intime,
                "outtime": outtime,
            }
        ),
    )
    _copy(
        con,
        "SELECT * FROM icu ORDER BY subject_id, intime",
        root / "icu" / "icustays.csv.gz",
        f"subject_id, hadm_id, stay_id, {_lit(CARE_UNITS)}[first] AS first_careunit, "
        f"{_lit(CARE_UNITS)}[lastu] "
        f"AS last_careunit, {_ts('intime')} AS intime, {_ts('outtime')} AS outtime, "
        "(outtime - intime) / 86400.0 AS los",
    )
    return s


def _write_procedures(
    con: duckdb.DuckDBPyConnection, root: Path, vis: _Visits, icu_visit: np.ndarray, rng: np.random.Generator
) -> dict[str, int]:
    """``procedures_icd`` (Poisson 1.2 per admission, 2.7 in ICU admissions; ICD-9-CM before the switch,
    ICD-10-PCS after, like the diagnoses) and the ``d_icd_procedures`` of the catalogue."""
    v = len(vis.hadm)
    n = rng.poisson(np.where(icu_visit, 2.7, 1.2))
    row_visit = np.repeat(np.arange(v), n)
    proc = _chapter_draw(rng, vis, row_visit, icu_visit, np.array([p[4] for p in PROCEDURES]), 0.45, 0.6)
    seq = np.arange(len(row_visit)) - np.repeat(np.cumsum(n) - n, n) + 1
    day = vis.admit[row_visit] + (rng.random(len(row_visit)) * (vis.disch - vis.admit)[row_visit]).astype(
        np.int64
    )
    k = len(PROCEDURES)
    con.register(
        "pcat",
        pa.table(
            {
                "code_idx": np.arange(2 * k, dtype=np.int64),
                "icd_code": [p[0] for p in PROCEDURES] + [p[2] for p in PROCEDURES],
                "icd_version": np.repeat(np.array([9, 10], dtype=np.int64), k),
                "long_title": [p[1] for p in PROCEDURES] + [p[3] for p in PROCEDURES],
            }
        ),
    )
    con.register(
        "pr",
        pa.table(
            {
                "subject_id": vis.subject[row_visit],
                "hadm_id": vis.hadm[row_visit],
                "seq_num": seq,
                "day": day,
                "code_idx": proc + np.where(vis.icd9[row_visit], 0, k),
            }
        ),
    )
    _copy(
        con,
        "SELECT * FROM pr JOIN pcat USING (code_idx) ORDER BY subject_id, hadm_id, seq_num",
        root / "hosp" / "procedures_icd.csv.gz",
        "subject_id, hadm_id, seq_num, strftime(make_timestamp(day * 1000000), '%Y-%m-%d') AS chartdate, "
        "icd_code, icd_version",
    )
    _copy(
        con,
        "SELECT * FROM pcat ORDER BY icd_code, icd_version",
        root / "hosp" / "d_icd_procedures.csv.gz",
        MIMIC_EXTRA_COLUMNS["hosp/d_icd_procedures"],
    )
    return {"hosp/procedures_icd": len(row_visit), "hosp/d_icd_procedures": 2 * k}


def _drugs_table() -> pa.Table:
    """The drug catalogue with synthetic codes: ``formulary_drug_cd`` from the name and strength, and
    ``gsn`` and ``ndc`` numbered in the catalogue's order (an NDC of labeler 99999, which names no
    product)."""
    cols = list(zip(*DRUGS, strict=True))
    k = len(DRUGS)
    fdc = [
        "".join(ch for ch in d[0] if ch.isalpha())[:4].upper()
        + "".join(ch for ch in d[2] if ch.isdigit())[:4]
        for d in DRUGS
    ]
    return pa.table(
        {
            "drug_idx": np.arange(k, dtype=np.int64),
            "drug_type": cols[1],
            "drug": cols[0],
            "formulary_drug_cd": fdc,
            "gsn": [f"{70001 + 17 * i:06d}" for i in range(k)],
            "ndc": [f"99999{i + 1:04d}01" for i in range(k)],
            "prod_strength": cols[2],
            "dose_val_rx": cols[3],
            "dose_unit_rx": cols[4],
            "form_val_disp": cols[5],
            "form_unit_disp": cols[6],
            "doses_per_24_hrs": np.array(cols[7], dtype=np.float64),
            "route": cols[8],
        }
    )


def _write_prescriptions(
    con: duckdb.DuckDBPyConnection, root: Path, vis: _Visits, icu_visit: np.ndarray, rng: np.random.Generator
) -> int:
    """``prescriptions``: 1 + Poisson 5 orders per admission (+4 in ICU admissions), each starting and
    stopping inside its admission; ``poe_seq`` numbers a patient's orders by start time."""
    v = len(vis.hadm)
    n = 1 + rng.poisson(np.where(icu_visit, 9.0, 5.0))
    row_visit = np.repeat(np.arange(v), n)
    r = len(row_visit)
    drug = _chapter_draw(rng, vis, row_visit, icu_visit, np.array([d[9] for d in DRUGS]), 0.35, 0.45)
    span = (vis.disch - vis.admit)[row_visit]
    start = vis.admit[row_visit] + (rng.random(r) ** 1.5 * 0.9 * span).astype(np.int64)
    start -= start % 60
    stop = np.minimum(start + (rng.exponential(2 * DAY_S, r)).astype(np.int64) + 3600, vis.disch[row_visit])
    stop = np.maximum(stop - stop % 60, start)
    subject, pharmacy = vis.subject[row_visit], 1 + rng.choice(99_000_000, size=r, replace=False)
    order = np.lexsort((pharmacy, start, subject))  # a patient's orders by start time
    seq = np.empty(r, dtype=np.int64)
    seq[order] = np.arange(r) - np.searchsorted(subject[order], subject[order]) + 1
    con.register("drugs", _drugs_table())
    con.register(
        "rx",
        pa.table(
            {
                "subject_id": subject,
                "hadm_id": vis.hadm[row_visit],
                "pharmacy_id": pharmacy,
                "drug_idx": drug,
                "start": start,
                "stop": stop,
                "seq": seq,
                "prov": rng.integers(10000, 99999, r),
                "no_prov": rng.random(r) < 0.03,
                "no_poe": rng.random(r) < 0.05,
            }
        ),
    )
    _copy(
        con,
        "SELECT * FROM rx JOIN drugs USING (drug_idx) ORDER BY subject_id, hadm_id, start, pharmacy_id",
        root / "hosp" / "prescriptions.csv.gz",
        "subject_id, hadm_id, pharmacy_id, "
        "CASE WHEN NOT no_poe THEN printf('%d-%d', subject_id, seq) END AS poe_id, "
        "CASE WHEN NOT no_poe THEN seq END AS poe_seq, CASE WHEN NOT no_prov THEN printf('P%05X', prov) END "
        f"AS order_provider_id, {_ts('start')} AS starttime, {_ts('stop')} AS stoptime, drug_type, drug, "
        "formulary_drug_cd, gsn, ndc, prod_strength, NULL AS form_rx, dose_val_rx, dose_unit_rx, "
        "form_val_disp, "
        "form_unit_disp, doses_per_24_hrs, route",
    )
    return r
