"""The next-visit heads that also read the history's categories (``--next-visit-head history``, ``copy``
and ``decoder``): their features on a hand-built set, what they learn when the next visit repeats the
history, the copy head's mixture, the decoder's category log probabilities against the model's own
masked-code prediction, and the evaluation and report carrying them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from test_next_visit_eval import _run
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from pipelines.data.next_visit import NextVisitSet
from pipelines.eval.config import EvaluateConfig
from pipelines.eval.next_visit import (
    _bands,
    _Head,
    decoded_categories,
    fit_head,
    history_features,
    smoothed_prior,
)
from pipelines.eval.next_visit_report import next_visit_section
from pipelines.eval.next_visit_scores import frequency_quintiles, hits, scores
from pipelines.eval.sections import SectionInputs


def _set(
    history_visits: np.ndarray, history_last: np.ndarray, target: np.ndarray, split: str
) -> NextVisitSet:
    n = target.shape[0]
    return NextVisitSet(
        split,
        np.arange(n, dtype=np.int64),
        sp.csr_matrix(target.astype(np.float32)),
        sp.csr_matrix(history_visits.astype(np.float32)),
        sp.csr_matrix(history_last.astype(np.float32)),
        np.ones(n, bool),
        {"kept": n},
    )


def test_history_features_by_hand():
    # patient 0: category 1 in two history visits (latest the 2nd, i.e. 1 + 1), category 3 in the 1st only;
    # patient 1: category 0 in its only history visit
    s = _set(
        np.array([[0, 2, 0, 1], [1, 0, 0, 0]]),
        np.array([[0, 2, 0, 1], [1, 0, 0, 0]]),
        np.array([[1, 0, 0, 0], [0, 1, 0, 0]]),
        "t",
    )
    visits, latest = history_features(s)
    np.testing.assert_allclose(visits, np.log1p([[0, 2, 0, 1], [1, 0, 0, 0]]), rtol=1e-6)
    np.testing.assert_array_equal(latest, [[0, 1, 0, 0], [1, 0, 0, 0]])
    v1, l1 = history_features(s, np.array([1]))
    np.testing.assert_array_equal(l1, [[1, 0, 0, 0]])
    np.testing.assert_allclose(v1, visits[1:])
    # one column: its latest-visit flag still compares with the latest visit over every category
    _, l3 = history_features(s, None, np.array([3]))
    np.testing.assert_array_equal(l3, [[0], [0]])


def _copy_cohort(n: int, seed: int) -> tuple[np.ndarray, NextVisitSet]:
    """40 categories of falling frequency; each patient's next visit repeats one category of its history
    (a rare one as often as a common one) and adds a common one; the encoder features are noise."""
    rng = np.random.default_rng(seed)
    c = 40
    hist, last, target = np.zeros((n, c)), np.zeros((n, c)), np.zeros((n, c))
    for i in range(n):
        held = rng.choice(c, size=3, replace=False)
        hist[i, held], last[i, held] = 1, 1
        target[i, rng.choice(held)] = 1
        target[i, rng.integers(0, 3)] = 1  # one of three common categories
    return rng.normal(size=(n, 8)).astype(np.float32), _set(hist, last, target, f"s{seed}")


def test_the_history_head_learns_to_copy_what_the_linear_head_cannot():
    (xt, train), (xv, val), (xs, test) = (_copy_cohort(n, seed) for n, seed in ((600, 0), (200, 1), (300, 2)))
    kw = {"epochs": 40, "seed": 0, "device": torch.device("cpu")}
    count = np.asarray(train.target.sum(0)).ravel()
    q = frequency_quintiles(test.target, count)
    recall = {}
    infos = {}
    for kind in ("linear", "history", "copy"):
        score, infos[kind] = fit_head(xt, train, xv, val, head_kind=kind, **kw)
        assert infos[kind]["kind"] == kind
        ranked = np.argsort(-score(xs, test), axis=1, kind="stable")[:, :30]
        recall[kind] = scores(hits(ranked, test.target, q), intervals=False)["recall"]["10"]
    info = infos["history"]
    w = info["history_weights"]
    assert len(w["visits"]) == len(w["latest"]) == info["history_bands"]
    assert max(v + la for v, la in zip(w["visits"], w["latest"], strict=True)) > 1.0
    # three history categories plus the three common ones fit in the top 10: copying finds nearly every target
    assert recall["history"] > 0.9 and recall["history"] > recall["linear"] + 0.2
    assert recall["copy"] > 0.9 and recall["copy"] > recall["linear"] + 0.2
    assert 0.0 < infos["copy"]["copy_share_val"] < 1.0 and set(infos["copy"]["copy_weights"]) == {
        "visits", "latest", "log_prior"}  # fmt: skip


def test_the_copy_head_is_a_mixture_of_two_distributions():
    """Each patient's log probabilities sum to one; a patient with no history category gets the softmax
    alone; with the gate forced open, only the history's categories keep any probability."""
    (xt, _), (xv, val) = _copy_cohort(300, 0), _copy_cohort(100, 1)
    lp = np.log(np.full(40, 1 / 40))
    head = _Head("copy", xt.shape[1], lp, torch.zeros(40, dtype=torch.int64))
    with torch.no_grad():
        head.linear.weight.normal_()
        head.copy.normal_()
    visits, latest = (torch.from_numpy(h) for h in history_features(val))
    visits[0] = 0  # patient 0 holds nothing
    latest[0] = 0
    x = torch.from_numpy(xv)
    out = head.log_probs(x, (visits, latest))
    torch.testing.assert_close(torch.logsumexp(out, 1), torch.zeros(out.shape[0]), atol=1e-5, rtol=0)
    soft = torch.log_softmax(head.linear(x[:1]), 1)
    torch.testing.assert_close(out[:1], soft)
    with torch.no_grad():
        head.gate.bias.fill_(50.0)
    with torch.no_grad():
        opened = head.log_probs(x, (visits, latest))[1:]
    held = (visits[1:] > 0).numpy()
    assert np.all(opened.exp().numpy()[~held] < 1e-12)


def test_smoothed_prior_and_bands_by_hand():
    lp = smoothed_prior(np.array([3, 1, 0]), np.array([0, 1, 3]))
    # 0.9 * (3/4, 1/4, 0) + 0.1 * (1/7, 2/7, 4/7)
    np.testing.assert_allclose(np.exp(lp), [0.675 + 0.1 / 7, 0.225 + 0.2 / 7, 0.4 / 7])
    np.testing.assert_allclose(smoothed_prior(np.array([1, 3]), None), np.log([0.25, 0.75]))
    b = _bands(np.log(np.array([1e-5, 1e-4, 1e-3, 1e-2, 1e-1])), 5)
    np.testing.assert_array_equal(b, [0, 1, 2, 3, 4])  # rarest first


def test_a_category_seen_only_in_pretraining_is_ranked_from_the_history():
    """Category 39 is never a training target; the history head still ranks it (its prior from the
    pretraining counts) and puts it in the top 10 of 40 for the patients whose history holds it, low for
    the others; the linear head never ranks it."""
    (xt, train), (xv, val), (xs, test) = (_copy_cohort(n, s) for n, s in ((600, 0), (200, 1), (300, 2)))
    keep = np.asarray(train.target[:, 39].todense()).ravel() == 0
    train = train.subset(keep)
    xt = xt[keep]
    pre = np.asarray(train.target.sum(0)).ravel() + np.asarray(train.history_visits.sum(0)).ravel()
    kw = {"epochs": 40, "seed": 0, "device": torch.device("cpu"), "pretrain_count": pre}
    holds = np.asarray(test.history_visits[:, 39].todense()).ravel() > 0
    assert holds.any()
    s_lin, _ = fit_head(xt, train, xv, val, head_kind="linear", **kw)
    assert np.isneginf(s_lin(xs, test)[:, 39]).all()
    s_hist, info = fit_head(xt, train, xv, val, head_kind="history", **kw)
    assert info["outputs_without_training_target"] >= 1
    rank39 = (s_hist(xs, test) > s_hist(xs, test)[:, [39]]).sum(1)  # categories ranked above 39
    assert np.median(rank39[holds]) <= 10 and np.median(rank39[~holds]) >= 30, (rank39[holds], rank39[~holds])


def test_an_unknown_head_is_refused():
    with pytest.raises(ValueError, match="next-visit-head must be one of"):
        EvaluateConfig(pretrained="p", dataset="d", program="g", out="o", next_visit_head="pointer")
    _, train = _copy_cohort(20, 0)
    with pytest.raises(ValueError, match="not one of"):
        fit_head(np.zeros((20, 2), np.float32), train, np.zeros((20, 2), np.float32), train, epochs=1, seed=0,
                 device=torch.device("cpu"), head_kind="pointer")  # fmt: skip


@pytest.mark.parametrize("kind", ["history", "copy", "decoder"])
def test_the_evaluation_and_report_carry_the_head(program_dir, dataset_dir, tmp_path, one_thread, kind):  # noqa: F811
    rec = _run(program_dir, dataset_dir, tmp_path, next_visit_epochs=3, next_visit_head=kind)
    rows = {"visits", "latest"} | ({"decoder"} if kind == "decoder" else set())
    assert rec.head["kind"] == kind and set(rec.head["history_weights"]) == rows
    assert len(rec.head["history_weights"]["visits"]) == rec.head["history_bands"]
    assert ("copy_weights" in rec.head) == (kind != "history")
    exp = SimpleNamespace(configurations={"base": [SimpleNamespace(seed=0)], "unstructured": []})
    text = "\n".join(
        next_visit_section(SectionInputs(exp, {"base": [rec], "unstructured": []}, tmp_path, {}))
    )
    assert f"--next-visit-head {kind}" in text and "log1p(history visits holding it)" in text
    assert ("copy distribution over the history's categories" in text) == (kind != "history")
    assert ("the pretrained decoder's log probability" in text) == (kind == "decoder")


def _decoder_cohort(n: int, seed: int) -> tuple[np.ndarray, NextVisitSet, np.ndarray]:
    """40 categories; each patient's next visit holds one category its history does not hold, which only
    the decoder's log probabilities (``(n, 40)``: that category at log 0.5, the others spread) point to."""
    rng = np.random.default_rng(seed)
    c = 40
    hist, target = np.zeros((n, c)), np.zeros((n, c))
    decoded = np.full((n, c), np.log(0.5 / (c - 1)), np.float32)
    for i in range(n):
        held = rng.choice(c, size=3, replace=False)
        hist[i, held] = 1
        nxt = rng.choice(np.setdiff1d(np.arange(c), held))
        target[i, nxt] = 1
        decoded[i, nxt] = np.log(0.5)
    return rng.normal(size=(n, 8)).astype(np.float32), _set(hist, hist, target, f"s{seed}"), decoded


def test_the_decoder_head_reads_the_decoders_category_log_probabilities():
    (xt, train, dt), (xv, val, dv), (xs, test, ds) = (
        _decoder_cohort(n, s) for n, s in ((600, 0), (200, 1), (300, 2))
    )
    kw = {"epochs": 40, "seed": 0, "device": torch.device("cpu")}
    decoded = {"s0": dt, "s1": dv, "s2": ds}
    count = np.asarray(train.target.sum(0)).ravel()
    q = frequency_quintiles(test.target, count)
    recall = {}
    for kind in ("copy", "decoder"):
        score, info = fit_head(xt, train, xv, val, head_kind=kind, decoded=decoded, **kw)
        ranked = np.argsort(-score(xs, test), axis=1, kind="stable")[:, :30]
        recall[kind] = scores(hits(ranked, test.target, q, ks=(1,)), ks=(1,), intervals=False)["recall"]["1"]
    assert recall["decoder"] > 0.9 and recall["copy"] < 0.2, recall
    assert max(info["history_weights"]["decoder"]) > 1.0
    with pytest.raises(ValueError, match="decoded="):
        fit_head(xt, train, xv, val, head_kind="decoder", **kw)


def test_decoded_categories_are_the_masked_code_prediction_summed_by_category(
    program_dir, dataset_dir, one_thread  # noqa: F811
):  # fmt: skip
    """For each patient: a [MASK] as the first code of a new visit after the history, the model's
    masked_log_probs there, the probabilities summed over each category's codes."""
    from hrr_kernel import load_program
    from model import HRRBert, preset
    from pipelines.data.next_visit import CategorySpace
    from pipelines.data.sequences import TokenizedDataset

    program = load_program(program_dir)
    torch.manual_seed(0)
    model = HRRBert(preset("tiny", mode="base", max_len=64, max_segments=8), program).eval()
    data = TokenizedDataset(dataset_dir, program.program_id, program.n_concepts, model.pad_id)
    space = CategorySpace.of_program(program.concept_vocabularies, program.concept_codes)
    seqs = data.sequences("test", max_len=64, max_segments=8, before_last_visit=True)
    got = decoded_categories(model, seqs, space, torch.device("cpu"), batch_size=5)  # (P, C)
    assert got.shape == (len(seqs), len(space))
    assert np.all(np.exp(got).sum(1) <= 1 + 1e-4)
    mask_id = list(program.concept_codes).index("[MASK]")
    for i in (0, len(seqs) - 1):
        b = seqs.batch(torch.tensor([i]))
        n = int(b["attention_mask"].sum())
        ids = torch.cat([b["input_ids"][0, :n], torch.tensor([mask_id])])[None]
        seg = torch.cat([b["segment_ids"][0, :n], b["segment_ids"][0, n - 1 : n] + 1])[None]
        with torch.no_grad():
            lp = model.masked_log_probs(ids, seg, torch.ones_like(ids), torch.arange(n + 1)[None] == n)[0]
        want = np.full(len(space), 0.0)
        np.add.at(want, space.of_concept[space.of_concept >= 0], lp.exp().numpy()[space.of_concept >= 0])
        np.testing.assert_allclose(got[i], np.log(np.maximum(want, 1e-12)), rtol=1e-4, atol=1e-4)
