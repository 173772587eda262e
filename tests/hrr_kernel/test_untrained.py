"""hrr_kernel.untrained: which atoms and relations trained tokens reach, and the kind-mean rule for the
others, on the hand-built program of carry_fixtures (float64, tiny H), checked edge by edge."""

from __future__ import annotations

import pytest
import torch
from carry_fixtures import write_old_program

from hrr_kernel import SETTLED_KINDS, ShapeError, load_program, settle_untrained, trained_parts

H = 6


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return load_program(write_old_program(tmp_path_factory.mktemp("untrained") / "old"))


def _reached(program, tokens):
    """The atoms and relations on an edge of a token in ``tokens``, by a plain loop over the edges."""
    atoms, relations = set(), set()
    for c, r, a in zip(
        program.edge_concept.tolist(), program.edge_relation.tolist(), program.edge_atom.tolist(), strict=True
    ):
        if c in tokens:
            atoms.add(a)
            relations.add(r)
    return atoms, relations


def _pick(program):
    """Trained tokens: every code but the last one with edges that uses an atom no other code uses."""
    by_concept: dict[int, set[int]] = {}
    for c, a in zip(program.edge_concept.tolist(), program.edge_atom.tolist(), strict=True):
        by_concept.setdefault(c, set()).add(a)
    for c in sorted(by_concept, reverse=True):
        others = set().union(*(v for k, v in by_concept.items() if k != c))
        if by_concept[c] - others:
            trained = torch.ones(program.n_concepts, dtype=torch.bool)
            trained[c] = False
            return trained
    raise AssertionError("the fixture has no code with an atom of its own")


def test_trained_parts_are_the_atoms_and_relations_on_trained_edges(program):
    trained = _pick(program)
    atoms, relations = trained_parts(program, trained)
    want_a, want_r = _reached(program, set(torch.nonzero(trained).flatten().tolist()))
    assert set(torch.nonzero(atoms).flatten().tolist()) == want_a
    assert set(torch.nonzero(relations).flatten().tolist()) == want_r
    assert not atoms.all()  # the held-out code has an atom of its own


def test_settle_sets_untrained_atoms_to_their_kind_mean_and_leaves_the_rest(program):
    trained = _pick(program)
    g = torch.Generator().manual_seed(0)
    atoms0 = torch.randn(program.n_atoms, H, generator=g, dtype=torch.float64)
    rel0 = torch.randn(program.n_relations, H, generator=g, dtype=torch.float64)
    atoms, rel = atoms0.clone(), rel0.clone()
    counts = settle_untrained(program, atoms, rel, trained)
    reached, reached_r = trained_parts(program, trained)
    kinds = program.atom_kinds
    settled = 0
    for i, k in enumerate(kinds):
        if reached[i] or k not in SETTLED_KINDS:
            assert torch.equal(atoms[i], atoms0[i])  # trained, or special: untouched
            continue
        same = [j for j, kj in enumerate(kinds) if kj == k and reached[j]]
        assert torch.allclose(atoms[i], atoms0[same].mean(0))
        settled += 1
    assert settled > 0 and counts["atoms_settled"] == settled
    assert counts["atoms_trained"] == int(reached.sum())
    for i in range(program.n_relations):
        if reached_r[i]:
            assert torch.equal(rel[i], rel0[i])
        else:
            assert torch.allclose(rel[i], rel0[reached_r].mean(0))
    assert counts["relations_settled"] == int((~reached_r).sum())


def test_all_trained_changes_nothing_and_bad_shapes_are_refused(program):
    atoms = torch.randn(program.n_atoms, H, dtype=torch.float64)
    rel = torch.randn(program.n_relations, H, dtype=torch.float64)
    a0, r0 = atoms.clone(), rel.clone()
    counts = settle_untrained(program, atoms, rel, torch.ones(program.n_concepts, dtype=torch.bool))
    assert counts["atoms_settled"] == counts["relations_settled"] == 0
    assert torch.equal(atoms, a0) and torch.equal(rel, r0)
    with pytest.raises(ShapeError, match="bool tensor"):
        trained_parts(program, torch.ones(program.n_concepts, dtype=torch.long))
    with pytest.raises(ShapeError, match="rows"):
        settle_untrained(program, atoms[:-1], rel, torch.ones(program.n_concepts, dtype=torch.bool))
