"""The role readout (pooling cls+mean+roles): history groups on a hand-built batch, the soft chapters
against a float64 loop, what reading them adds to the heads, persistence; and compositions wider than the
row (hrr_width)."""

from __future__ import annotations

import pytest
import torch

from hrr_kernel import HRREmbedding
from model import HRRBert, preset
from model.roles import INIT_NONE, INIT_SHARPNESS, RoleReadout, history_groups, role_relations


def make(program, **kw):
    torch.manual_seed(0)
    return HRRBert(preset("tiny", mode="base", **kw), program)


def test_history_groups_on_a_hand_built_batch():
    # positions: [CLS] a b | a c | c b [PAD]; visits 0, 1, 2; code 7 padding
    ids = torch.tensor([[1, 10, 11, 10, 12, 12, 11, 0]])
    seg = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2]])
    keep = torch.tensor([[False, True, True, True, True, True, True, False]])
    first, repeated, last, visits = history_groups(ids, seg, keep)
    assert first.tolist() == [[False, True, True, False, True, False, False, False]]  # a, b, c once
    assert repeated.tolist() == [[False, True, True, False, True, False, False, False]]  # a, b, c: 2 visits
    assert last.tolist() == [[False, False, False, False, False, True, True, False]]  # c, b of visit 2
    assert visits.tolist() == [3.0]
    # a code twice in one visit is one code, not repeated
    ids2 = torch.tensor([[1, 10, 10, 11]])
    seg2 = torch.tensor([[0, 0, 0, 1]])
    keep2 = torch.tensor([[False, True, True, True]])
    first2, rep2, last2, v2 = history_groups(ids2, seg2, keep2)
    assert first2.tolist() == [[False, True, False, True]]
    assert rep2.tolist() == [[False, False, False, False]]
    assert last2.tolist() == [[False, False, False, True]] and v2.tolist() == [2.0]


def test_the_roles_are_the_icd_chapter_relations_that_hold_edges(program):
    rels = role_relations(program)
    assert rels and all(program.relation_labels[r].endswith("chapter") for r in rels)
    assert all(bool((program.edge_relation == r).any()) for r in rels)
    readout = RoleReadout(program, {"chapters": 22})
    assert sum(readout.sizes) == readout.atom_ids.numel()
    assert readout.n_features == 3 * readout.atom_ids.numel() + 1


def soft_roles_loop(c, atoms, relations, readout) -> torch.Tensor:
    """The readout's soft roles written out in float64: correlation by its definition, cosines, softmax."""
    h = c.shape[1]
    tau = float(readout.log_sharpness.detach().exp())
    out = torch.zeros(c.shape[0], readout.atom_ids.numel(), dtype=torch.float64)
    col = 0
    for j, r_id in enumerate(readout.role_ids.tolist()):
        r = relations[r_id].double()
        ks = readout.atom_ids[col : col + readout.sizes[j]].tolist()
        for u in range(c.shape[0]):
            x = c[u].double()
            q = torch.tensor([sum(x[(n + k) % h] * r[k] for k in range(h)) for n in range(h)])  # x ⊛ r⁻¹
            sims = [float(q @ atoms[a].double() / (q.norm() * atoms[a].double().norm())) for a in ks]
            z = torch.tensor(sims + [float(readout.none_level[j].detach())], dtype=torch.float64) * tau
            out[u, col : col + len(ks)] = torch.softmax(z, 0)[:-1]
        col += len(ks)
    return out


def test_soft_roles_equal_a_float64_loop(program):
    m = make(program, pooling="cls+mean+roles")
    tok = m.embeddings.token
    rows = torch.arange(5, 12)
    c = tok.compose_rows(rows).detach()
    got = m.roles.soft_roles(c, tok.atom_vectors().detach(), tok.relation_vectors().detach())
    want = soft_roles_loop(c, tok.atom_vectors().detach(), tok.relation_vectors().detach(), m.roles)
    torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)


def test_a_wide_composition_reads_each_codes_own_chapter(program):
    """At H = 1024 the crosstalk is small: every code holding a chapter edge puts most of its mass on that
    chapter's atom, and a code without one (the special tokens) on none. With random atoms a code's edges
    weigh alike, so the true atom's cosine is about 1 / √(its edges), 0.3 here: the none level is set under
    it (fine-tuning learns it; a pretrained base reads its chapter edges above 0.75)."""
    torch.manual_seed(0)
    emb = HRREmbedding(program, 1024, "base", dtype=torch.float64)
    readout = RoleReadout(program, {"chapters": 22}).double()
    with torch.no_grad():
        readout.none_level.fill_(0.15)
    rows = torch.arange(program.n_concepts)
    soft = readout.soft_roles(
        emb.compose_rows(rows).detach(), emb.atom_vectors().detach(), emb.relation_vectors()
    )
    atom_col = {int(a): i for i, a in enumerate(readout.atom_ids.tolist())}
    holders = set()
    for r in readout.role_ids.tolist():
        sel = program.edge_relation == r
        for c, a in zip(program.edge_concept[sel].tolist(), program.edge_atom[sel].tolist(), strict=True):
            holders.add(c)
            assert int(soft[c].argmax()) == atom_col[a]
            assert float(soft[c, atom_col[a]]) > 0.5
    for c in set(range(program.n_concepts)) - holders:
        assert float(soft[c].sum()) < 0.5


def test_the_readout_starts_at_no_effect_and_then_counts(program):
    from tests.model.test_bert import batch

    ids, seg, att = batch(program, t=12)
    plain = make(program, pooling="cls+mean").eval()
    roles = make(program, pooling="cls+mean+roles").eval()
    missing, unexpected = roles.load_state_dict(
        plain.state_dict(), strict=False
    )  # the same encoder and heads
    assert not unexpected and all(k.startswith("roles.") for k in missing)
    assert float(roles.roles.log_sharpness.exp()) == pytest.approx(INIT_SHARPNESS)
    assert roles.roles.none_level.tolist() == pytest.approx([INIT_NONE] * len(roles.roles.sizes))
    with torch.no_grad():
        torch.testing.assert_close(
            roles(ids, seg, att, task="chapters"), plain(ids, seg, att, task="chapters")
        )
        torch.nn.init.normal_(roles.roles.tasks["chapters"].weight)
        changed = roles(ids, seg, att, task="chapters")
        extra = roles.role_logits(ids, seg, att, "chapters")
    torch.testing.assert_close(changed, plain(ids, seg, att, task="chapters") + extra)
    # padding changes nothing: the same batch with more padding gives the same logits
    pad = torch.zeros(ids.shape[0], 4, dtype=ids.dtype)
    with torch.no_grad():
        more = roles(
            torch.cat([ids, pad], 1),
            torch.cat([seg, seg[:, -1:].expand(-1, 4)], 1),
            torch.cat([att, torch.zeros_like(pad, dtype=torch.bool)], 1),
            task="chapters",
        )
    torch.testing.assert_close(more, changed, atol=1e-5, rtol=1e-5)


def test_gradients_reach_the_atoms_relations_and_readout(program):
    from tests.model.test_bert import batch

    m = make(program, pooling="cls+mean+roles")
    torch.nn.init.normal_(m.roles.tasks["chapters"].weight)
    ids, seg, att = batch(program)
    m(ids, seg, att, task="chapters").sum().backward()
    tok = m.embeddings.token
    for p in (tok.atoms, tok.relations, m.roles.log_sharpness, m.roles.none_level):
        assert p.grad is not None and float(p.grad.abs().sum()) > 0


def test_pooling_is_set_saved_and_loaded(program, tmp_path):
    from tests.model.test_bert import batch

    m = make(program, pooling="cls")
    assert m.roles is None
    m.set_pooling("cls+mean+roles")
    assert m.roles is not None and m.config.pooling == "cls+mean+roles"
    torch.nn.init.normal_(m.roles.tasks["chapters"].weight)
    m.save_pretrained(tmp_path / "m")
    back = HRRBert.from_pretrained(tmp_path / "m", program).eval()
    ids, seg, att = batch(program)
    with torch.no_grad():
        torch.testing.assert_close(
            back(ids, seg, att, task="chapters"), m.eval()(ids, seg, att, task="chapters")
        )
    m.set_pooling("cls+mean")
    assert m.roles is None


def test_roles_need_a_composition(program):
    with pytest.raises(ValueError, match="composes nothing"):
        preset("tiny", mode="unstructured", pooling="cls+mean+roles")


def test_a_program_without_chapter_relations_is_refused(other_program):
    with pytest.raises(ValueError, match="no icd_hierarchy relation"):
        HRRBert(preset("tiny", mode="base", pooling="cls+mean+roles"), other_program)


# --- hrr_width: a composition wider than the row -----------------------------------------------------


def test_a_wide_composition_is_projected_to_the_row(program):
    torch.manual_seed(0)
    emb = HRREmbedding(program, 16, "base", hrr_width=64, dtype=torch.float64)
    assert emb.projection.shape == (64, 16) and emb.atoms.shape[1] == 64 and emb.hrr_dim == 64
    rows = torch.tensor([5, 9, 20])
    c = emb.compose_rows(rows)  # (3, 64)
    torch.testing.assert_close(emb.rows(rows), c @ emb.projection)
    torch.testing.assert_close(emb.matrix()[rows], emb.rows(rows))
    h = torch.randn(4, 16, dtype=torch.float64)
    torch.testing.assert_close(emb.decode(h), h @ emb.matrix().t())
    same = HRREmbedding(program, 16, "base", hrr_width=16)
    assert same.projection is None


@pytest.mark.parametrize("mode", ["unstructured", "add", "cat", "gram"])
def test_a_wide_composition_needs_a_whole_row_composition(program, mode):
    with pytest.raises(ValueError, match="hrr_width"):
        HRREmbedding(program, 16, mode, hrr_width=64)


def test_a_wide_model_saves_and_loads(program, tmp_path):
    from tests.model.test_bert import batch

    m = make(program, hrr_width=128)
    m.save_pretrained(tmp_path / "w")
    back = HRRBert.from_pretrained(tmp_path / "w", program).eval()
    ids, seg, att = batch(program)
    mlm = torch.zeros_like(ids, dtype=torch.bool)
    mlm[:, 2] = True
    with torch.no_grad():
        torch.testing.assert_close(back(ids, seg, att, mlm_mask=mlm), m.eval()(ids, seg, att, mlm_mask=mlm))
    assert back.config.hrr_width == 128


# --- carrying a model with a role readout ------------------------------------------------------------


def test_carrying_to_the_same_program_keeps_the_readout(program):
    from model import carry_model
    from tests.model.test_bert import batch

    m = make(program, pooling="cls+mean+roles").eval()
    torch.nn.init.normal_(m.roles.tasks["chapters"].weight)
    with torch.no_grad():
        m.roles.none_level.add_(0.1)
    new, _ = carry_model(m, program)
    ids, seg, att = batch(program)
    with torch.no_grad():
        torch.testing.assert_close(
            new.eval()(ids, seg, att, task="chapters"), m(ids, seg, att, task="chapters")
        )


def test_readout_columns_follow_their_atoms_by_key():
    from types import SimpleNamespace as NS

    from model.roles import carry_readout_weights

    def prog(keys):
        return NS(relation_labels=["ICD-10-CM chapter"], atom_kinds=["icd"] * len(keys), atom_keys=keys)

    def readout(n):
        return NS(
            atom_ids=torch.arange(n), atom_role=torch.zeros(n, dtype=torch.long), role_ids=torch.tensor([0])
        )

    old_p, new_p = prog(["I", "II", "IX"]), prog(["II", "XXI", "I"])  # IX gone, XXI new, order changed
    w = torch.arange(2 * 10, dtype=torch.float32).view(2, 10)  # (L, 3 * 3 + 1)
    got = carry_readout_weights(readout(3), old_p, readout(3), new_p, w)
    want = torch.zeros(2, 10)
    for g in range(3):
        want[:, g * 3 + 0] = w[:, g * 3 + 1]  # II
        want[:, g * 3 + 2] = w[:, g * 3 + 0]  # I
    want[:, -1] = w[:, -1]
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("mode", ["base", "freq", "add", "cat"])
def test_every_composing_mode_reads_roles(program, mode):
    """The readout unbinds each mode's HRR part (add: C + W; cat: the composed half) and trains with it."""
    from tests.model.test_bert import batch

    torch.manual_seed(0)
    logf = torch.linspace(-8, -1, program.n_concepts) if mode == "freq" else None
    m = HRRBert(preset("tiny", mode=mode, pooling="cls+mean+roles"), program, log_frequency=logf)
    torch.nn.init.normal_(m.roles.tasks["mortality"].weight)
    ids, seg, att = batch(program)
    out = m(ids, seg, att, task="mortality")
    assert out.shape == (ids.shape[0], 1) and bool(torch.isfinite(out).all())
    out.sum().backward()
    assert float(m.embeddings.token.relations.grad.abs().sum()) > 0
