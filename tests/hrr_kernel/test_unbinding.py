"""hrr_kernel.unbinding: unbinding relations, explaining a vector, unbinding recall, composing queries."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hrr_kernel import (
    HRREmbedding,
    ShapeError,
    bind,
    compose,
    compose_query,
    explain_vector,
    hrr_vectors,
    load_program,
    project_unitary,
    unbind,
    unbind_pairs,
    unbind_relations,
    unbinding_recall,
)
from tests.helpers.synthetic_program import write_program


def _vectors(n_atoms: int, n_relations: int, d: int, seed: int = 0, unitary: bool = True):
    g = torch.Generator().manual_seed(seed)
    atoms = torch.randn(n_atoms, d, dtype=torch.float64, generator=g) / math.sqrt(d)
    relations = torch.randn(n_relations, d, dtype=torch.float64, generator=g) / math.sqrt(d)
    return atoms, project_unitary(relations) if unitary else relations


def _program(tmp_path, edges, n_concepts, n_atoms, n_relations, name="p"):
    c, r, a = (np.asarray(x) for x in zip(*edges, strict=True))
    root = write_program(
        tmp_path / name, n_concepts=n_concepts, n_atoms=n_atoms, n_relations=n_relations, edges=(c, r, a)
    )
    return load_program(root)


def test_unbind_relations_is_unbind_of_every_pair():
    atoms, relations = _vectors(6, 3, 16)
    out = unbind_relations(atoms, relations)
    assert out.shape == (6, 3, 16)
    for i in range(6):
        for j in range(3):
            torch.testing.assert_close(out[i, j], unbind(atoms[i], relations[j]), atol=1e-12, rtol=0)
    pairs = unbind_pairs(atoms[:3], relations, torch.tensor([2, 0, 2]), exact=True)
    torch.testing.assert_close(pairs[1], unbind(atoms[1], relations[0], exact=True), atol=1e-12, rtol=0)


def test_unbind_exact_inverts_a_unitary_binding():
    atoms, relations = _vectors(4, 2, 15)
    bound = bind(atoms, relations[1])
    torch.testing.assert_close(
        unbind_relations(bound, relations, exact=True)[:, 1], atoms, atol=1e-12, rtol=0
    )


def test_compose_query_equals_the_composed_row(tmp_path):
    edges = [(0, 0, 1), (0, 2, 3), (0, 2, 4), (1, 1, 0), (2, 0, 2), (2, 1, 4)]
    p = _program(tmp_path, edges, 3, 5, 3)
    atoms, relations = _vectors(5, 3, 17, unitary=False)
    composed = compose(p, atoms, relations)
    torch.testing.assert_close(
        compose_query(atoms, relations, [(0, 1), (2, 3), (2, 4)]), composed[0], atol=1e-14, rtol=0
    )
    torch.testing.assert_close(
        compose_query(atoms, relations, [(1, 4), (0, 2)]), composed[2], atol=1e-14, rtol=0
    )
    assert torch.equal(compose_query(atoms, relations, []), torch.zeros(17, dtype=torch.float64))
    with pytest.raises(ShapeError, match=r"atom ids must lie in \[0, 4\]"):
        compose_query(atoms, relations, [(0, 5)])


def test_explain_vector_matches_brute_force():
    atoms, relations = _vectors(30, 4, 128, seed=3)
    vector = bind(relations[0], atoms[7]) + bind(relations[2], atoms[11]) + bind(relations[2], atoms[12])
    values, indices = explain_vector(vector, atoms, relations, [2, 0, 3], k=4)
    assert values.shape == indices.shape == (3, 4)
    for row, j in enumerate([2, 0, 3]):
        q = torch.fft.irfft(torch.fft.rfft(vector) * torch.fft.rfft(relations[j]).conj(), n=128)
        sims = torch.stack([torch.dot(q, a) / (q.norm() * a.norm()) for a in atoms])
        ref_v, ref_i = torch.sort(sims, descending=True)
        torch.testing.assert_close(values[row], ref_v[:4], atol=1e-12, rtol=0)
        assert indices[row].tolist() == ref_i[:4].tolist()
    assert indices[1, 0] == 7 and set(indices[0, :2].tolist()) == {11, 12}


def test_single_edge_relations_are_recovered_at_top1(tmp_path):
    # 8 concepts, each with one edge on each of 3 relations (atoms drawn from 40)
    rng = np.random.default_rng(0)
    edges = [(c, j, int(rng.integers(40))) for c in range(8) for j in range(3)]
    p = _program(tmp_path, edges, 8, 40, 3)
    atoms, relations = _vectors(40, 3, 256)
    rows = torch.arange(8)
    res = unbinding_recall(p, compose(p, atoms, relations), atoms, relations, rows, ks=(1, 5))
    assert res.edges == 24 and res.rows == res.rows_with_edges == 8
    assert res.recall == {1: 1.0, 5: 1.0}
    assert res.per_kind["is_a"] == {"edges": 8, "recall": {1: 1.0, 5: 1.0}}
    assert set(res.per_kind) == {"is_a", "description", "identity"}
    assert torch.equal(res.ranks, torch.zeros(24, dtype=torch.int64))
    exact = unbinding_recall(p, compose(p, atoms, relations), atoms, relations, rows, exact=True)
    assert exact.recall == {1: 1.0, 5: 1.0} and exact.exact


def test_recall_falls_as_the_superposition_grows(tmp_path):
    # concept c binds m_c atoms to relation 0: m = 1, 2, 4, 8, 16, 32
    rng = np.random.default_rng(1)
    sizes = [1, 2, 4, 8, 16, 32]
    edges = [(c, 0, int(a)) for c, m in enumerate(sizes) for a in rng.choice(200, m, replace=False)]
    p = _program(tmp_path, edges, len(sizes), 200, 1)
    atoms, relations = _vectors(200, 1, 64, seed=2)
    vectors = compose(p, atoms, relations)
    recall = [
        unbinding_recall(p, vectors[c : c + 1], atoms, relations, torch.tensor([c]), ks=(1, 32)).recall
        for c in range(len(sizes))
    ]
    assert recall[0][1] == 1.0 and recall[0][32] == 1.0
    # rank < 1 for at most one of m true atoms: recall at 1 is at most 1/m
    assert all(r[1] <= 1 / m for r, m in zip(recall, sizes, strict=True))
    assert recall[-1][32] < recall[1][32]  # 32 atoms in 64 dimensions: many are lost


@pytest.mark.parametrize("memory", ["all", "range"])
def test_recall_against_a_per_edge_reference(tmp_path, memory):
    rng = np.random.default_rng(4)
    edges = sorted(
        {
            (int(c), int(r), int(a))
            for c, r, a in zip(
                rng.integers(0, 12, 60), rng.integers(0, 4, 60), rng.integers(0, 25, 60), strict=True
            )
        }
    )
    p = _program(tmp_path, edges, 12, 25, 4)
    atoms, relations = _vectors(25, 4, 24, seed=5, unitary=False)
    rows = torch.tensor([9, 2, 5, 0, 11])
    vectors = compose(p, atoms, relations, rows)
    res = unbinding_recall(p, vectors, atoms, relations, rows, ks=(1, 3), memory=memory)
    fills = {r: {a for _, rr, a in edges if rr == r} for r in range(4)}  # each relation's range
    ref_ranks, ref_rel = [], []
    for i, c in enumerate(rows.tolist()):
        for cc, r, a in edges:
            if cc != c:
                continue
            q = unbind(vectors[i], relations[r])
            sims = torch.nn.functional.cosine_similarity(q.unsqueeze(0), atoms, dim=1)
            pool = range(25) if memory == "all" else fills[r]
            ref_ranks.append(sum(1 for b in pool if sims[b] > sims[a]))
            ref_rel.append(r)
    assert res.edges == len(ref_ranks)
    assert sorted(res.ranks.tolist()) == sorted(ref_ranks)
    for k in (1, 3):
        assert res.recall[k] == pytest.approx(sum(x < k for x in ref_ranks) / len(ref_ranks))
    for j, part in res.per_relation.items():
        mine = [x for x, r in zip(ref_ranks, ref_rel, strict=True) if r == j]
        assert part["edges"] == len(mine)
        assert part["recall"][3] == pytest.approx(sum(x < 3 for x in mine) / len(mine))
    d = res.as_dict()
    assert d["recall"]["1"] == res.recall[1] and "ranks" not in d and d["memory"] == memory


def test_recall_chunking_gives_the_same_ranks(tmp_path, monkeypatch):
    import hrr_kernel.unbinding as ex

    rng = np.random.default_rng(6)
    edges = sorted(
        {
            (int(c), int(r), int(a))
            for c, r, a in zip(
                rng.integers(0, 10, 50), rng.integers(0, 3, 50), rng.integers(0, 20, 50), strict=True
            )
        }
    )
    p = _program(tmp_path, edges, 10, 20, 3)
    atoms, relations = _vectors(20, 3, 16, seed=7)
    rows = torch.arange(10)
    vectors = compose(p, atoms, relations)
    whole = unbinding_recall(p, vectors, atoms, relations, rows)
    monkeypatch.setattr(ex, "_RECALL_CHUNK_BYTES", 1)  # one (row, relation) pair per chunk
    chunked = unbinding_recall(p, vectors, atoms, relations, rows)
    assert torch.equal(whole.ranks, chunked.ranks)


def test_recall_errors_name_what_was_given(tmp_path):
    p = _program(tmp_path, [(0, 0, 0), (1, 1, 1)], 2, 3, 2)
    atoms, relations = _vectors(3, 2, 8)
    v = compose(p, atoms, relations)
    with pytest.raises(ShapeError, match="distinct"):
        unbinding_recall(p, v, atoms, relations, torch.tensor([0, 0]))
    with pytest.raises(ShapeError, match=r"ks must be positive cut-offs"):
        unbinding_recall(p, v, atoms, relations, torch.tensor([0, 1]), ks=(0, 5))
    with pytest.raises(ShapeError, match="one concept per vector"):
        unbinding_recall(p, v, atoms, relations, torch.tensor([0]))
    with pytest.raises(ShapeError, match="program's 3 and 2 rows"):
        unbinding_recall(p, v, atoms[:2], relations, torch.tensor([0, 1]))
    empty = unbinding_recall(p, v[:0], atoms, relations, torch.tensor([], dtype=torch.int64))
    assert empty.edges == 0 and math.isnan(empty.recall[1])


@pytest.mark.parametrize("mode", ["base", "freq", "add", "cat"])
def test_hrr_vectors_are_the_hrr_part_of_the_embedding(tmp_path, mode):
    p = _program(tmp_path, [(0, 0, 1), (1, 1, 2), (2, 0, 0), (2, 2, 3)], 3, 4, 3)
    logf = torch.tensor([0.0, -1.0, -2.0]) if mode == "freq" else None
    emb = HRREmbedding(p, 10, mode, log_frequency=logf, dtype=torch.float64, normalize=mode == "cat")
    full = emb.matrix().detach()  # (N, D)
    c = compose(p, emb.atoms.detach(), emb.relations.detach())
    want = full  # base, add: the embedding itself
    if mode == "freq":
        want = full - emb.freq_encoding
    elif mode == "cat":
        want = torch.nn.functional.normalize(c, dim=1)
    torch.testing.assert_close(hrr_vectors(emb), want, atol=1e-12, rtol=0)
    torch.testing.assert_close(hrr_vectors(emb, torch.tensor([2, 0])), want[[2, 0]], atol=1e-12, rtol=0)
    assert not hrr_vectors(emb).requires_grad
    if mode == "cat":
        torch.testing.assert_close(full[:, :5], want, atol=1e-12, rtol=0)


def test_hrr_vectors_refuse_an_unstructured_embedding(tmp_path):
    p = _program(tmp_path, [(0, 0, 0)], 1, 1, 1)
    with pytest.raises(ShapeError, match="'unstructured' embedding has no HRR part"):
        hrr_vectors(HRREmbedding(p, 4, "unstructured"))


def test_relation_range_and_a_restricted_explain(tmp_path):
    from hrr_kernel import explain_vector, relation_range

    edges = [(0, 0, 1), (0, 1, 2), (1, 0, 3), (2, 1, 4), (2, 1, 0)]
    p = _program(tmp_path, edges, 3, 5, 3)
    rng = relation_range(p)
    assert rng.dtype == torch.bool and rng.shape == (3, 5)
    assert rng[0].nonzero().flatten().tolist() == [1, 3] and rng[1].nonzero().flatten().tolist() == [0, 2, 4]
    assert not rng[2].any()
    atoms, relations = _vectors(5, 3, 16, seed=2, unitary=False)
    v = compose(p, atoms, relations, torch.tensor([0]))[0]
    values, indices = explain_vector(v, atoms, relations, [0, 1], k=5, memory=rng)
    assert indices.shape == (2, 2)  # k capped at the smallest memory asked (relation 0 takes 2 atoms)
    assert set(indices[0].tolist()) == {1, 3} and set(indices[1].tolist()) <= {0, 2, 4}
    q = unbind(v, relations[0])
    cos = torch.nn.functional.cosine_similarity(q.unsqueeze(0), atoms[[1, 3]], dim=1)
    assert values[0].tolist() == pytest.approx(sorted(cos.tolist(), reverse=True))
    with pytest.raises(ShapeError, match="no atom in its memory"):
        explain_vector(v, atoms, relations, [2], k=1, memory=rng)
    with pytest.raises(ShapeError, match="bool tensor"):
        explain_vector(v, atoms, relations, [0], k=1, memory=rng.float())
