"""hrr_kernel.ancestry: the GRAM-style modes ``gram`` and ``ancestors``. Their ancestors are the identity,
is-a and ICD-hierarchy atoms of a token (no words, attributes or special atoms); ``gram`` equals GRAM's
attention written out as a float64 loop (values and gradients), ``ancestors`` the plain mean; selected rows
are the full build's; a token without ancestors (a special one too) is its own vector; the tied decoder
scores the built rows; HRRBert trains in ``gram``; pretraining and fine-tuning take ``--mode gram``;
settling, carrying and explain treat the modes as their specs say."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from train_fixtures import dataset_dir, program_dir  # noqa: F401

import hrr_kernel.ancestry as ancestry
from hrr_kernel import MODES, HRREmbedding, load_program, settle_untrained
from hrr_kernel.ancestry import AncestryMode, ancestor_edges, ancestor_lists
from model import HRRBert, bert_tiny, carry_model
from pipelines.cli import main
from tests.helpers.synthetic_program import write_program

# atoms: (kind, key)
ATOMS = [
    ("special", "[PAD]"),
    ("special", "[UNK]"),
    ("concept", "10"),
    ("concept", "20"),
    ("concept", "30"),
    ("concept", "40"),
    ("word", "fever"),
    ("icd", "ICD10CM:A00-B99"),  # a chapter
    ("icd", "ICD10CM:A00-A09"),  # a block
]
RELATIONS = [("identity", None), ("description", None), ("is_a", 116680003), ("attribute", 363698007)]
RELATIONS.append(("icd_hierarchy", None))
REL = {kind: j for j, (kind, _) in enumerate(RELATIONS)}
CODES = ["[PAD]", "[UNK]", "A001", "A002", "A003", "A004", "A005"]
EDGES = {  # token -> [(relation kind, atom id)]
    "[PAD]": [("identity", 0)],
    "[UNK]": [("identity", 1)],
    # its concept, the concept's parents, its ICD chapter and block; a word and an attribute filler
    "A001": [
        ("identity", 2),
        ("is_a", 3),
        ("is_a", 4),
        ("icd_hierarchy", 7),
        ("icd_hierarchy", 8),
        ("description", 6),
        ("attribute", 5),
    ],
    "A002": [("identity", 3), ("is_a", 3), ("icd_hierarchy", 7)],  # concept 20 twice: one ancestor
    "A003": [("description", 6)],  # a word alone: no ancestor
    "A004": [("attribute", 2)],  # concept 10 as an attribute filler: not an ancestor
    "A005": [],
}
ANCESTORS = [[], [], [2, 3, 4, 7, 8], [3, 7], [], [], []]  # by token, written out by hand
ALONE = [0, 1, 4, 5, 6]  # tokens that have only themselves


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    c, r, a = [], [], []
    for i, code in enumerate(CODES):
        for kind, atom in EDGES[code]:
            c.append(i)
            r.append(REL[kind])
            a.append(atom)
    root = write_program(
        tmp_path_factory.mktemp("ancestry") / "p",
        n_concepts=len(CODES),
        n_atoms=len(ATOMS),
        n_relations=len(RELATIONS),
        edges=(np.array(c), np.array(r), np.array(a)),
        relation_kinds=[k for k, _ in RELATIONS],
        atom_keys=[k for _, k in ATOMS],
        atom_kinds=[k for k, _ in ATOMS],
        relation_sctids=[s for _, s in RELATIONS],
        concept_codes=CODES,
    )
    return load_program(root)


def embedding(program, mode, dim=6):
    """A float64 embedding whose vectors (and attention) are drawn large, so the weights are far from even."""
    torch.manual_seed(0)
    emb = HRREmbedding(program, dim, mode, dtype=torch.float64)
    with torch.no_grad():
        for p in emb.parameters():
            p.normal_(0.0, 1.0)
    return emb


def gram_loop(emb) -> torch.Tensor:
    """GRAM written out: g_i = Σ_j α_ij e_j, α_i = softmax_j(u · tanh(W [e_i; e_j] + b)), one code and
    one pair at a time, over the hand-written ancestors."""
    att = emb.attention
    out = []
    for i, anc in enumerate(ANCESTORS):
        e_i = emb.table[i]
        vectors = [e_i] + [emb.atoms[j] for j in anc]
        scores = torch.stack(
            [att.score @ torch.tanh(att.weight @ torch.cat([e_i, v]) + att.bias) for v in vectors]
        )
        alpha = torch.softmax(scores, 0)
        out.append(sum(alpha[k] * v for k, v in enumerate(vectors)))
    return torch.stack(out)


def mean_loop(emb) -> torch.Tensor:
    return torch.stack(
        [torch.stack([emb.table[i]] + [emb.atoms[j] for j in anc]).mean(0) for i, anc in enumerate(ANCESTORS)]
    )


def grads(emb, rows: torch.Tensor, weights: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad((rows * weights).sum(), list(emb.parameters())))


def test_the_rivals_are_registered_after_the_paper_modes():
    assert tuple(MODES)[5:] == ("gram", "ancestors")
    gram, mean = MODES["gram"], MODES["ancestors"]
    assert isinstance(gram, AncestryMode) and gram.attention and not mean.attention
    for spec in (gram, mean):
        assert spec.ancestry and not spec.composes and spec.has_atoms and not spec.row_is_table
        assert spec.table == "full" and spec.untrained_fill is None and spec.new_row == "zero"


def test_ancestors_are_identity_is_a_and_icd_hierarchy_atoms_once(program):
    ptr, atom = ancestor_lists(program)
    assert [atom[ptr[i] : ptr[i + 1]].tolist() for i in range(len(CODES))] == ANCESTORS
    kinds = [program.relation_kinds[j] for j in program.edge_relation.tolist()]
    marked = ancestor_edges(program).tolist()
    atom_kinds = [program.atom_kinds[a] for a in program.edge_atom.tolist()]
    assert marked == [
        k in ("identity", "is_a", "icd_hierarchy") and ak != "special"
        for k, ak in zip(kinds, atom_kinds, strict=True)
    ]


def test_gram_is_the_attention_written_out(program):
    emb = embedding(program, "gram")
    assert emb.attention.weight.shape == (6, 12)  # K = min(D, 128)
    got, ref = emb.matrix(), gram_loop(emb)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    # the attention is not the mean here: the check would not see a wrong softmax otherwise
    assert (got - mean_loop(emb)).abs().max() > 0.1
    w = torch.randn(ref.shape, dtype=torch.float64)
    for a, b in zip(grads(emb, got, w), grads(emb, ref, w), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_ancestors_is_the_plain_mean(program):
    emb = embedding(program, "ancestors")
    assert {n for n, _ in emb.named_parameters()} == {"atoms", "table"}
    got, ref = emb.matrix(), mean_loop(emb)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn(ref.shape, dtype=torch.float64)
    for a, b in zip(grads(emb, got, w), grads(emb, ref, w), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_the_sparse_products_have_their_exact_gradients():
    """The weighted sum and the pair scores against finite differences and the dense gathers they replace."""
    g = torch.Generator().manual_seed(0)
    seg, atom = torch.tensor([0, 0, 0, 2, 3, 3]), torch.tensor([1, 3, 4, 0, 1, 4])  # row 1: no edge
    e = ancestry._edges(seg, atom, torch.tensor([3, 0, 1, 2]))
    assert e.needed.tolist() == [0, 1, 3, 4] and e.crow.tolist() == [0, 3, 3, 4, 6]
    w = torch.rand(6, dtype=torch.float64, generator=g, requires_grad=True)
    atoms = torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True)

    def mixed(w, atoms):
        return ancestry._AncestorSum.apply(w, atoms, e.seg, e.atom, e.crow, e.needed, e.order, e.crow_t)

    assert torch.autograd.gradcheck(mixed, (w, atoms))
    dense = torch.zeros(4, 3, dtype=torch.float64).index_add(0, seg, w[:, None] * atoms[atom])
    torch.testing.assert_close(mixed(w, atoms), dense, rtol=1e-14, atol=1e-14)
    p = torch.randn(4, 2, dtype=torch.float64, generator=g, requires_grad=True)
    q = torch.randn(4, 2, dtype=torch.float64, generator=g, requires_grad=True)
    u = torch.randn(2, dtype=torch.float64, generator=g, requires_grad=True)

    def scores(p, q, u):
        return ancestry._PairScores.apply(p, q, u, e.seg, e.inv, e.crow, e.order, e.crow_t)

    assert torch.autograd.gradcheck(scores, (p, q, u))
    torch.testing.assert_close(scores(p, q, u), torch.tanh(p[seg] + q[e.inv]) @ u, rtol=1e-14, atol=1e-14)
    # no edge at all
    empty = ancestry._edges(seg[:0], atom[:0], torch.zeros(4, dtype=torch.int64))
    e0 = empty
    none = ancestry._AncestorSum.apply(w[:0], atoms, e0.seg, e0.atom, e0.crow, e0.needed, e0.order, e0.crow_t)
    assert torch.equal(none, torch.zeros(4, 3, dtype=torch.float64))
    none.sum().backward()
    assert torch.equal(atoms.grad, torch.zeros_like(atoms))


@pytest.mark.parametrize("mode", ["gram", "ancestors"])
def test_selected_rows_are_the_full_build(program, mode):
    emb = embedding(program, mode)
    rows = torch.tensor([2, 6, 3, 2, 0])  # repeats, any order, a token without edges
    got, full = emb.rows(rows), emb.matrix()
    torch.testing.assert_close(got, full[rows], rtol=1e-12, atol=1e-12)
    w = torch.randn(got.shape, dtype=torch.float64)
    for a, b in zip(grads(emb, got, w), grads(emb, full[rows], w), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert emb.rows(torch.zeros(0, dtype=torch.int64)).shape == (0, 6)
    ids = torch.tensor([[2, 3, 3], [6, 2, 1]])
    torch.testing.assert_close(emb(ids), full[ids], rtol=1e-12, atol=1e-12)  # forward: the unique rows


@pytest.mark.parametrize("mode", ["gram", "ancestors"])
def test_a_token_without_ancestors_is_its_own_vector(program, mode):
    """Specials (their one identity edge is to a special atom), a word alone, an attribute alone, no edges."""
    emb = embedding(program, mode)
    rows = torch.tensor(ALONE)
    torch.testing.assert_close(emb.rows(rows), emb.table[rows], rtol=0, atol=0)


def test_gradients_reach_the_ancestors_the_table_and_the_attention(program):
    emb = embedding(program, "gram")
    emb.rows(torch.tensor([3])).square().sum().backward()  # A002: itself, concept 20, the chapter
    reached = (emb.atoms.grad.abs().sum(1) > 0).tolist()
    assert reached == [i in (3, 7) for i in range(len(ATOMS))]
    assert (emb.table.grad.abs().sum(1) > 0).tolist() == [i == 3 for i in range(len(CODES))]
    assert all(p.grad.abs().sum() > 0 for p in emb.attention.parameters())


def test_the_hidden_width_is_capped(program):
    assert HRREmbedding(program, 200, "gram").attention.weight.shape == (128, 400)
    narrow = AncestryMode("narrow", "a test mode", hrr="none", table="full", new_row="zero", attention_dim=4)
    assert HRREmbedding(program, 16, narrow).attention.weight.shape == (4, 32)
    for bad in ({"attention_dim": 0}, {"ancestry": False}):
        with pytest.raises(ValueError, match="mode 'narrow'"):
            replace(narrow, **bad)


@pytest.mark.parametrize("mode", ["gram", "ancestors"])
def test_the_tied_decoder_scores_the_built_rows(program, mode):
    emb = embedding(program, mode)
    h = torch.randn(4, 6, dtype=torch.float64)
    built = emb.rows(torch.arange(len(CODES)))
    torch.testing.assert_close(emb.decode(h), h @ built.t(), rtol=1e-12, atol=1e-12)
    torch.manual_seed(0)
    cfg = bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32, mode=mode, spectral_decoder=True)
    model = HRRBert(cfg, program).double().eval()
    assert not cfg.uses_spectral_decoder  # nothing is composed, so no spectrum to decode against
    ids = torch.tensor([[1, 2, 3, 4, 6]])
    seg, mask = torch.zeros_like(ids), torch.tensor([[False, True, False, True, False]])
    with torch.no_grad():
        logits = model(ids, seg, mlm_mask=mask)
        tok = model.embeddings.token
        e = tok.rows(torch.arange(len(CODES)))
        x = model.embeddings.norm(
            F.embedding(ids, e) + model.embeddings.position.weight[:5] + model.embeddings.segment(seg)
        )
        for layer in model.layers:
            x = layer(x, torch.ones(1, 1, 1, 5, dtype=torch.bool))
        head = model.mlm.norm(F.gelu(model.mlm.dense(x[mask])))
    torch.testing.assert_close(logits, head @ e.t() + model.mlm.bias, rtol=1e-12, atol=1e-12)


def test_hrrbert_trains_in_gram(program, one_thread):
    torch.manual_seed(0)
    cfg = bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32, mode="gram", dropout=0.0, attn_dropout=0.0)
    model = HRRBert(cfg, program)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 3, 2, 6, 5, 4]])
    seg, mask = torch.zeros_like(ids), torch.tensor([[0, 1, 0, 1, 0, 1], [0, 0, 1, 0, 1, 0]]).bool()
    targets = ids[mask]
    losses = []
    model.train()
    for _ in range(40):
        loss = F.cross_entropy(model(ids.masked_fill(mask, 0), seg, mlm_mask=mask), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    assert model.embeddings.token.attention.weight.grad is not None


def test_settling_counts_only_the_ancestor_edges(program):
    """A001 untrained: concept 10 is its identity and only an attribute filler of the trained A004, so it is
    untrained (in a composition it would be trained); concept 30 is A001's alone; concept 40 is nobody's
    ancestor (unused, set all the same); the block node is A001's alone, and becomes the trained chapter."""
    emb = embedding(program, "gram")
    trained = torch.tensor([c != "A001" for c in CODES])
    before = emb.atoms.detach().clone()
    counts = settle_untrained(program, emb.atoms, None, trained, MODES["gram"].row_edges(program))
    assert counts["atoms_settled"] == 4 and counts["relations_settled"] == 0
    after = emb.atoms.detach()
    for i in (2, 4, 5):  # the mean of the trained concept ancestors: concept 20 alone
        torch.testing.assert_close(after[i], before[3], rtol=0, atol=0)
    torch.testing.assert_close(after[8], before[7], rtol=0, atol=0)  # the trained icd atoms: the chapter
    keep = [i for i in range(len(ATOMS)) if i not in (2, 4, 5, 8)]
    assert torch.equal(after[keep], before[keep])


def test_a_carried_gram_model_gives_a_new_code_a_zero_own_vector(tmp_path, program):
    """The new program adds A006 (concept 20 and the chapter): its own vector is zero, so its row is the
    attention mix of zero and its carried ancestors; the attention is copied."""
    codes = CODES + ["A006"]
    edges = {**EDGES, "A006": [("identity", 3), ("icd_hierarchy", 7)]}
    c, r, a = zip(*[(i, REL[k], at) for i, code in enumerate(codes) for k, at in edges[code]], strict=True)
    new = load_program(
        write_program(
            tmp_path / "new",
            n_concepts=len(codes),
            n_atoms=len(ATOMS),
            n_relations=len(RELATIONS),
            edges=(np.array(c), np.array(r), np.array(a)),
            relation_kinds=[k for k, _ in RELATIONS],
            atom_keys=[k for _, k in ATOMS],
            atom_kinds=[k for k, _ in ATOMS],
            relation_sctids=[s for _, s in RELATIONS],
            concept_codes=codes,
        )
    )
    torch.manual_seed(0)
    model = HRRBert(bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32, mode="gram"), program).double()
    moved, report = carry_model(model.eval(), new)
    assert report["new_token_rows"]["rules"]["table"] == MODES["gram"].new_row_note
    tok, old_tok = moved.embeddings.token, model.embeddings.token
    assert torch.count_nonzero(tok.table.detach()[7]) == 0
    torch.testing.assert_close(tok.table.detach()[:7], old_tok.table.detach(), rtol=0, atol=0)
    torch.testing.assert_close(tok.atoms.detach(), old_tok.atoms.detach(), rtol=0, atol=0)
    assert torch.equal(tok.attention.weight, old_tok.attention.weight)
    with torch.no_grad():
        torch.testing.assert_close(moved.token_matrix()[:7], model.token_matrix(), rtol=0, atol=1e-12)
        att = tok.attention
        zero = torch.zeros(16, dtype=torch.float64)
        vectors = [zero, tok.atoms[3], tok.atoms[7]]
        s = torch.stack(
            [att.score @ torch.tanh(att.weight @ torch.cat([zero, v]) + att.bias) for v in vectors]
        )
        want = sum(w * v for w, v in zip(torch.softmax(s, 0), vectors, strict=True))
        torch.testing.assert_close(moved.token_matrix()[7], want, rtol=1e-12, atol=1e-12)


def test_pretraining_and_fine_tuning_take_mode_gram(tmp_path, dataset_dir, program_dir):  # noqa: F811
    common = ["--batch-size", "8", "--device", "cpu", "-q"]
    data = [str(dataset_dir), "--program", str(program_dir)]
    res = CliRunner().invoke(
        main,
        ["pretrain", *data, "--out", str(tmp_path), "--model", "tiny", "--mode", "gram", "--max-steps", "2"]
        + ["--run-id", "g", *common],
    )
    assert res.exit_code == 0, res.output
    cfg = json.loads((tmp_path / "g" / "model" / "config.json").read_text())
    assert cfg["config"]["mode"] == "gram" and isinstance(cfg["untrained_tokens"], list)
    model = HRRBert.from_pretrained(tmp_path / "g" / "model")
    assert model.embeddings.token.spec is MODES["gram"]
    res = CliRunner().invoke(
        main,
        ["finetune", str(tmp_path / "g"), "--dataset", *data, "--task", "chapters", "--epochs", "1"]
        + ["--out", str(tmp_path / "ft"), *common],
    )
    assert res.exit_code == 0, res.output
    assert "trial 0   test: accuracy" in res.output
    # explain refuses it in one line, naming the mode and the modes it takes
    res = CliRunner().invoke(main, ["explain", str(tmp_path / "g" / "model"), "A00.1"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "'gram'" in res.output and "composes nothing" in res.output and "base" in res.output


def test_the_commands_offer_the_rivals():
    from pipelines.eval.config import ExperimentConfig

    cfg = ExperimentConfig(dataset="d", program="p", configurations=("unstructured", "gram", "ancestors"))
    assert cfg.configurations == ("unstructured", "gram", "ancestors")
    for command in (["pretrain", "--help"], ["experiment", "--help"]):
        out = CliRunner().invoke(main, command).output
        assert "gram" in out and "ancestors" in out, command
