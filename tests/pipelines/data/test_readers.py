"""Readers against tiny fixtures in the real MIMIC-IV, eICU and MEDS layouts, and their bad-input errors."""

from __future__ import annotations

import gzip

import pytest
from ehr_fixtures import ADM_TAIL, _stay, write_eicu, write_meds, write_meds_admissions, write_mimic

from pipelines.data.readers.eicu import read_eicu
from pipelines.data.readers.meds import read_meds
from pipelines.data.readers.mimic import read_mimic
from pipelines.errors import InputFileError, MissingTableError


def _rows(t):
    return [(r["subject_id"], r["visit_index"], r["seq"], r["vocabulary"], r["code"]) for r in t.to_pylist()]


def test_mimic_orders_visits_by_admittime_and_codes_by_seq_num(tmp_path):
    r = read_mimic(write_mimic(tmp_path))
    assert _rows(r.events) == [
        (1, 0, 0, "ICD9CM", "4019"),
        (1, 0, 1, "ICD9CM", "25000"),
        (1, 1, 0, "ICD10CM", "I10"),
        (1, 1, 1, "ICD10CM", "E119"),
        (2, 0, 0, "ICD10CM", "J45909"),
        (2, 0, 1, "ICD10CM", "ZZZ99"),
        (3, 0, 0, "ICD10CM", "N1830"),
        (5, 0, 0, "ICD10CM", "E119"),
        (5, 1, 0, "ICD10CM", "I10"),
        (5, 2, 0, "ICD10CM", "J45909"),
        (6, 0, 0, "ICD10CM", "I10"),
        (6, 1, 0, "ICD10CM", "K219"),
    ]
    assert str(r.events["visit_time"][0].as_py()) == "2114-05-01 08:00:00"


def test_mimic_visit_order_is_admittime_not_hadm_id_nor_dischtime(tmp_path):
    """Patient 5: hadm_id order (501, 502, 503) and dischtime order (502, 503, 501) both disagree with
    admittime (503, 502, 501); 502 lies inside 503."""
    r = read_mimic(write_mimic(tmp_path))
    ev = [e for e in r.events.to_pylist() if e["subject_id"] == 5]
    assert [(e["visit_index"], e["code"]) for e in ev] == [(0, "E119"), (1, "I10"), (2, "J45909")]
    assert [str(e["visit_time"]) for e in ev] == [
        "2113-01-01 09:00:00",
        "2113-01-10 09:00:00",
        "2114-06-01 09:00:00",
    ]
    labels = {x["subject_id"]: x for x in r.labels.to_pylist()}
    assert labels[5]["chapters"] == [10]  # J45909 of the last admission by admittime (501)


def test_mimic_labels_mortality_and_last_visit_chapters(tmp_path):
    r = read_mimic(write_mimic(tmp_path))
    labels = {x["subject_id"]: x for x in r.labels.to_pylist()}
    assert labels[1]["mortality_6m"] is True  # dod 99 days after the last discharge
    assert labels[2]["mortality_6m"] is True  # deathtime on the last admission
    assert labels[3]["mortality_6m"] is False  # dod 200 days after
    assert labels[1]["chapters"] == [4, 9]  # E11.9, I10 of the last visit
    assert labels[2]["chapters"] == [10]  # ZZZ99 has no chapter


def test_mimic_icd9_chapters_come_through_the_gem(tmp_path):
    diagnoses = [
        [1, 102, 1, "4019", 9],
        [1, 102, 2, "25000", 9],
        [1, 102, 3, "V5861", 9],
        [1, 102, 4, "E8798", 9],
    ]
    r = read_mimic(write_mimic(tmp_path, diagnoses=diagnoses))
    assert r.labels.to_pylist()[0]["chapters"] == [4, 9, 20, 21]


def test_mimic_patient_without_diagnoses_is_dropped_and_counted(tmp_path):
    r = read_mimic(write_mimic(tmp_path))
    assert 4 not in r.labels["subject_id"].to_pylist()
    assert r.counts["dropped_no_diagnoses"] == 1
    assert r.counts["patients_in_source"] == 6


def test_mimic_missing_table_names_the_file(tmp_path):
    write_mimic(tmp_path)
    (tmp_path / "hosp" / "admissions.csv.gz").unlink()
    with pytest.raises(MissingTableError, match=r"admissions\.csv\.gz"):
        read_mimic(tmp_path)


def test_mimic_missing_column_names_file_and_expected_header(tmp_path):
    write_mimic(tmp_path)
    p = tmp_path / "hosp" / "diagnoses_icd.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write("subject_id,hadm_id,seq_num,icd_code\n1,102,1,I10\n")
    with pytest.raises(InputFileError) as e:
        read_mimic(tmp_path)
    msg = str(e.value)
    assert "diagnoses_icd.csv.gz" in msg and "icd_version" in msg
    assert "expected: subject_id,hadm_id,seq_num,icd_code,icd_version" in msg


def test_mimic_malformed_date_names_file_and_line(tmp_path):
    admissions = [
        [1, 101, "2114-05-01 08:00:00", "2114-05-03 12:00:00", None, *ADM_TAIL, 0],
        [1, 102, "2116-13-45 10:00", "2116-01-01 20:00:00", None, *ADM_TAIL, 0],
    ]
    write_mimic(tmp_path, admissions=admissions)
    with pytest.raises(InputFileError) as e:
        read_mimic(tmp_path)
    assert e.value.line == 3 and e.value.path.name == "admissions.csv.gz"
    assert "admittime" in str(e.value) and "2116-13-45" in str(e.value)


def test_eicu_splits_icd9code_lists_with_stray_spaces_and_empty_parts(tmp_path):
    r = read_eicu(write_eicu(tmp_path))
    assert _rows(r.events) == [
        # stay 11: unit 1 (Primary, then Other), then unit 2
        (1, 0, 0, "ICD9CM", "51881"),
        (1, 0, 1, "ICD10CM", "J9600"),
        (1, 0, 2, "ICD9CM", "4019"),
        (1, 0, 3, "ICD10CM", "I10"),
        (1, 0, 4, "ICD9CM", "5849"),
        (1, 0, 5, "ICD10CM", "N179"),
        # stay 12 (2015): J96.00 repeated in the visit is kept once
        (1, 1, 0, "ICD9CM", "0389"),
        (1, 1, 1, "ICD10CM", "A419"),
        (1, 1, 2, "ICD10CM", "J9600"),
        # 002-00003: stay 32 (2013) before stay 31 (2015)
        (3, 0, 0, "ICD10CM", "I10"),
        (3, 1, 0, "ICD10CM", "E119"),
    ]
    assert r.counts["unparseable_code_parts"] == 1 and r.counts["unparseable_examples"] == ["JUNK!"]
    assert r.counts["empty_code_parts"] >= 3
    assert r.counts["dropped_no_diagnoses"] == 1


def test_eicu_mortality_from_hospitaldischargestatus(tmp_path):
    r = read_eicu(write_eicu(tmp_path))
    lab, lab3 = r.labels.to_pylist()
    assert lab["mortality_6m"] is True and lab["chapters"] == [1, 10]
    assert lab3["mortality_6m"] is False and lab3["chapters"] == [4]  # E11.9 of stay 31 (2015), the last


def test_eicu_visit_order_is_discharge_year_not_stay_id(tmp_path):
    patient_rows = [
        _stay(901, 92, "002-00009", 2015, 1, -5, "Alive"),
        _stay(902, 91, "002-00009", 2016, 1, -5, "Alive"),
        _stay(903, 93, "002-00009", 2014, 2, -700, "Alive"),
        _stay(904, 93, "002-00009", 2014, 1, -5, "Alive"),
    ]
    diagnosis_rows = [
        [1, 901, "True", 5, "x", "I10", "Primary"], [2, 902, "True", 5, "x", "E11.9", "Primary"],
        [3, 903, "True", 5, "x", "N18.30", "Primary"], [4, 904, "True", 5, "x", "J45.909", "Primary"],
    ]  # fmt: skip
    r = read_eicu(write_eicu(tmp_path, patient=patient_rows, diagnosis=diagnosis_rows))
    # stay 93 (2014: unit 1 before unit 2), 92 (2015), 91 (2016): ids disagree with the years
    assert [(v, s, c) for _, v, s, _, c in _rows(r.events)] == [
        (0, 0, "J45909"),
        (0, 1, "N1830"),
        (1, 0, "I10"),
        (2, 0, "E119"),
    ]


def test_eicu_missing_column(tmp_path):
    write_eicu(tmp_path)
    with gzip.open(tmp_path / "patient.csv.gz", "wt") as f:
        f.write("patientunitstayid,uniquepid\n1,002-1\n")
    with pytest.raises(InputFileError, match="patienthealthsystemstayid"):
        read_eicu(tmp_path)


def test_meds_both_code_forms_visits_mortality_and_splits(tmp_path):
    r = read_meds(write_meds(tmp_path))
    assert _rows(r.events) == [
        (1, 0, 0, "ICD9CM", "4019"),
        (1, 0, 1, "ICD9CM", "25000"),
        (1, 1, 0, "ICD10CM", "E119"),
        (1, 1, 1, "ICD10CM", "I10"),
        (2, 0, 0, "ICD9CM", "51881"),
    ]
    labels = {x["subject_id"]: x for x in r.labels.to_pylist()}
    assert labels[1]["mortality_6m"] is True and labels[2]["mortality_6m"] is False
    assert labels[1]["given_split"] == "train" and labels[2]["given_split"] == "held_out"
    assert r.counts["dropped_no_diagnoses"] == 1


def test_meds_visit_order_is_time_not_hadm_id(tmp_path):
    r = read_meds(write_meds_admissions(tmp_path))
    # admission 901 (2111) before 900 (2112) before 902 (2113, with its untimed row joined by hadm_id)
    assert [(v, c) for _, v, _, _, c in _rows(r.events)] == [
        (0, "E119"),
        (1, "I10"),
        (2, "J45909"),
        (2, "N1830"),
    ]
    assert r.counts["diagnosis_rows_without_time"] == 1
    (lab,) = r.labels.to_pylist()
    assert lab["chapters"] == [10, 14]


def test_meds_missing_column_and_missing_data(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pytest.raises(MissingTableError):
        read_meds(tmp_path)
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"subject_id": [1], "code": ["ICD10CM/I10"]}), tmp_path / "data" / "0.parquet")
    with pytest.raises(InputFileError, match="time"):
        read_meds(tmp_path)
