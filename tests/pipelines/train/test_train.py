"""Pretraining: masking rules, schedule, run folder, weights-only checkpoints, exact resume, CLI."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from hrr_kernel import load_program
from model import HRRBert
from pipelines.cli import main
from pipelines.data.sequences import TokenizedDataset, epoch_order, step_generator
from pipelines.train.checkpoint import list_checkpoints
from pipelines.train.mlm import mask_tokens
from pipelines.train.pretrain import pretrain
from pipelines.train.runtime import warmup_cosine

TINY = dict(model="tiny", batch_size=8, log_every=1, device="cpu", progress=False, max_val=8)


def losses(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in lines if "loss" in r], [r for r in lines if "val_mlm_acc" in r]


def test_mask_tokens_80_10_10_and_never_special():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (400, 128), generator=g)
    ids[:, 0] = 1  # [CLS]
    ids[:, 100:] = 0  # [PAD]
    att = ids != 0
    special = torch.tensor([0, 1, 2, 3, 4])
    out, chosen, targets = mask_tokens(
        ids, att, mask_id=3, special=special, candidates=torch.arange(5, 1000), prob=0.15, generator=g
    )
    assert not chosen[:, 0].any() and not chosen[:, 100:].any()
    rate = chosen.float().sum() / (att.sum() - 400)
    assert abs(rate - 0.15) < 0.005
    assert torch.equal(targets, ids[chosen])
    n = chosen.sum()
    masked = (out[chosen] == 3).float().sum() / n
    kept = (out[chosen] == ids[chosen]).float().sum() / n
    assert abs(masked - 0.8) < 0.01 and abs(kept - 0.1) < 0.01  # the rest (~10 %) random
    assert torch.equal(out[~chosen], ids[~chosen])
    assert (out[chosen] >= 3).all()  # random replacements never draw special tokens other than [MASK]
    a = mask_tokens(
        ids,
        att,
        mask_id=3,
        special=special,
        candidates=torch.arange(5, 1000),
        prob=0.15,
        generator=step_generator(0, 5, 0),
    )
    b = mask_tokens(
        ids,
        att,
        mask_id=3,
        special=special,
        candidates=torch.arange(5, 1000),
        prob=0.15,
        generator=step_generator(0, 5, 0),
    )
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_schedule_and_data_order():
    f = warmup_cosine(100, 0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0) and f(55) == pytest.approx(0.5) and f(100) == pytest.approx(0.0)
    assert torch.equal(epoch_order(10, 0, 3), epoch_order(10, 0, 3))
    assert not torch.equal(epoch_order(50, 0, 0), epoch_order(50, 0, 1))


def test_pretrain_writes_run_folder(tmp_path, dataset_dir, program_dir):  # noqa: F811
    r = pretrain(
        dataset_dir, program_dir, out=tmp_path, mode="base", max_steps=4, save_every=2, topk=(2, 5), **TINY
    )
    run = r.run_dir
    assert r.completed and r.step == 4 and run.name == "pretrain-base-tiny-seed0"
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["program_id"] == program_dir.name and cfg["dataset_id"] == "testdataset0001"
    assert cfg["config"]["seed"] == 0 and cfg["versions"]["torch"] == torch.__version__
    train, val = losses(run)
    assert [s for s, _ in train] == [1, 2, 3, 4]
    assert val and {"val_mlm_acc", "val_top2", "val_top5", "val_loss"} <= set(val[-1])
    assert val[-1]["val_top5"] >= val[-1]["val_top2"] >= val[-1]["val_mlm_acc"]
    cks = list_checkpoints(run)
    assert [c.name for c in cks] == ["step-00000002.pt", "step-00000004.pt"]
    state = torch.load(cks[-1], weights_only=True)
    assert state["step"] == 4 and isinstance(state["rng"]["torch"], torch.Tensor)
    assert (run / "model" / "model.safetensors").is_file()
    with pytest.raises(Exception, match="already exists"):
        pretrain(dataset_dir, program_dir, out=tmp_path, mode="base", max_steps=4, **TINY)


class _Stop(Exception):
    pass


def test_pretrain_hands_the_configured_clip_to_the_loop(tmp_path, monkeypatch, dataset_dir, program_dir):  # noqa: F811
    """Guards against pretraining dropping ``clip`` on the way to the loop (whose own default is also 1.0,
    so the default config cannot tell): with ``clip=0.25`` the loop's options carry 0.25."""
    import pipelines.train.pretrain as pt

    seen = {}

    def capture(model, optimizer, scheduler, task, options, run_dir, **_):
        seen.update(model=model, opt=optimizer, task=task, options=options)
        raise _Stop

    monkeypatch.setattr(pt, "run_loop", capture)
    with pytest.raises(_Stop):
        pretrain(dataset_dir, program_dir, out=tmp_path, mode="base", max_steps=2, clip=0.25, **TINY)
    assert seen["options"].clip == 0.25


def _ordinary_codes(program_dir):  # noqa: F811
    """The program's concept ids that are not special tokens."""
    import numpy as np
    import pyarrow.parquet as pq

    codes = pq.read_table(program_dir / "concepts.parquet").column("code").to_pylist()
    return np.array([i for i, c in enumerate(codes) if not c.startswith("[")])


def _recoded_dataset(folder, program_dir, sizes, draw):  # noqa: F811
    """A fixture dataset whose patients keep their first token and get ``draw(rng, n)`` codes after it
    (``rng`` seeded once); returns the folder."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from train_fixtures import write_dataset

    ds = write_dataset(folder, program_dir, sizes=sizes)
    t = pq.read_table(ds / "patients.parquet")
    rng = np.random.default_rng(0)
    ids = [[r[0]] + draw(rng, len(r) - 1).tolist() for r in t["input_ids"].to_pylist()]
    t = t.set_column(t.column_names.index("input_ids"), "input_ids", pa.array(ids, pa.list_(pa.int32())))
    pq.write_table(t, ds / "patients.parquet")
    return ds


@pytest.fixture(scope="module")
def grouped_dataset(tmp_path_factory, program_dir):  # noqa: F811
    """Patients whose codes all come from one of 4 groups of the program's codes: a masked code's group is
    known from its context, so top-5 accuracy can reach ~5/6.5, against 5/26 for the unigram baseline."""
    import numpy as np

    sizes = {
        "pretrain_train": 400,
        "pretrain_val": 100,
        "finetune_train": 8,
        "finetune_val": 4,
        "test": 4,
        "rood": 4,
    }
    groups = np.array_split(_ordinary_codes(program_dir), 4)
    ds = _recoded_dataset(
        tmp_path_factory.mktemp("grouped") / "ds",
        program_dir,
        sizes,
        lambda rng, n: rng.choice(groups[rng.integers(4)], size=n),
    )
    return ds, groups


def _top5_on_hand_masked_codes(model, ds, program_dir) -> float:  # noqa: F811
    """Top-5 accuracy at the first code of every pretrain_val patient, masked here (not by mask_tokens),
    scored against the original code: a model trained on misaligned targets fails it even when its own
    metrics pass."""
    from hrr_kernel import load_program
    from pipelines.data.sequences import TokenizedDataset

    program = load_program(program_dir)
    seqs = TokenizedDataset(ds, program.program_id, program.n_concepts, model.pad_id).sequences(
        "pretrain_val", max_len=128, max_segments=100
    )
    b = seqs.batch(torch.arange(len(seqs)))
    rows = torch.arange(len(seqs))
    ids = b["input_ids"].clone()
    original = ids[rows, 1].clone()
    ids[rows, 1] = program.special_id("[MASK]")
    chosen = torch.zeros_like(b["attention_mask"], dtype=torch.bool)
    chosen[rows, 1] = True
    with torch.no_grad():
        logits = model.eval()(ids, b["segment_ids"], b["attention_mask"], mlm_mask=chosen)  # (P, N)
    return float((logits.topk(5, 1).indices == original[:, None]).any(1).float().mean())


@pytest.mark.parametrize("mode", ["unstructured", "add"])
def test_pretrain_learns_the_codes_context_predicts(tmp_path, grouped_dataset, program_dir, mode):  # noqa: F811
    ds, groups = grouped_dataset
    r = pretrain(
        ds,
        program_dir,
        out=tmp_path,
        mode=mode,
        max_steps=60,
        lr=3e-3,
        warmup=0.0,
        dropout=0.0,
        topk=(5,),
        **{**TINY, "batch_size": 32, "max_val": None},
    )
    baseline = 5 / sum(len(g) for g in groups)  # the unigram guess (codes are uniform)
    assert _top5_on_hand_masked_codes(r.model, ds, program_dir) > 2 * baseline
    _, val = losses(r.run_dir)
    assert val[-1]["val_top5"] > 2 * baseline


def test_pretrain_freq_mode_loss_falls(tmp_path, dataset_dir, program_dir):  # noqa: F811
    """Freq-mode pretraining learns, and its token matrix is the composition plus the fixed encoding of
    the dataset's binned log code frequencies (guards against the encoding being dropped or built from
    placeholder frequencies)."""
    r = pretrain(
        dataset_dir,
        program_dir,
        out=tmp_path,
        mode="freq",
        max_steps=30,
        lr=3e-3,
        warmup=0.0,
        dropout=0.0,
        **TINY,
    )
    train, _ = losses(r.run_dir)
    first, last = sum(x for _, x in train[:5]) / 5, sum(x for _, x in train[-5:]) / 5
    assert last < first
    # the frequency encoding enters the embedding and the tied decoder (guards against freq training as
    # base: no encoding, or one of placeholder frequencies): E = C + PE(round(log f * resolution))
    from hrr_kernel import load_program
    from hrr_kernel.embedding import sinusoidal_encoding

    tok = r.model.embeddings.token
    program = load_program(program_dir)
    ds = TokenizedDataset(dataset_dir, program.program_id, program.n_concepts, program.special_id("[PAD]"))
    res = r.model.config.freq_resolution
    pe = sinusoidal_encoding(torch.round(ds.log_frequency().double() * res), tok.dim).float()
    assert tok.freq_encoding is not None and len(torch.unique(pe, dim=0)) > 1
    torch.testing.assert_close(tok.freq_encoding, pe)
    with torch.no_grad():
        c = tok.compose_rows(None)
        torch.testing.assert_close(tok.matrix(), c + pe)
        h = torch.randn(3, tok.dim, generator=torch.Generator().manual_seed(0))
        torch.testing.assert_close(tok.decode(h), h @ (c + pe).t(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("softmax", ["full", "sampled"])
def test_resume_after_kill_gives_the_same_loss_curve(tmp_path, dataset_dir, program_dir, softmax):  # noqa: F811
    """Also with the sampled softmax, whose sparse gradients train with LazyAdamW (its state resumes)."""
    kw = dict(
        mode="add", max_steps=10, save_every=3, val_every=5, mlm_softmax=softmax, mlm_negatives=8, **TINY
    )
    full = pretrain(dataset_dir, program_dir, out=tmp_path / "a", **kw)
    # "killed" after step 7: the last checkpoint is step 6, step 7 was logged but is lost
    part = pretrain(dataset_dir, program_dir, out=tmp_path / "b", stop_after=7, **kw)
    assert not part.completed and losses(part.run_dir)[0][-1][0] == 7
    resumed = pretrain(dataset_dir, program_dir, out=tmp_path / "b", resume=True, **{**kw, "progress": True})
    assert resumed.completed and resumed.step == 10
    a, b = losses(full.run_dir), losses(resumed.run_dir)
    assert [s for s, _ in b[0]] == list(range(1, 11))  # step 7 logged once
    assert b[0] == a[0]  # exactly equal
    assert b[1] == a[1]  # validation records too
    sa = full.model.state_dict()
    sb = resumed.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def _pretrain_args(dataset_dir, program_dir, out, *extra: str) -> list[str]:  # noqa: F811
    """``hrrbert pretrain`` of the tiny model for two steps on the fixture, plus ``extra``."""
    return [
        "pretrain", str(dataset_dir), "--program", str(program_dir), "--out", str(out), "--model", "tiny",
        "--max-steps", "2", "--batch-size", "8", "--device", "cpu", "-q", *extra,
    ]  # fmt: skip


def test_cli_pretrain(tmp_path, dataset_dir, program_dir):  # noqa: F811
    res = CliRunner().invoke(
        main, _pretrain_args(dataset_dir, program_dir, tmp_path, "--mode", "cat", "--run-id", "r1")
    )
    assert res.exit_code == 0, res.output
    assert "steps     2" in res.output and (tmp_path / "r1" / "model" / "config.json").is_file()


def test_cli_pretrain_with_a_wide_composition(tmp_path, dataset_dir, program_dir):  # noqa: F811
    args = _pretrain_args(dataset_dir, program_dir, tmp_path, "--hrr-width", "256")
    res = CliRunner().invoke(main, [*args, "--run-id", "wide"])
    assert res.exit_code == 0, res.output
    m = HRRBert.from_pretrained(tmp_path / "wide" / "model", load_program(program_dir))
    assert m.config.hrr_width == 256 and m.embeddings.token.atoms.shape[1] == 256
    assert tuple(m.embeddings.token.projection.shape) == (256, m.config.dim)
    res = CliRunner().invoke(main, [*args, "--mode", "cat", "--run-id", "bad"])
    assert res.exit_code != 0 and "hrr_width" in res.output


def test_pretrain_with_the_sampled_softmax(tmp_path, dataset_dir, program_dir):  # noqa: F811
    """``--mlm-softmax sampled`` trains (finite losses, a step per batch), records what it used, and
    validates with the full softmax; ``auto`` on a program this small is the full softmax."""
    common = ["pretrain", str(dataset_dir), "--program", str(program_dir), "--out", str(tmp_path)]
    common += ["--model", "tiny", "--mode", "base", "--batch-size", "8", "--device", "cpu", "-q"]
    res = CliRunner().invoke(
        main, [*common, "--max-steps", "12", "--mlm-softmax", "sampled", "--mlm-negatives", "16",
               "--lr", "3e-3", "--log-every", "1", "--run-id", "s"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "s" / "config.json").read_text())
    assert run["mlm_softmax"] == {
        "asked": "sampled",
        "used": "sampled",
        "negatives": 16,
        "sparse_gradients": True,
    }
    records = [json.loads(line) for line in (tmp_path / "s" / "metrics.jsonl").open()]
    curve = [r["loss"] for r in records if "loss" in r]
    assert len(curve) == 12 and all(0 < x < 20 for x in curve)
    assert any("val_top10" in r for r in records)  # validated (with the full softmax)
    res = CliRunner().invoke(main, [*common, "--max-steps", "2", "--run-id", "a"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "a" / "config.json").read_text())["mlm_softmax"]["used"] == "full"


def test_bucketed_pretraining_batches_cover_whole_batches_once_and_group_lengths(dataset_dir, program_dir):  # noqa: F811
    from hrr_kernel import load_program
    from pipelines.train.config import PretrainConfig
    from pipelines.train.pretrain import MLMTask
    from pipelines.train.runtime import DistContext

    program = load_program(program_dir)
    ds = TokenizedDataset(dataset_dir, program.program_id, program.n_concepts, program.special_id("[PAD]"))
    train = ds.sequences("pretrain_train", max_len=64, max_segments=16)
    ctx = DistContext()
    for bucket in (0, 3):
        cfg = PretrainConfig(dataset=str(dataset_dir), program=str(program_dir), bucket_batches=bucket)
        task = MLMTask(cfg, train, train, None, ctx, "cpu", batch_size=4)
        batches = task.epoch_batches(0)
        rows = torch.cat(batches)
        assert len(batches) == task.per_epoch and all(len(b) == 4 for b in batches)
        assert len(rows.unique()) == len(rows) == task.per_epoch * 4  # each row at most once, whole batches
        if bucket:
            lengths = train.attention_mask.sum(1)
            plain = epoch_order(len(train), 0, 0)[: task.per_epoch * 4].split(4)
            spread = sum(int(lengths[b].max() - lengths[b].min()) for b in batches)
            assert spread <= sum(int(lengths[b].max() - lengths[b].min()) for b in plain)


@pytest.fixture(scope="module")
def narrow_dataset(tmp_path_factory, program_dir):  # noqa: F811
    """Patients coded from three quarters of the program's codes: the last quarter never occurs."""
    sizes = {
        "pretrain_train": 40,
        "pretrain_val": 10,
        "finetune_train": 4,
        "finetune_val": 4,
        "test": 4,
        "rood": 4,
    }
    used = _ordinary_codes(program_dir)
    used = used[: 3 * len(used) // 4]
    return _recoded_dataset(
        tmp_path_factory.mktemp("narrow") / "ds", program_dir, sizes, lambda rng, n: rng.choice(used, size=n)
    )


def test_train_vocabulary_scores_only_the_codes_pretraining_sees(narrow_dataset, program_dir):  # noqa: F811
    from hrr_kernel import load_program
    from pipelines.train.mlm import tokens_of

    program = load_program(program_dir)
    ds = TokenizedDataset(narrow_dataset, program.program_id, program.n_concepts, program.special_id("[PAD]"))
    train = ds.sequences("pretrain_train", max_len=32, max_segments=8)
    every, tok = tokens_of(program), tokens_of(program, train)
    assert every.scored is None
    seen = set(train.input_ids[train.attention_mask.bool()].tolist()) - set(every.special.tolist())
    assert set(torch.nonzero(tok.scored).flatten().tolist()) == seen
    assert tok.candidates.tolist() == sorted(seen)  # random replacements draw only scored codes
    assert len(seen) < len(every.candidates)  # the fixture has codes pretraining never sees


@pytest.mark.parametrize("vocabulary", ["train", "all"])
def test_codes_outside_the_train_vocabulary_get_no_gradient(
    tmp_path,
    narrow_dataset,
    program_dir,  # noqa: F811
    vocabulary,
):
    from hrr_kernel import load_program
    from pipelines.train.config import PretrainConfig
    from pipelines.train.mlm import tokens_of
    from pipelines.train.pretrain import build_model
    from pipelines.train.runtime import seed_everything

    r = pretrain(
        narrow_dataset,
        program_dir,
        out=tmp_path,
        mode="unstructured",
        max_steps=3,
        mlm_vocabulary=vocabulary,
        **TINY,
    )
    record = json.loads((r.run_dir / "config.json").read_text())["mlm_vocabulary"]
    program = load_program(program_dir)
    ds = TokenizedDataset(narrow_dataset, program.program_id, program.n_concepts, program.special_id("[PAD]"))
    mc = r.model.config
    train = ds.sequences("pretrain_train", max_len=mc.max_len, max_segments=mc.max_segments)
    seen = torch.zeros(program.n_concepts, dtype=torch.bool)
    seen[train.input_ids[train.attention_mask.bool()].unique()] = True
    seed_everything(0)
    init = build_model(
        PretrainConfig(str(narrow_dataset), str(program_dir), model="tiny", mode="unstructured"), program, ds
    )
    table, table0 = r.model.embeddings.token.table.detach(), init.embeddings.token.table.detach()
    bias = r.model.mlm.bias.detach()
    special = torch.isin(torch.arange(program.n_concepts), tokens_of(program).special)
    never = ~seen & ~special
    assert never.any() and not torch.equal(table[seen], table0[seen])  # trained codes moved
    if vocabulary == "train":
        assert record == {"scored": "train", "codes": int((seen & ~special).sum())}
        assert torch.equal(bias[never], torch.zeros_like(bias[never]))  # never seen: never scored
    else:
        assert record == {"scored": "all", "codes": int((~special).sum())}
        assert (bias[never] < 0).all()  # pushed down as negatives at every step
    # what pretraining never saw is settled when it ends: the mean of the trained codes' rows, recorded
    assert r.model.untrained_tokens == torch.nonzero(~seen).flatten().tolist()
    mean = table[seen & ~special].mean(0)
    assert torch.allclose(table[never], mean.expand(int(never.sum()), -1))


def test_mlm_vocabulary_is_checked():
    from pipelines.train.config import PretrainConfig

    assert PretrainConfig("d", "p").mlm_vocabulary == "all"  # the paper's softmax over every code
    with pytest.raises(ValueError, match="mlm_vocabulary"):
        PretrainConfig("d", "p", mlm_vocabulary="seen")
