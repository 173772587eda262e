"""The sampled MLM softmax: candidate logits and their gradients against a float64 reference built from
the full matrix, the candidates' logQ correction against its formula and against the frequencies it
predicts, and the sampled loss equal to the full one when every code is a candidate."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from model import HRRBert, preset
from pipelines.train.mlm import Sampler, mlm_step, sample_candidates, sampler_of, tokens_of


def make(program, mode):
    torch.manual_seed(0)
    return HRRBert(preset("tiny", mode=mode), program).double().eval()


def batch(program, b=3, t=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, program.n_concepts, (b, t), generator=g)
    ids[:, 0] = 1  # [CLS]
    seg = torch.arange(t).div(3, rounding_mode="floor").expand(b, t).clone()
    att = torch.ones(b, t, dtype=torch.bool)
    att[0, 6:] = False
    ids[0, 6:] = 0
    mlm = torch.zeros_like(att)
    mlm[:, 2] = mlm[1:, 5] = True
    return ids, seg, att, mlm


@pytest.mark.parametrize("mode", ["unstructured", "base", "cat", "gram"])
def test_candidate_logits_and_gradients_match_a_float64_loop_over_the_full_matrix(program, mode):
    ids, seg, att, mlm = batch(program)
    cand = torch.tensor(sorted({7, 11, program.n_concepts - 1, *ids[mlm].tolist()}))
    where = torch.searchsorted(cand, ids[mlm])
    log_q = torch.linspace(-3.0, 0.0, len(cand), dtype=torch.float64)
    model = make(program, mode)
    params = [p for p in model.parameters() if p.requires_grad]

    logits = model(ids, seg, att, mlm_mask=mlm, candidates=cand)  # (M, K)
    loss = F.cross_entropy(logits - log_q, where)
    grads = torch.autograd.grad(loss, params, allow_unused=True)

    # reference: every row composed, the head's transform, then one dot product per (position, candidate)
    e = model.token_matrix()  # (N, D)
    h = model.encode(ids, seg, att, token_matrix=e)[mlm]  # (M, D)
    h = model.mlm.norm(F.gelu(model.mlm.dense(h)))
    ref = torch.stack(
        [torch.stack([h[m] @ e[c] + model.mlm.bias[c] for c in cand.tolist()]) for m in range(h.shape[0])]
    )  # (M, K)
    ref_loss = (
        -sum((ref[m] - log_q)[where[m]] - torch.logsumexp(ref[m] - log_q, 0) for m in range(h.shape[0]))
        / h.shape[0]
    )
    ref_grads = torch.autograd.grad(ref_loss, params, allow_unused=True)

    assert logits.dtype == torch.float64 and logits.shape == (int(mlm.sum()), len(cand))
    torch.testing.assert_close(logits, ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(logits, model(ids, seg, att, mlm_mask=mlm)[:, cand], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads, ref_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-12)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_candidates_and_their_log_q():
    n = 12
    p = torch.tensor([0.0] * 2 + [0.05] * 8 + [0.3, 0.3], dtype=torch.float64)
    f = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
    f = f / f.sum()
    s = Sampler(p, f, negatives=5)
    targets = torch.tensor([9, 3, 3])
    cand, where, log_q = sample_candidates(targets, s, torch.Generator().manual_seed(0))
    assert cand.tolist() == sorted(set(cand.tolist())) and {3, 9} <= set(cand.tolist())
    assert not ({0, 1} & set(cand.tolist()))  # a concept of proposal 0 is only a candidate as a target
    assert cand[where].tolist() == targets.tolist()
    for k, c in enumerate(cand.tolist()):
        expected = 1.0 - (1.0 - float(p[c])) ** 5 * (1.0 - float(f[c])) ** 3
        assert math.isclose(float(log_q[k]), math.log(expected), rel_tol=1e-6)


def test_log_q_is_the_frequency_a_concept_is_drawn():
    p = torch.tensor([0.0, 0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    s = Sampler(p, torch.zeros(5, dtype=torch.float64), negatives=6)
    g = torch.Generator().manual_seed(1)
    trials = 4000
    seen = torch.zeros(5)
    for _ in range(trials):
        cand, _, log_q = sample_candidates(torch.tensor([], dtype=torch.int64), s, g)
        seen[cand] += 1
    predicted = 1.0 - (1.0 - p) ** 6
    assert seen[0] == 0
    for c in range(1, 5):  # within 4 binomial standard deviations
        sd = math.sqrt(predicted[c] * (1 - predicted[c]) / trials)
        assert abs(seen[c] / trials - predicted[c]) < 4 * sd + 1e-9, c


def test_the_sampled_step_is_the_full_step_when_every_code_is_a_candidate(program):
    g = torch.Generator().manual_seed(3)
    n = program.n_concepts
    ids = torch.randint(5, n, (4, 10), generator=g)
    ids[:, 0] = 1
    b = {"input_ids": ids, "segment_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
    train = SimpleNamespace(input_ids=ids, attention_mask=b["attention_mask"])
    tok = tokens_of(program)
    scored = torch.ones(n, dtype=torch.bool)
    scored[tok.special] = False  # neither softmax scores the special tokens
    tok = replace(tok, scored=scored)
    cfg, ctx = SimpleNamespace(seed=0, mask_prob=0.3), SimpleNamespace(rank=0)
    model = make(program, "base").train()
    full = mlm_step(model, b, tok, cfg, 0, ctx, torch.device("cpu"))
    # 10^6 draws: every non-special code is a candidate with probability 1 - 1e-30, so log_q is 0
    sampler = sampler_of(tok, train, n, 1_000_000)
    assert float(sampler.proposal[tok.special].sum()) == 0.0
    sampled = mlm_step(model, b, replace(tok, sampler=sampler), cfg, 0, ctx, "cpu")
    assert sampled.weight == full.weight > 0
    torch.testing.assert_close(sampled.loss, full.loss, rtol=1e-9, atol=1e-9)
