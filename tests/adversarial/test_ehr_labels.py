"""Labels and ``last_visit_start`` describe the same visit (the sequence's last one), and MEDS sets coded in
SNOMED CT (``SNOMED/<sctid>``, OMOP style) tokenize to the program's concepts instead of being dropped."""

from __future__ import annotations

import json
from datetime import datetime as dt

import pyarrow.parquet as pq
import pytest
from ehr_fixtures import (
    meds_shard,
    mini_program,
    prepare_cli,
    write_meds_shards,
    write_mimic,
    written_datasets,
)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return mini_program(tmp_path_factory.mktemp("programs"))


@pytest.fixture(scope="module")
def concepts(program):
    t = pq.read_table(program / "concepts.parquet").to_pylist()
    return {(c["vocabulary"], c["code"]): c for c in t}, {c["concept_id"]: c for c in t}


def _dataset(out):
    (path,) = written_datasets(out)
    rows = pq.read_table(path / "patients.parquet").to_pylist()
    return {r["subject_id"]: r for r in rows}, json.loads((path / "manifest.json").read_text())


def test_all_unknown_last_admission_labels_the_previous_visit(program, concepts, tmp_path):
    """Patient 6: admission 601 (I10, known) then 602 (K219 only, unknown to the program; dod 30 days
    after it, 300 days after 601). The sequence ends with 601, so the labels are 601's."""
    res = prepare_cli("--mimic", write_mimic(tmp_path / "m"), out=tmp_path / "out", program=program)
    assert res.exit_code == 0, res.output
    rows, manifest = _dataset(tmp_path / "out")
    by_code, _ = concepts
    p6 = rows[6]
    assert p6["input_ids"] == [1, by_code[("ICD10CM", "I10")]["concept_id"]] and p6["last_visit_start"] == 1
    assert p6["chapters"] == [9]  # I10's chapter, not K21.9's (11)
    assert p6["mortality_6m"] is False  # dod is 300 days after 601's discharge
    assert manifest["counts"]["codes"]["patients_last_visit_unknown"] == 1
    assert "patients_last_visit_unknown 1" in res.output


def test_with_unknown_unk_the_last_admission_stays(program, tmp_path):
    res = prepare_cli(
        "--mimic", write_mimic(tmp_path / "m"), "--unknown", "unk", out=tmp_path / "out", program=program
    )
    assert res.exit_code == 0, res.output
    rows, manifest = _dataset(tmp_path / "out")
    p6 = rows[6]
    assert p6["input_ids"][p6["last_visit_start"] :] == [4]  # [UNK] for K219
    assert p6["chapters"] == [11] and p6["mortality_6m"] is True
    assert manifest["counts"]["codes"]["patients_last_visit_unknown"] == 0


def test_chapters_always_cover_the_known_codes_after_last_visit_start(program, concepts, tmp_path):
    prepare_cli("--mimic", write_mimic(tmp_path / "m"), out=tmp_path / "out", program=program)
    rows, _ = _dataset(tmp_path / "out")
    _, by_id = concepts
    for r in rows.values():
        last = r["input_ids"][r["last_visit_start"] :]
        assert set(r["segment_ids"][r["last_visit_start"] :]) == {max(r["segment_ids"])}
        assert {by_id[c]["chapter"] for c in last} <= set(r["chapters"]), r


SNOMED = {
    "9990104001": "E119",  # one token maps to it
    "9990108003": "J45909",  # J459 [9990108003, 9990109006] and J45909 [9990108003]: the fewest snomed_ids
    "9990106004": "E112",  # E112 and N083 both map to exactly it: the smallest concept_id
    "990031000124108": "M810",  # M810 and M818: the smallest concept_id
}


def test_meds_snomed_codes_tokenize_to_the_program_concepts(program, concepts, tmp_path):
    by_code, _ = concepts
    rows = [(1, dt(2110, 1, 1), f"SNOMED/{s}") for s in SNOMED]
    rows += [(2, dt(2110, 1, 1), "SNOMED/9990104001"), (2, dt(2111, 1, 1), "SNOMED/123456789")]
    rows += [
        (3, dt(2110, 1, 1), "SNOMED/9990112009"),
        (3, dt(2110, 2, 1), "ICD10/E11.9"),
        (3, dt(2110, 3, 1), "LAB//1//x"),
    ]
    root = write_meds_shards(tmp_path / "meds", {"0.parquet": meds_shard(rows)})
    res = prepare_cli("--meds", root, out=tmp_path / "out", program=program)
    assert res.exit_code == 0, res.output
    ds, manifest = _dataset(tmp_path / "out")
    assert ds[1]["input_ids"] == [1] + [by_code[("ICD10CM", c)]["concept_id"] for c in SNOMED.values()]
    assert ds[1]["chapters"] == [4, 10, 13]  # from the mapped ICD-10-CM codes
    # subject 2's last visit holds only an unmapped concept: labelled by its first visit, counted
    assert ds[2]["input_ids"] == [1, by_code[("ICD10CM", "E119")]["concept_id"]] and ds[2]["chapters"] == [4]
    assert ds[3]["input_ids"] == [1, by_code[("ICD10CM", "I10")]["concept_id"]]
    codes, reader = manifest["counts"]["codes"], manifest["counts"]["reader"]
    assert manifest["counts"]["patients"]["dropped"] == {"no_diagnoses": 0, "no_known_codes": 0}
    assert codes["snomed_code_rows"] == 7 and codes["snomed_code_rows_mapped"] == 6
    assert manifest["unknown_codes"] == [
        {"vocabulary": "SNOMED", "code": "123456789", "occurrences": 1, "patients": 1}
    ]
    assert reader["unrecognised_diagnosis_codes"] == 1 and reader["non_diagnosis_prefixes"] == {
        "ICD10": 1,
        "LAB": 1,
    }
    assert "snomed_code_rows 7, snomed_code_rows_mapped 6" in res.output
    assert "warning   unrecognised_diagnosis_codes 1: e.g. 'ICD10/E11.9' (1 rows)" in res.output
    assert "non_diagnosis_prefixes.LAB 1" in res.output


def test_meds_snomed_only_set_keeps_every_subject(program, tmp_path):
    """The issue's OMOP-style set: every subject coded in SNOMED CT only; none may become no_diagnoses."""
    rows = [(s, dt(2110, 1, s), f"SNOMED/{sct}") for s, sct in enumerate(SNOMED, start=1)]
    root = write_meds_shards(tmp_path / "meds", {"0.parquet": meds_shard(rows)})
    res = prepare_cli("--meds", root, out=tmp_path / "out", program=program)
    assert res.exit_code == 0, res.output
    ds, manifest = _dataset(tmp_path / "out")
    assert sorted(ds) == [1, 2, 3, 4] and manifest["counts"]["patients"]["kept"] == 4
