"""MemN2N and MemNN: shapes, masking, tying schemes, position encoding, hard attention, learning."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hrr_kernel import HRREmbedding
from model import MemN2N, MemN2NConfig, MemNN, MemNNConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


W, N, A, D = 10, 30, 5, 16


def plain():
    return nn.Embedding(N, D)


def batch(b=3, m=6, length=3, q=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    facts = torch.randint(1, W + N, (b, m, length), generator=g)
    facts[0, 4:] = 0  # row 0 has 4 memories
    question = torch.randint(1, W, (b, q), generator=g)
    return facts, question


def cfg(**kw):
    base = dict(n_words=W, n_codes=N, n_answers=A, dim=D, hops=3, max_memories=8, max_fact_len=4)
    return MemN2NConfig(**(base | kw))


@pytest.mark.parametrize("tying,n_emb", [("adjacent", 4), ("layerwise", 3), ("none", 7)])
@pytest.mark.parametrize("encoding", ["bow", "position"])
def test_shapes_and_tying(tying, n_emb, encoding):
    model = MemN2N(cfg(tying=tying, encoding=encoding), plain)
    assert len(model.embeddings) == n_emb
    facts, q = batch()
    logits, att = model(facts, q)
    assert logits.shape == (3, A)
    assert len(att) == 3 and all(a.shape == (3, 6) for a in att)
    for a in att:
        assert torch.allclose(a.sum(-1), torch.ones(3))
        assert torch.all(a[0, 4:] == 0)  # padded memories get no attention
    if tying == "adjacent":  # C^k is A^{k+1}: same module
        assert model.c_index[:-1] == model.a_index[1:] and model.b_index == model.a_index[0]
    if tying == "layerwise":
        assert set(model.a_index) == {0} and set(model.c_index) == {1} and model.h is not None


def test_parameter_counts_order():
    counts = {t: MemN2N(cfg(tying=t), plain).num_parameters() for t in ("adjacent", "layerwise", "none")}
    assert counts["layerwise"] < counts["adjacent"] < counts["none"]


def test_padding_does_not_change_output():
    torch.manual_seed(0)
    model = MemN2N(cfg(temporal=True), plain).eval()
    facts, q = batch(b=1)
    facts[0, 4:] = 0
    short = facts[:, :4]
    a, _ = model(facts, q)
    b, _ = model(short, q)
    assert torch.allclose(a, b, atol=1e-6)


def test_position_encoding_is_order_sensitive_bow_is_not():
    torch.manual_seed(0)
    facts, q = batch(b=1)
    flipped = facts.flip(-1)
    for enc, same in (("bow", True), ("position", False)):
        model = MemN2N(cfg(encoding=enc, temporal=False), plain).eval()
        a, _ = model(facts, q)
        b, _ = model(flipped, q)
        assert torch.allclose(a, b, atol=1e-6) == same


def test_hrr_code_embedding(program):
    c = MemN2NConfig(n_words=W, n_codes=program.n_concepts, n_answers=A, dim=D, hops=2, max_memories=8)
    model = MemN2N(c, lambda: HRREmbedding(program, D, "base"))
    facts = torch.randint(W, W + program.n_concepts, (2, 5, 3))
    logits, att = model(facts, torch.randint(1, W, (2, 3)))
    assert logits.shape == (2, A) and len(att) == 2
    logits.sum().backward()
    assert model.embeddings[0].tokens.code.atoms.grad is not None


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda f, q: (torch.zeros_like(f), q), "no memories"),
        (lambda f, q: (f, torch.ones(f.shape[0], 40, dtype=torch.long)), "max_question_len"),
        (lambda f, q: (f.clone().fill_(W + N), q), "ids must lie"),
        (lambda f, q: (torch.ones(f.shape[0], 9, 3, dtype=torch.long), q), "max_memories"),
        (lambda f, q: (f.float(), q), "integer"),
    ],
)
def test_bad_input(mutate, match):
    model = MemN2N(cfg(), plain)
    facts, q = batch()
    with pytest.raises(ValueError, match=match):
        model(*mutate(facts, q))


def test_config_validation():
    with pytest.raises(ValueError, match="tying"):
        cfg(tying="bogus")
    with pytest.raises(ValueError, match="hops"):
        cfg(hops=0)


def toy_task(n=96, seed=0):
    """The answer is the word of the (unique) fact that holds the code the question names."""
    g = torch.Generator().manual_seed(seed)
    m = 5
    codes = torch.stack([torch.randperm(N, generator=g)[:m] for _ in range(n)]) + W  # (n, M)
    words = torch.randint(1, A + 1, (n, m), generator=g)  # answer words 1..A
    facts = torch.stack([codes, words], -1)  # (n, M, 2)
    pick = torch.randint(0, m, (n,), generator=g)
    question = torch.stack([torch.full((n,), A + 1), codes[torch.arange(n), pick]], -1)  # (n, 2)
    answer = words[torch.arange(n), pick] - 1
    return {"facts": facts, "question": question, "answer": answer, "supporting": pick[:, None]}


@pytest.mark.parametrize("kind", ["memn2n", "memnn"])
def test_learns_to_read_the_supporting_fact(kind):
    torch.manual_seed(0)
    data = toy_task()
    if kind == "memn2n":
        model = MemN2N(cfg(hops=1, encoding="bow", temporal=False), plain)
    else:
        model = MemNN(MemNNConfig(n_words=W, n_codes=N, n_answers=A, dim=D, hops=1, max_memories=8), plain)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(80):
        loss, _ = model.loss(data)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]
    logits, att = model.predict(data["facts"], data["question"])
    assert (logits.argmax(-1) == data["answer"]).float().mean() > 0.6
    assert att[0].shape == (96, 5)
    # on questions it never saw, it reads the supporting fact (chance 1/5) and answers above chance (1/A)
    held = toy_task(seed=1)
    logits, att = model.eval().predict(held["facts"], held["question"])
    assert (att[0].argmax(-1) == held["supporting"][:, 0]).float().mean() > 0.9
    assert (logits.argmax(-1) == held["answer"]).float().mean() > 1.5 / A


def test_memnn_hard_attention_is_one_hot():
    model = MemNN(MemNNConfig(n_words=W, n_codes=N, n_answers=A, dim=D, hops=2, max_memories=8), plain)
    facts, q = batch()
    logits, scores, chosen = model(facts, q)
    assert logits.shape == (3, A) and chosen.shape == (3, 2)
    assert all(s.shape == (3, 7) for s in scores)
    assert torch.all(chosen[0] <= 4)  # never a padded slot (slots 5, 6 of row 0)
    _, att = model.predict(facts, q)
    assert all(torch.all(a.sum(-1) <= 1) for a in att)
    # teacher forcing follows the gold supporting facts
    sup = torch.tensor([[2, -1], [0, 1], [-1, -1]])
    _, _, chosen = model(facts, q, sup)
    assert chosen.tolist() == [[3, 0], [1, 2], [0, 0]]
