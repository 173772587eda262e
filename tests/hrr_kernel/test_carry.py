"""hrr_kernel.carry: atoms matched by (kind, key), relations by SCTID key, tokens by (vocabulary, code);
the three initialisation rules; token provenance, on the hand-built program pair of carry_fixtures."""

from __future__ import annotations

import pytest
import torch
from carry_fixtures import (
    NEW_ATOMS,
    NEW_CODES,
    NEW_PROVENANCE,
    OLD_ATOMS,
    OLD_CODES,
    write_new_program,
    write_old_program,
)

from hrr_kernel import (
    PROVENANCE,
    ShapeError,
    carry_parameters,
    load_program,
    match_keys,
    token_provenance,
    token_sources,
)

H = 8


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("carry")
    return load_program(write_old_program(root / "old")), load_program(write_new_program(root / "new"))


@pytest.fixture(scope="module")
def trained(pair):
    old, _ = pair
    g = torch.Generator().manual_seed(3)
    return torch.randn(old.n_atoms, H, generator=g), torch.randn(old.n_relations, H, generator=g)


def test_match_keys_first_occurrence_and_missing():
    assert match_keys(["a", "b", "a"], ["b", "a", "c"]).tolist() == [1, 0, -1]


def test_atoms_match_by_kind_and_key(pair, trained):
    old, new = pair
    c = carry_parameters(old, new, *trained)
    expected = [OLD_ATOMS.index(a) if a in OLD_ATOMS else -1 for a in NEW_ATOMS]
    assert c.atom_source.tolist() == expected
    # the word "100" matches the old word "100", not the concept "100" with the same key
    assert c.atom_source[NEW_ATOMS.index(("word", "100"))] == OLD_ATOMS.index(("word", "100"))
    assert c.atom_source[NEW_ATOMS.index(("concept", "100"))] == OLD_ATOMS.index(("concept", "100"))
    for i, s in enumerate(expected):
        if s >= 0:
            assert torch.equal(c.atoms[i], trained[0][s])


def test_relations_match_by_sctid_key(pair, trained):
    old, new = pair
    c = carry_parameters(old, new, *trained)
    # old: is_a (116680003), description, identity; new: description, is_a, identity, attribute 363698007
    assert c.relation_source.tolist() == [1, 0, 2, -1]
    assert torch.equal(c.relations[1], trained[1][0]) and torch.equal(c.relations[0], trained[1][1])


def test_counts(pair, trained):
    old, new = pair
    counts = carry_parameters(old, new, *trained, init="kind_mean").counts()
    assert counts["atoms_matched"] == 9 and counts["atoms_new"] == 2
    assert counts["atoms_by_kind"] == {
        "concept": {"matched": 2, "new": 1},
        "special": {"matched": 5, "new": 0},
        "word": {"matched": 2, "new": 1},
    }
    assert (counts["relations_matched"], counts["relations_new"], counts["init_rule"]) == (3, 1, "kind_mean")


def test_zero_rule(pair, trained):
    old, new = pair
    c = carry_parameters(old, new, *trained, init="zero")
    new_atoms = c.atom_source < 0
    assert torch.count_nonzero(c.atoms[new_atoms]) == 0 and torch.count_nonzero(c.relations[3]) == 0


def test_kind_mean_rule(pair, trained):
    old, new = pair
    atoms, relations = trained
    c = carry_parameters(old, new, atoms, relations, init="kind_mean")
    concept_mean = atoms[[OLD_ATOMS.index(("concept", "100")), OLD_ATOMS.index(("concept", "200"))]].mean(0)
    word_mean = atoms[[OLD_ATOMS.index(("word", "fever")), OLD_ATOMS.index(("word", "100"))]].mean(0)
    torch.testing.assert_close(c.atoms[NEW_ATOMS.index(("concept", "300"))], concept_mean)
    torch.testing.assert_close(c.atoms[NEW_ATOMS.index(("word", "cough"))], word_mean)
    torch.testing.assert_close(c.relations[3], relations.mean(0))


def test_parents_rule(pair, trained):
    old, new = pair
    atoms, relations = trained
    c300, c100, c200 = (NEW_ATOMS.index(("concept", k)) for k in ("300", "100", "200"))
    parents = [[] for _ in NEW_ATOMS]
    parents[c300] = [c100, c200]  # the new concept 300 is-a 100 and is-a 200
    c = carry_parameters(old, new, atoms, relations, init="parents", atom_parents=parents)
    mean = atoms[[OLD_ATOMS.index(("concept", "100")), OLD_ATOMS.index(("concept", "200"))]].mean(0)
    torch.testing.assert_close(c.atoms[c300], mean)
    assert torch.count_nonzero(c.atoms[NEW_ATOMS.index(("word", "cough"))]) == 0  # no parents: zero
    assert torch.count_nonzero(c.relations[3]) == 0 and c.counts()["init_rule"] == "parents"
    # a new parent is set before its child; a cycle of new atoms stays at zero
    cough = NEW_ATOMS.index(("word", "cough"))
    chained = [[] for _ in NEW_ATOMS]
    chained[cough], chained[c300] = [c300], [c100]
    c = carry_parameters(old, new, atoms, relations, init="parents", atom_parents=chained)
    torch.testing.assert_close(c.atoms[cough], atoms[OLD_ATOMS.index(("concept", "100"))])
    cycle = [[] for _ in NEW_ATOMS]
    cycle[cough], cycle[c300] = [c300], [cough]
    c = carry_parameters(old, new, atoms, relations, init="parents", atom_parents=cycle)
    assert torch.count_nonzero(c.atoms[[cough, c300]]) == 0
    with pytest.raises(ShapeError, match="atom_parents"):
        carry_parameters(old, new, atoms, relations, init="parents")


def test_random_rule_is_seeded_and_keeps_trained_rows(pair, trained):
    old, new = pair

    def run(seed):
        return carry_parameters(
            old, new, *trained, init="random", generator=torch.Generator().manual_seed(seed)
        )

    a, b, other = run(5), run(5), run(6)
    assert torch.equal(a.atoms, b.atoms) and torch.equal(a.relations, b.relations)
    new_atoms = a.atom_source < 0
    assert not torch.equal(a.atoms[new_atoms], other.atoms[new_atoms])
    assert torch.count_nonzero(a.atoms[new_atoms]) == new_atoms.sum() * H
    assert float(a.atoms[new_atoms].abs().max()) < 0.2  # N(0, 0.02) draws
    assert torch.equal(a.atoms[~new_atoms], run(7).atoms[~new_atoms])


def test_unknown_rule_and_wrong_shapes(pair, trained):
    old, new = pair
    with pytest.raises(ShapeError, match="init must be one of"):
        carry_parameters(old, new, *trained, init="mean")
    with pytest.raises(ShapeError, match=r"atoms must be \(9, H\)"):
        carry_parameters(old, new, trained[0][:3], trained[1])
    with pytest.raises(ShapeError, match="relations must be"):
        carry_parameters(old, new, trained[0], trained[1][:, :3])


def test_token_sources(pair):
    old, new = pair
    expected = [OLD_CODES.index(c) if c in OLD_CODES else -1 for c in NEW_CODES]
    assert token_sources(old, new).tolist() == expected


def test_token_provenance_classes(pair, trained):
    old, new = pair
    c = carry_parameters(old, new, *trained)
    assert [PROVENANCE[i] for i in token_provenance(old, new, c)] == NEW_PROVENANCE
