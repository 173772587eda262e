"""Scoring new codes: probes, tie-aware MLM ranks against a brute-force reference, per-patient hits, neighbour
relatedness, twins and the twin-matched reference sample, and the demo cohort copy without the carriers of
given codes."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from hrr_kernel import load_program
from model import HRRBert, preset
from pipelines.data.sequences import Sequences
from pipelines.ontology.newcodes import (
    Probes,
    has_twin,
    history_holds,
    matched_sample,
    mlm_probes,
    mlm_ranks,
    new_code_rows,
    patient_hits,
)

FIXTURE_RELEASE = Path(__file__).resolve().parents[2] / "data" / "snomed_mini_20220531"


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    from ontology_compiler import compile_ontology

    return load_program(compile_ontology(FIXTURE_RELEASE, out=tmp_path_factory.mktemp("programs")).path)


def seqs_of(ids: list[list[int]], subjects: list[int]) -> Sequences:
    t = max(len(r) for r in ids)
    x = torch.zeros(len(ids), t, dtype=torch.int64)
    att = torch.zeros(len(ids), t, dtype=torch.int64)
    for i, r in enumerate(ids):
        x[i, : len(r)] = torch.tensor(r)
        att[i, : len(r)] = 1
    return Sequences(x, torch.zeros_like(x), att, torch.tensor(subjects), None)


def test_probes_history_and_patient_hits():
    s = seqs_of([[1, 7, 8, 7], [1, 9], [1, 8, 0]], [10, 11, 12])
    s.attention_mask[2, 2] = 0  # padding never counts, even when it holds a code of interest
    assert history_holds(s, np.array([7])).tolist() == [True, False, False]
    p = mlm_probes(s, np.array([7, 8]))
    assert list(zip(p.row.tolist(), p.col.tolist(), p.code.tolist(), strict=True)) == [
        (0, 1, 7),
        (0, 2, 8),
        (0, 3, 7),
        (2, 1, 8),
    ]
    assert p.subject_id.tolist() == [10, 10, 10, 12]
    subjects, share = patient_hits(p, np.array([0.0, 20.0, 3.5, 9.0]), k=10)
    assert subjects.tolist() == [10, 12] and share.tolist() == pytest.approx([2 / 3, 1.0])


def test_mlm_ranks_count_ties_half_and_match_brute_force(program):
    torch.manual_seed(0)
    model = HRRBert(preset("tiny", mode="unstructured"), program).eval()
    a, b, c = 6, 7, 8
    with torch.no_grad():  # three codes with one vector and one bias: a three-way tie
        model.embeddings.token.table[b] = model.embeddings.token.table[a]
        model.embeddings.token.table[c] = model.embeddings.token.table[a]
        model.mlm.bias[b] = model.mlm.bias[c] = model.mlm.bias[a]
    s = seqs_of([[1, a, 9, 10], [1, 11, b, 12, 9]], [1, 2])
    probes = mlm_probes(s, np.array([a, b, 9]))
    ranks = mlm_ranks(model, s, probes, batch_size=2)
    mask_id = program.special_id("[MASK]")
    for q in range(len(probes)):
        r, col = int(probes.row[q]), int(probes.col[q])
        x = s.input_ids[r : r + 1].clone()
        x[0, col] = mask_id
        mlm = torch.zeros_like(x, dtype=torch.bool)
        mlm[0, col] = True
        with torch.no_grad():
            logits = model(x, s.segment_ids[r : r + 1], s.attention_mask[r : r + 1], mlm_mask=mlm)[0]
        true = logits[probes.code[q]]
        expect = float((logits > true).sum()) + (float((logits == true).sum()) - 1) / 2
        assert ranks[q] == pytest.approx(expect)
    tied = [q for q in range(len(probes)) if probes.code[q] in (a, b)]
    assert all(ranks[q] % 1 == 0 for q in tied)  # two others tie: +1 each half, a whole number
    assert isinstance(probes, Probes)


def test_new_code_rows_are_the_tokens_the_old_program_lacks(program, tmp_path):
    from tests.helpers.synthetic_program import write_program

    edges = (np.array([0, 1, 2]), np.array([0, 0, 0]), np.array([0, 1, 2]))
    old = load_program(
        write_program(
            tmp_path / "old",
            n_concepts=3,
            n_atoms=3,
            n_relations=3,
            edges=edges,
            concept_codes=["A01", "B02", "C03"],
        )
    )
    new = load_program(
        write_program(
            tmp_path / "new",
            n_concepts=4,
            n_atoms=3,
            n_relations=3,
            edges=(np.array([0, 1, 2, 3]), np.zeros(4, int), np.array([0, 1, 2, 2])),
            concept_codes=["B02", "Z99", "A01", "C031"],
        )
    )
    assert new_code_rows(old, new).tolist() == [1, 3]


@pytest.mark.parametrize("ehr_name", ["ehr", "ehr [1] q?*"])  # glob characters name this folder only
def test_cohort_without_drops_every_carrier(tmp_path, ehr_name):
    from pipelines.demo.carry_study import cohort_without

    hosp = tmp_path / ehr_name / "hosp"
    hosp.mkdir(parents=True)
    tables = {
        "patients": "subject_id,gender\n1,F\n2,M\n3,F\n",
        "admissions": "subject_id,hadm_id\n1,10\n2,20\n3,30\n",
        "diagnoses_icd": "subject_id,hadm_id,seq_num,icd_code,icd_version\n1,10,1,A01,10\n2,20,1,Z99,10\n"
        "3,30,1,Z99,9\n3,30,2,B02,10\n",
    }
    for name, text in tables.items():
        with gzip.open(hosp / f"{name}.csv.gz", "wt") as f:
            f.write(text)
    codes = pa.table({"vocabulary": ["ICD10CM"], "code": ["Z99"]})
    out = cohort_without(tmp_path / ehr_name, codes, tmp_path / "before")
    read = {n: gzip.open(out / "hosp" / f"{n}.csv.gz", "rt").read().splitlines() for n in tables}
    assert [r.split(",")[0] for r in read["patients"][1:]] == ["1", "3"]  # 3 has Z99 only as ICD-9
    assert read["diagnoses_icd"][0] == "subject_id,hadm_id,seq_num,icd_code,icd_version"
    assert len(read["diagnoses_icd"]) == 4 and len(read["admissions"]) == 3
    assert not list(tmp_path.glob(".tmp-*"))


def test_is_a_parents_follow_the_programs_graph(program, tmp_path):
    import pyarrow.parquet as pq

    from pipelines.ontology.carry import IS_A, is_a_parents

    parents = is_a_parents(program)
    assert len(parents) == program.n_atoms
    rel = pq.read_table(program.path / "graph" / "snomed_relationships.parquet").to_pylist()
    atom = {
        k: i
        for i, (k, kind) in enumerate(zip(program.atom_keys, program.atom_kinds, strict=True))
        if kind == "concept"
    }
    expect = {
        (atom[str(r["source_id"])], atom[str(r["destination_id"])])
        for r in rel
        if r["type_id"] == IS_A and str(r["source_id"]) in atom and str(r["destination_id"]) in atom
    }
    assert expect and {(c, p) for c, ps in enumerate(parents) for p in ps} == expect
    assert all(not ps for ps, kind in zip(parents, program.atom_kinds, strict=True) if kind != "concept")


def test_has_twin_counts_other_codes_on_a_shared_concept():
    from types import SimpleNamespace

    # codes 0 and 1 share concept 10 (an ICD-9 / ICD-10 pair); 2 has 20 alone; 3 has 30 and 10; 4 is unmapped
    ont = SimpleNamespace(snomed=[{10}, {10}, {20}, {30, 10}, set()])
    among = np.arange(5)
    assert has_twin(ont, among, among).tolist() == [True, True, False, True, False]
    # a query outside ``among`` has a twin when any code of ``among`` shares its concept
    assert has_twin(ont, np.array([0, 2]), np.array([1, 2])).tolist() == [True, False]
    assert has_twin(ont, np.array([0]), np.array([0, 2])).tolist() == [False]  # alone among those codes


def test_matched_sample_reproduces_the_share_of_each_stratum():
    rng = np.random.default_rng(0)
    flags = np.array([True] * 3 + [False] * 7)
    pool = np.arange(100, 200)
    pool_flags = pool % 4 == 0  # 25 with the flag, 75 without
    got = matched_sample(flags, pool, pool_flags, np.random.default_rng(5))
    assert got.size == 10 and np.all(np.diff(got) > 0) and set(got) <= set(pool)
    assert int((got % 4 == 0).sum()) == 3
    again = matched_sample(flags, pool, pool_flags, np.random.default_rng(5))
    assert np.array_equal(got, again)
    # a stratum that runs short gives what it has
    short = matched_sample(np.array([True] * 30), pool, pool_flags, rng)
    assert short.size == 25 and np.all(short % 4 == 0)
