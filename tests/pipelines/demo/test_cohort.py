"""The synthetic cohort: exact MIMIC-IV / eICU layouts, ICD-9 -> ICD-10 switch, ground truth, determinism."""

from __future__ import annotations

import csv
import gzip

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipelines.data.readers.eicu import read_eicu
from pipelines.data.readers.mimic import read_mimic
from pipelines.demo.cohort import SWITCH, generate_cohort
from pipelines.demo.cohort_write import EICU_COLUMNS, MIMIC_COLUMNS


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return generate_cohort(tmp_path_factory.mktemp("cohort") / "c", n_patients=400, seed=3)


def _lines(path, n=None):
    with gzip.open(path, "rt", newline="") as f:
        return [line for _, line in zip(range(n or 10**9), f, strict=False)]


def test_exact_headers(cohort):
    for name, header in MIMIC_COLUMNS.items():
        assert _lines(cohort / "hosp" / f"{name}.csv.gz", 1) == [header + "\n"]
    for name, header in EICU_COLUMNS.items():
        assert _lines(cohort / "eicu" / f"{name}.csv.gz", 1) == [header + "\n"]


def test_standard_quoting_and_shifted_timestamps(cohort):
    for line in _lines(cohort / "hosp" / "d_icd_diagnoses.csv.gz"):
        row = next(csv.reader([line]))
        assert ('"' in line) == ("," in row[2] or '"' in row[2])  # quotes only where needed
    with gzip.open(cohort / "hosp" / "admissions.csv.gz", "rt", newline="") as f:
        rows = list(csv.DictReader(f))
    years = {int(r["admittime"][:4]) for r in rows}
    assert min(years) >= 2100 and max(years) <= 2200
    assert all(len(r["admittime"]) == 19 for r in rows)
    died = [r for r in rows if r["deathtime"]]
    assert died and all(r["hospital_expire_flag"] == "1" and r["discharge_location"] == "DIED" for r in died)


def test_icd9_before_the_switch_icd10_after(cohort):
    r = read_mimic(cohort)
    t = r.events.to_pydict()
    switch = np.datetime64(int(SWITCH), "s")
    before = np.array(t["visit_time"], dtype="datetime64[s]") < switch
    vocab = np.array(t["vocabulary"])
    assert (vocab[before] == "ICD9CM").all() and (vocab[~before] == "ICD10CM").all()
    assert before.any() and (~before).any()


def _truth(cohort, name, hospital="mimic-iv"):
    t = pq.read_table(cohort / "ground_truth" / name)
    return t.filter(pc.equal(t["hospital"], hospital))


def test_labels_match_the_ground_truth(cohort):
    r = read_mimic(cohort)
    truth = _truth(cohort, "patients.parquet")
    died = dict(zip(truth["subject_id"].to_pylist(), truth["died_6m"].to_pylist(), strict=True))
    labels = dict(zip(r.labels["subject_id"].to_pylist(), r.labels["mortality_6m"].to_pylist(), strict=True))
    assert labels == {k: died[k] for k in labels}
    assert 0.03 < np.mean(list(labels.values())) < 0.3


def test_ground_truth_explains_every_code(cohort):
    codes = _truth(cohort, "codes.parquet")
    assert codes.num_rows == len(_lines(cohort / "hosp" / "diagnoses_icd.csv.gz")) - 1
    catalog = pq.read_table(cohort / "ground_truth" / "condition_catalog.parquet")
    assert set(codes["condition"].to_pylist()) <= set(catalog["condition"].to_pylist())


def test_eicu_sibling_reads_and_mixes_versions(cohort):
    r = read_eicu(cohort / "eicu")
    assert r.labels.num_rows > 50
    assert set(r.events["vocabulary"].to_pylist()) == {"ICD9CM", "ICD10CM"}
    assert r.counts["empty_code_parts"] > 0  # stray commas are written on purpose


def test_same_seed_same_bytes(tmp_path):
    a = generate_cohort(tmp_path / "a", n_patients=50, seed=7)
    b = generate_cohort(tmp_path / "b", n_patients=50, seed=7)
    for rel in ("hosp/diagnoses_icd.csv.gz", "hosp/admissions.csv.gz", "eicu/diagnosis.csv.gz"):
        assert gzip.decompress((a / rel).read_bytes()) == gzip.decompress((b / rel).read_bytes())


def test_codes_restrict_the_universe_but_leave_some_unknown(tmp_path):
    import simple_icd_10_cm as cm

    universe = {
        ("ICD10CM", c) for c in cm.get_all_codes(with_dots=False) if c.startswith(("I", "E1")) and len(c) <= 4
    }
    universe |= {("ICD9CM", c) for c in ("4019", "25000", "4280", "41401")}
    out = generate_cohort(tmp_path / "u", n_patients=300, seed=1, codes=universe)
    ev = read_mimic(out).events
    pairs = list(zip(ev["vocabulary"].to_pylist(), ev["code"].to_pylist(), strict=True))
    known10 = [p in universe for p in pairs if p[0] == "ICD10CM"]
    assert 0.9 < np.mean(known10) < 1.0
