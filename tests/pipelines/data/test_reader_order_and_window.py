"""Reader edge cases the fixtures did not pin down (issue 35): eICU unit stays tied on unitvisitnumber
are taken by hospitaladmitoffset, and the MEDS mortality window's edges (0 and 182 days) are inside it;
the MIMIC-IV window ends at day 182 after the last discharge."""

from __future__ import annotations

from datetime import datetime as dt
from datetime import timedelta

from ehr_fixtures import _stay, adm, meds_shard, write_eicu, write_meds_shards, write_mimic

from pipelines.data.readers.eicu import read_eicu
from pipelines.data.readers.meds import read_meds
from pipelines.data.readers.mimic import read_mimic


def _codes(events) -> list[tuple[int, int, int, str]]:
    return [(e["subject_id"], e["visit_index"], e["seq"], e["code"]) for e in events.to_pylist()]


def test_eicu_unit_stays_of_one_visit_follow_the_admission_offset(tmp_path):
    """Bug guarded: eICU visits ordered by another key than the admission offset: unit stays of one
    hospital stay with the same unitvisitnumber go by hospitaladmitoffset, least negative first (the
    unit entered first), before priority, diagnosisoffset and diagnosisid; hospital stays of one
    discharge year go by stay id."""
    patient = [
        # hospital stay 41: unit stay 411 began 600 min after hospital admission, 412 after 30 min
        _stay(411, 41, "002-00010", 2014, 1, -600, "Alive"),
        _stay(412, 41, "002-00010", 2014, 1, -30, "Alive"),
        # hospital stays 52 and 51, both discharged in 2015: 51 first (stay ids and offsets disagree)
        _stay(521, 52, "002-00011", 2015, 1, -5, "Alive"),
        _stay(529, 51, "002-00011", 2015, 1, -500, "Alive"),
    ]
    diagnosis = [
        # the later unit stay has the better priority, the earlier offset and the smaller id
        [1, 411, "True", 5, "cardiovascular|hypertension", "I10", "Primary"],
        [2, 412, "True", 50, "endocrine|diabetes", "E11.9", "Other"],
        [3, 521, "True", 5, "pulmonary|asthma", "J45.909", "Primary"],
        [4, 529, "True", 50, "renal|ckd", "N18.30", "Primary"],
    ]
    r = read_eicu(write_eicu(tmp_path, patient=patient, diagnosis=diagnosis))
    assert _codes(r.events) == [
        (1, 0, 0, "E119"),  # unit stay 412 (offset -30) first
        (1, 0, 1, "I10"),
        (2, 0, 0, "N1830"),  # hospital stay 51
        (2, 1, 0, "J45909"),
    ]


def test_meds_mortality_window_includes_day_0_and_day_182(tmp_path):
    """Bug guarded: the MEDS mortality window boundary moved by one (``<`` for ``<=`` or the reverse,
    at either end): a MEDS_DEATH 0 to 182 days after the labelled visit is mortality_6m, one at -1 or
    183 days is not (docs/dataset-format.md: "a MEDS_DEATH event falls 0-182 days after")."""
    visit = dt(2110, 1, 5, 12, 0)
    days = {1: -1, 2: 0, 3: 1, 4: 181, 5: 182, 6: 183}
    rows = []
    for subject, d in days.items():
        rows += [
            (subject, visit, "DIAGNOSIS//ICD//10//I10"),
            (subject, visit + timedelta(days=d), "MEDS_DEATH"),
        ]
    rows.append((7, visit, "DIAGNOSIS//ICD//10//E119"))  # no death
    r = read_meds(write_meds_shards(tmp_path, {"train/0.parquet": meds_shard(rows)}))
    labels = {x["subject_id"]: x["mortality_6m"] for x in r.labels.to_pylist()}
    assert labels == {1: False, 2: True, 3: True, 4: True, 5: True, 6: False, 7: False}
    assert {v["subject_id"]: v["mortality_6m"] for v in r.visits.to_pylist()} == labels


def test_mimic_mortality_window_includes_day_182_after_the_last_discharge(tmp_path):
    """Bug guarded: the MIMIC-IV mortality window's far edge moved by one (``<`` for ``<=``): a ``dod``
    exactly MORTALITY_DAYS (182) days after the dischtime (as a date) of the patient's last admission is
    mortality_6m, one 183 days after is not. Each patient's earlier admission (discharged months before)
    and the last admission's admittime (19 days before its discharge) are too far from the dod for the
    labelled visit to pass by another reference."""
    from pipelines.data.readers.common import MORTALITY_DAYS

    assert MORTALITY_DAYS == 182
    disch = dt(2116, 6, 20, 18, 0)
    days = {1: MORTALITY_DAYS, 2: MORTALITY_DAYS + 1, 3: MORTALITY_DAYS - 1}
    patients, admissions, diagnoses = [], [], []
    for s, d in days.items():
        dod = (disch + timedelta(days=d)).strftime("%Y-%m-%d")
        patients.append([s, "F", 60, 2115, "2014 - 2016", dod])
        admissions += [
            adm(s, 10 * s, "2116-01-01 09:00:00", "2116-01-05 09:00:00"),
            adm(s, 10 * s + 1, "2116-06-01 08:00:00", disch.strftime("%Y-%m-%d %H:%M:%S")),
        ]
        diagnoses += [[s, 10 * s, 1, "E119", 10], [s, 10 * s + 1, 1, "I10", 10]]
    r = read_mimic(write_mimic(tmp_path, patients=patients, admissions=admissions, diagnoses=diagnoses))
    labels = {x["subject_id"]: x["mortality_6m"] for x in r.labels.to_pylist()}
    assert labels == {1: True, 2: False, 3: True}
    visits = {(v["subject_id"], v["visit_index"]): v["mortality_6m"] for v in r.visits.to_pylist()}
    assert visits == {(1, 0): False, (1, 1): True, (2, 0): False, (2, 1): False, (3, 0): False, (3, 1): True}
