"""Contract: the compiler's program files load in the kernel, and compose matches the naive reference.

The kernel never imports the compiler; this test is the one place where both meet.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from hrr_naive import naive_matrix

from hrr_kernel import HashMismatchError, HRREmbedding, compose, load_program
from ontology_compiler import compile_ontology

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("contract")
    m = DATA / "mapping_sources"
    plain = compile_ontology(DATA / "snomed_mini_20220531", out=out)
    mapped = compile_ontology(
        DATA / "snomed_mini_20220531",
        out=out,
        omop=m / "omop",
        nlm_icd9=m / "nlm",
        gem=m / "gem",
        codes=m / "d_icd_diagnoses.csv",
        fallback="icd",
    )
    return plain, mapped


@pytest.mark.parametrize("which", [0, 1])
def test_compiled_program_loads_and_composes_exactly(programs, which):
    result = programs[which]
    p = load_program(result.path)
    assert p.program_id == result.program_id
    assert (p.n_concepts, p.n_atoms, p.n_relations, p.n_edges) == (
        result.manifest["counts"]["concepts"],
        result.manifest["counts"]["atoms"],
        result.manifest["counts"]["relations"],
        result.manifest["counts"]["edges"],
    )
    e = pq.read_table(result.path / "edges.parquet")
    edges = (e["concept_id"].to_pylist(), e["relation_id"].to_pylist(), e["atom_id"].to_pylist())
    g = torch.Generator().manual_seed(which)
    for d in (16, 15):
        a = torch.randn(p.n_atoms, d, dtype=torch.float64, generator=g)
        r = torch.randn(p.n_relations, d, dtype=torch.float64, generator=g)
        ref = naive_matrix(p.n_concepts, edges, a.numpy(), r.numpy())
        got = compose(p, a, r).numpy()
        assert np.abs(got - ref).max() < 1e-10 * max(1.0, np.abs(ref).max())


def test_embedding_over_a_compiled_program(programs):
    p = load_program(programs[1].path)
    emb = HRREmbedding(p, dim=32, mode="base", normalize=True)
    m = emb.matrix()
    assert m.shape == (p.n_concepts, 32)
    norms = m.norm(dim=1)
    assert torch.allclose(norms[norms > 0], torch.ones_like(norms[norms > 0]), atol=1e-5)
    ids = torch.tensor([[1, 5, 6, 7], [1, 8, 0, 0]])
    assert torch.allclose(emb(ids), m[ids], atol=1e-6)


def test_tampered_program_is_refused(programs, tmp_path):
    import shutil

    dst = tmp_path / "p"
    shutil.copytree(programs[0].path, dst)
    f = dst / "edges.parquet"
    f.write_bytes(f.read_bytes() + b"\0")
    with pytest.raises(HashMismatchError):
        load_program(dst)


def test_special_tokens_mirror_the_compiler(programs):
    """The kernel's copy of the special-token list is the compiler's, and the ids resolve in its programs."""
    from hrr_kernel import SPECIAL_TOKENS
    from ontology_compiler import SPECIAL_TOKENS as COMPILER_SPECIAL_TOKENS

    assert SPECIAL_TOKENS == tuple(COMPILER_SPECIAL_TOKENS)
    p = load_program(programs[0].path)
    assert [p.special_id(t) for t in SPECIAL_TOKENS] == [p.concept_codes.index(t) for t in SPECIAL_TOKENS]
