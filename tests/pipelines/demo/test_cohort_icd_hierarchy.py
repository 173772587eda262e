"""The demo cohort's ground truth comes from the ontology's part of a program only: the ICD classification
nodes a program binds its tokens to (``icd`` atoms, ``icd_hierarchy`` relations) change neither the twins
nor the severities, so the cohort is byte-identical with and without ``--no-icd-hierarchy``."""

from __future__ import annotations

import gzip

import pyarrow.parquet as pq
import pytest

from pipelines.demo.cohort import generate_cohort
from pipelines.demo.cohort_program import ontology_edges, read_program


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    from ontology_compiler import compile_ontology
    from pipelines.demo.release import build_demo_release

    root = tmp_path_factory.mktemp("demo_hierarchy")
    release = build_demo_release(root / "demo_icd10cm_small", size="small", seed=0)
    on = compile_ontology(release, out=root / "programs")
    off = compile_ontology(release, out=root / "programs", icd_hierarchy=False)
    return on, off


def test_the_hierarchy_is_there_and_left_out_of_the_truth(programs):
    on, off = programs
    assert on.manifest["counts"]["atoms_by_kind"]["icd"] > 0 and on.program_id != off.program_id
    tables = [
        {n: pq.read_table(r.path / f"{n}.parquet") for n in ("edges", "relations", "atoms")} for r in programs
    ]
    kept_on, kept_off = (ontology_edges(t["edges"], t["relations"], t["atoms"]) for t in tables)
    order = [(c, "ascending") for c in ("concept_id", "relation_id", "atom_id")]
    edges_on, edges_off = (k[0].sort_by(order) for k in (kept_on, kept_off))
    assert edges_on.equals(edges_off) and edges_on.num_rows < on.manifest["counts"]["edges"]
    assert kept_on[1].equals(kept_off[1].select(kept_on[1].column_names))
    for seed in (0, 3):
        assert read_program(on.path, seed) == read_program(off.path, seed)


def test_the_cohort_is_the_same_with_and_without_the_hierarchy(programs, tmp_path):
    on, off = programs
    a = generate_cohort(tmp_path / "a", n_patients=300, seed=4, codes=on.path)
    b = generate_cohort(tmp_path / "b", n_patients=300, seed=4, codes=off.path)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        x, y = (a / rel).read_bytes(), (b / rel).read_bytes()
        if rel.suffix == ".gz":
            x, y = gzip.decompress(x), gzip.decompress(y)
        assert x == y, rel
