"""The chapters probe (pipelines/eval/probe.py): its features written out by hand, the evaluation on the
fixture dataset, its record and report section, and the dense-feature fit it relies on."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from pipelines.data.sequences import TokenizedDataset
from pipelines.eval import records as R
from pipelines.eval.baselines import _Split, fit_logistic
from pipelines.eval.config import EvaluateConfig
from pipelines.eval.probe import PROBE_GRID, fit_dense_logistic, probe_features
from pipelines.eval.registry import EVALUATIONS, RunInputs
from pipelines.eval.sections import SectionInputs, probe_section


def _model(program_dir):  # noqa: F811
    from hrr_kernel import load_program
    from model import HRRBert, preset

    program = load_program(program_dir)
    torch.manual_seed(0)
    return HRRBert(preset("tiny", mode="base", max_len=64, max_segments=8), program).eval(), program


def test_the_features_are_cls_mean_state_and_the_mean_code_vectors(program_dir, dataset_dir):  # noqa: F811
    model, program = _model(program_dir)
    ds = TokenizedDataset(dataset_dir, program.program_id, program.n_concepts, model.pad_id)
    seqs = ds.sequences("test", max_len=64, max_segments=8, task="chapters", before_last_visit=True)
    x = probe_features(model, seqs, batch_size=5, device=torch.device("cpu"))
    d = model.config.dim
    assert x.shape == (len(seqs), 4 * d)
    special = model.special_tokens()
    with torch.no_grad():
        for i in (0, len(seqs) - 1):
            b = seqs.batch(torch.tensor([i]))
            ids, seg, att = b["input_ids"][0], b["segment_ids"][0], b["attention_mask"][0].bool()
            n = int(att.sum())
            ids, seg = ids[:n], seg[:n]
            e = model.embeddings.token(ids[None])[0]  # (n, D)
            h = model.encode(ids[None], seg[None], torch.ones(1, n, dtype=torch.bool))[0]
            code = ~special[ids]
            last = code & (seg == seg[code].max())
            want = torch.cat([h[0], h.mean(0), e[code].mean(0), e[last].mean(0)]).numpy()
            np.testing.assert_allclose(x[i], want, rtol=1e-4, atol=1e-5)


def test_fit_logistic_keeps_every_dense_column_whatever_its_sum():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5))
    x -= x.mean(0)  # standardised: every column sums to about zero
    y = (x[:, [0]] + x[:, [4]] > 0).astype(np.int8)
    s = _Split("t", np.arange(60), x, y, None)
    lr, choice = fit_logistic(s, s, seed=0, grid=PROBE_GRID)
    assert list(lr.columns) == [0, 1, 2, 3, 4] and choice["features"] == 5
    assert choice["grid"] == [["balanced", 1.0], ["balanced", 0.1], ["balanced", 0.01]]


@pytest.mark.parametrize("balanced", [True, False])
@pytest.mark.parametrize("c", [1.0, 0.05])
def test_the_dense_fit_is_sklearns_l2_logistic_regression(balanced, c):
    """Against sklearn's lbfgs to a tight tolerance, on collinear features like the probe's (a column that
    is the sum of two others), per label; a label of one class predicts its share."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 6))
    x = np.c_[x, x[:, 0] + x[:, 1]]  # rank 6 of 7 columns
    y = np.c_[x[:, 0] - x[:, 3] + rng.normal(size=300) > 0.8, x[:, 2] > 0, np.zeros(300)].astype(np.int8)
    got = fit_dense_logistic(x, y, c=c, balanced=balanced, tol=1e-10)
    p = got.predict(x)
    assert np.all(p[:, 2] == 0.0)
    for j in (0, 1):
        want = LogisticRegression(
            C=c, class_weight="balanced" if balanced else None, max_iter=10_000, tol=1e-12
        )
        want.fit(x, y[:, j])
        np.testing.assert_allclose(p[:, j], want.predict_proba(x)[:, 1], atol=1e-5)


def _run(program_dir, dataset_dir, tmp_path, **cfg):  # noqa: F811
    model, program = _model(program_dir)
    ds = TokenizedDataset(dataset_dir, program.program_id, program.n_concepts, model.pad_id)
    ev = next(e for e in EVALUATIONS if e.name == "chapters_probe")
    c = EvaluateConfig(pretrained="p", dataset="d", program="g", out=str(tmp_path), **cfg)
    return ev.run(
        ev.inputs(RunInputs(c, model, program, ds, None, ds, torch.device("cpu"), tmp_path, "x"), c)
    )


def test_the_evaluation_on_the_fixture_dataset(program_dir, dataset_dir, tmp_path, one_thread, monkeypatch):  # noqa: F811
    rec = _run(program_dir, dataset_dir, tmp_path)
    assert isinstance(rec, R.ChaptersProbe)
    test = rec.scores["test"]
    assert test["n"] == 12 and 0 <= test["f1"] <= 1
    iv = test["f1_interval"]
    assert iv["method"].startswith("patient bootstrap") and iv["estimate"] == pytest.approx(test["f1"])
    assert "rood_unseen" not in rec.scores  # the fixture marks no ROOD-unseen patient
    assert rec.features["width"] == 4 * 64 and len(rec.features["parts"]) == 4
    assert rec.patients == {"finetune_train": 24, "finetune_val": 12}
    assert [rec.choice["class_weight"], rec.choice["C"]] in [[cw, c] for cw, c in PROBE_GRID]
    d = json.loads(json.dumps(rec.to_dict()))
    assert R.ChaptersProbe.from_dict(d) == rec and R.ChaptersProbe.from_dict({}) is None
    assert _run(program_dir, dataset_dir, tmp_path, chapters_probe=False) is None
    # the section: the probe beside the fine-tuned heads (none here) and the baselines (none here)
    exp = SimpleNamespace(configurations={"base": [SimpleNamespace(seed=0)]}, baselines=None)
    results: dict = {}
    monkeypatch.setattr("pipelines.eval.values.conf_interval", lambda runs, task, split, metric: None)
    text = "\n".join(probe_section(SectionInputs(exp, {"base": [rec]}, tmp_path, results)))
    assert text.startswith("## Chapters probe: what the frozen pretrained model holds")
    assert "| base: probe | 1 |" in text and "| base: fine-tuned | – |" in text
    assert results["chapters_probe"]["base"]["test"]["estimate"] == pytest.approx(test["f1"])
    assert probe_section(SectionInputs(exp, {"base": [None]}, tmp_path, {})) == []
