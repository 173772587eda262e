"""Baselines and ceilings (:mod:`pipelines.eval.baselines`) on the fixture program: the masked positions
of the models' MLM accuracy, the task baselines on the heads' patients, the ceiling aligned by hospital
and subject id, the folder read back, the command and the experiment's step."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from train_fixtures import dataset_dir, program_dir, write_dataset  # noqa: F401

from pipelines.cli import main
from pipelines.data.sequences import Sequences, TokenizedDataset
from pipelines.errors import InputFileError, PipelineError
from pipelines.eval.baselines import (
    MODELS,
    N_CHAPTER_SLOTS,
    chapter_slots,
    compute_baselines,
    history_chapter_features,
    read_baselines,
)
from pipelines.eval.baselines_mlm import MLMMasking, baseline_ranks, code_matrix, masked_positions
from pipelines.eval.experiment import ExperimentConfig, run_experiment
from pipelines.eval.history_bound import CATALOG_FILE, CODES_FILE, chronic_shares, truth_features

SIZES = {"pretrain_train": 120, "pretrain_val": 30, "finetune_train": 400, "finetune_val": 150, "test": 200,
         "rood": 20}  # fmt: skip
MASKING = MLMMasking(batch_size=8, limit=26)


def _set_reader(ds, reader: str) -> None:
    m = json.loads((ds / "manifest.json").read_text())
    m["source"] = {"kind": "test", "reader": reader}
    (ds / "manifest.json").write_text(json.dumps(m))


def _write_code_truth(gt, program_dir) -> None:  # noqa: F811
    """The truth's condition catalog and diagnosis rows (the history bound's inputs): every ICD code of
    the fixture program in the condition of its first three characters, with a seeded chronic share."""
    from hrr_kernel import load_program

    prog = load_program(program_dir, device="cpu")
    version = {"ICD10CM": 10, "ICD9CM": 9}
    pairs = zip(prog.concept_codes, prog.concept_vocabularies, strict=True)
    rows = [(c, version[v], v[3:5] + c[:3]) for c, v in pairs if v in version]
    conditions = sorted({k for _, _, k in rows})
    chronic = np.random.default_rng(1).uniform(0.05, 0.95, len(conditions))
    pq.write_table(pa.table({"condition": conditions, "chronic": chronic}), gt / "condition_catalog.parquet")
    pq.write_table(
        pa.table(
            {
                "icd_code": [r[0] for r in rows],
                "icd_version": [r[1] for r in rows],
                "condition": [r[2] for r in rows],
            }
        ),  # fmt: skip
        gt / "codes.parquet",
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory, program_dir):  # noqa: F811
    """A MIMIC-layout dataset with a signal for mortality, half its ROOD patients flagged unseen; a copy
    as the eICU-layout transfer dataset; a ground truth with other probabilities per hospital."""
    root = tmp_path_factory.mktemp("baselines_data")
    ds = write_dataset(root / "mimic", program_dir, seed=3, sizes=SIZES)
    t = pq.read_table(ds / "patients.parquet")
    rood = np.asarray(t.column("split").cast(pa.string()).to_pylist()) == "rood"
    unseen = rood & (np.arange(t.num_rows) % 2 == 0)
    t = t.append_column("rood_unseen", pa.array(unseen)).replace_schema_metadata(t.schema.metadata)
    pq.write_table(t, ds / "patients.parquet")
    _set_reader(ds, "mimic-iv")
    tr = root / "eicu"
    shutil.copytree(ds, tr)
    _set_reader(tr, "eicu")
    sid = t.column("subject_id").to_numpy()
    mort = np.asarray(t.column("mortality_6m").to_pylist(), float)
    chap = np.zeros((len(sid), 22))
    for i, cs in enumerate(t.column("chapters").to_pylist()):
        chap[i, np.asarray(cs, int) - 1] = 1.0
    gt = root / "ground_truth"
    gt.mkdir()
    order = np.random.default_rng(0).permutation(len(sid))  # rows in another order than the dataset's
    p_mimic, c_mimic = 0.2 + 0.6 * mort, 0.15 + 0.7 * chap
    table = pa.table(
        {
            "hospital": ["mimic-iv"] * len(sid) + ["eicu"] * len(sid),
            "subject_id": np.r_[sid[order], sid],
            "mortality": np.r_[p_mimic[order], 1.0 - p_mimic],
            "chapters": pa.array(
                [*c_mimic[order].tolist(), *(1.0 - c_mimic).tolist()], pa.list_(pa.float64())
            ),
        }
    )
    pq.write_table(table, gt / "task_probabilities.parquet")
    _write_code_truth(gt, program_dir)
    truth = {
        "mimic-iv": dict(zip(sid.tolist(), p_mimic, strict=True)),
        "eicu": dict(zip(sid.tolist(), 1.0 - p_mimic, strict=True)),
    }
    return ds, tr, gt, truth


@pytest.fixture(scope="module")
def done(tmp_path_factory, data, program_dir):  # noqa: F811
    ds, tr, gt, _ = data
    out = tmp_path_factory.mktemp("baselines") / "b"
    rec = compute_baselines(ds, program_dir, out, ground_truth=gt, transfer_dataset=tr, mlm=MASKING)
    return out, rec


def test_mlm_positions_are_the_models_validation_positions(data, program_dir, one_thread):  # noqa: F811
    from hrr_kernel import load_program
    from model import HRRBert, preset
    from pipelines.train.mlm import evaluate_mlm, tokens_of
    from pipelines.train.runtime import DistContext

    prog = load_program(program_dir, device="cpu")
    ds = TokenizedDataset(data[0], prog.program_id, prog.n_concepts, prog.special_id("[PAD]"))
    seqs = ds.sequences("pretrain_val", max_len=MASKING.max_len, max_segments=MASKING.max_segments)
    tok = tokens_of(prog)
    torch.manual_seed(0)
    model = HRRBert(preset("tiny", mode="unstructured"), prog)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    model.register_forward_pre_hook(
        lambda m, a, kw: seen.append((a[0].clone(), kw["mlm_mask"].clone())), with_kwargs=True
    )
    val = evaluate_mlm(
        model,
        seqs,
        tok,
        topk=(10,),
        batch_size=MASKING.batch_size,
        seed=5,
        ctx=DistContext(),
        device=torch.device("cpu"),
        limit=MASKING.limit,
        mask_prob=MASKING.mask_prob,
    )
    rows, cols, target = masked_positions(
        seqs, tok, seed=5, mask_prob=MASKING.mask_prob, batch_size=MASKING.batch_size, limit=MASKING.limit
    )
    assert len(seen) == 4  # 26 patients in batches of 8
    model_pos = [(8 * k + int(r), int(c)) for k, (_, m) in enumerate(seen) for r, c in m.nonzero().tolist()]
    assert model_pos == list(zip(rows.tolist(), cols.tolist(), strict=True))
    assert val["val_masked"] == len(target) > 0
    assert (target == seqs.input_ids[rows, cols].numpy()).all()
    assert rows.max() < MASKING.limit
    # the models saw [MASK] or another code at most of these positions; a baseline sees none of them
    ids = torch.cat([torch.nn.functional.pad(x, (0, seqs.input_ids.shape[1] - x.shape[1])) for x, _ in seen])
    assert (ids[rows, cols].numpy() != target).mean() > 0.5
    # another seed masks other positions
    assert not np.array_equal(
        masked_positions(seqs, tok, seed=6, mask_prob=0.15, batch_size=8, limit=26)[0], rows
    )


def test_mlm_baseline_ranks_by_hand():
    from pipelines.eval.baselines_mlm import pair_probabilities

    # codes 0..4, 0 special; training counts make 1 the commonest, then 2, 3, 4
    train_counts = np.array([-1, 9, 5, 3, 1])
    # in training, 4 always appears next to 2 and 3 next to 1; patient 3 has 1 twice
    cond = pair_probabilities(code_matrix_of([[2, 4], [2, 4], [1, 3], [1, 1]], 5))
    assert cond[4, 2] == cond[2, 4] == cond[3, 1] == 1.0 and cond[1, 1] == pytest.approx(2 / 3)
    assert cond[1, 3] == pytest.approx(1 / 3) and cond[2, 2] == 0.0  # pairs of distinct positions only
    # visible histories: 3 twice and 4; only 4; nothing. Targets 3, 2, 1.
    hist = code_matrix_of([[3, 3, 4], [4], []], 5)
    ranks = baseline_ranks(hist, np.array([0, 1, 2]), np.array([3, 2, 1]), train_counts, cond)
    assert ranks["most_frequent"].tolist() == [2, 1, 0]
    assert ranks["copy_from_history"].tolist() == [0, 2, 0]  # 3 twice; 4, then 1 before 2; empty: by count
    assert ranks["cooccurrence"].tolist() == [2, 0, 0]  # 1 (2 votes) and 2 (1) before 3; 4 votes for 2


def code_matrix_of(rows: list[list[int]], n: int):
    from pipelines.data.sequences import Sequences

    width = max(max(len(r) for r in rows), 1)
    ids = torch.zeros((len(rows), width), dtype=torch.int64)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.int64)
        mask[i, : len(r)] = True
    seqs = Sequences(ids, torch.zeros_like(ids), mask, torch.arange(len(rows)))
    return code_matrix(seqs, np.array([True] + [False] * (n - 1)))


def test_files_models_and_scores(done, data):
    out, rec = done
    assert (out / "baselines.json").is_file() and (out / "predictions.parquet").is_file()
    assert not [p.name for p in out.iterdir() if p.name not in ("baselines.json", "predictions.parquet")]
    m = rec["mlm"]
    assert m["split"] == "pretrain_val" and m["n_masked"] > 0
    assert set(m["top1"]) == {"most_frequent", "copy_from_history", "cooccurrence"}
    assert all(m["top1"][b] <= m["top10"][b] <= m["top100"][b] for b in m["top1"])
    assert sum(b["n_masked"] for b in m["frequency_bins"]) == m["n_masked"]
    assert set(rec["tasks"]) == {"mortality", "chapters"}
    assert set(rec["tasks"]["mortality"]) == {"test", "transfer"}
    assert set(rec["tasks"]["chapters"]) == {"test", "rood", "rood_unseen"}
    for splits in rec["tasks"].values():
        for models in splits.values():
            assert set(models) == set(MODELS)
    mort = rec["tasks"]["mortality"]["test"]
    assert mort["constant"]["auroc"] == 0.5
    assert mort["logistic_regression"]["auroc"] > 0.65  # the fixture's deadly codes lie before the last visit
    assert mort["logistic_regression"]["f1"] > mort["constant"]["f1"]
    assert mort["ceiling"]["auroc"] == 1.0 and mort["ceiling"]["f1"] == 1.0
    chap = rec["tasks"]["chapters"]["test"]
    # macro F1 counts the labels absent from the fixture as 0
    assert chap["ceiling"]["f1_micro"] == 1.0 and chap["ceiling"]["auroc"] == 1.0
    assert chap["ceiling"]["f1"] >= chap["logistic_regression"]["f1"]
    assert any("upper bound" in n for n in rec["notes"])
    assert rec["tasks"]["chapters"]["rood_unseen"]["constant"]["n"] == 10
    assert set(rec["history_chapters"]) == {"mortality", "chapters"}
    # the chapters of a history predict the chapters of the next visit better than a constant
    assert chap["history_chapters"]["auroc"] > chap["constant"]["auroc"]


def test_history_bound(done):
    """The history bound refits the history's chapters regression with the truth's chronic shares; its
    ``counts`` arm is the history's chapters model itself (same fit, same thresholds)."""
    _, rec = done
    bound = rec["history_bound"]
    assert set(bound) == {"chapters"}  # the chapters task only
    splits = bound["chapters"]["splits"]
    assert set(splits) == {"test", "rood", "rood_unseen"}
    for sp, row in splits.items():
        for metric in ("auroc", "f1"):
            assert row["counts"][metric] == pytest.approx(
                rec["tasks"]["chapters"][sp]["history_chapters"][metric]
            )
            assert row["difference"][metric] == pytest.approx(
                row["with_truth"][metric] - row["counts"][metric]
            )
    # chapter counts (3 x 46 slots + visits) plus two share sums per slot
    assert bound["chapters"]["choice"]["features"] <= 3 * N_CHAPTER_SLOTS + 1 + 2 * N_CHAPTER_SLOTS


def test_truth_features_and_shares_by_hand(tmp_path):
    slots = chapter_slots(["SPECIAL", "ICD10CM", "ICD10CM", "ICD9CM", "ICD10CM"], [None, 4, 9, 7, 4])
    special = np.array([True, False, False, False, False])
    shares = np.array([np.nan, 0.9, 0.2, 0.5, np.nan])  # code 4 has no share: it counts 0
    # patient 0: [CLS], visit 0 {1, 3, 4}, visit 1 {1, 2, 2}; patient 1: [CLS] only
    ids = torch.tensor([[0, 1, 3, 4, 1, 2, 2], [0, 0, 0, 0, 0, 0, 0]])
    seg = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0] * 7])
    att = torch.tensor([[True] * 7, [True] + [False] * 6])
    f = truth_features(
        Sequences(ids, seg, att, torch.tensor([7, 8])), special, slots, shares, N_CHAPTER_SLOTS
    )
    s = N_CHAPTER_SLOTS
    want = np.zeros((2, 2 * s))
    want[0, [4, 9, 23 + 7]] = [0.9, 0.2, 0.5]  # distinct codes: 1 once (repeats count once), 2, 3; 4 none
    want[0, [s + 4, s + 9]] = [0.9, 0.2]  # the latest visit (1): codes 1 and 2
    np.testing.assert_allclose(f, np.log1p(want))
    # the shares from the truth's files: by (code, vocabulary); a code it lacks is NaN
    assert chronic_shares(tmp_path, ["A00"], ["ICD10CM"]) is None  # no files: no bound
    pq.write_table(pa.table({"condition": ["A00", "001"], "chronic": [0.3, 0.7]}), tmp_path / CATALOG_FILE)
    pq.write_table(
        pa.table(
            {
                "icd_code": ["A000", "A000", "0010"],
                "icd_version": [10, 10, 9],
                "condition": ["A00", "A00", "001"],
            }
        ),
        tmp_path / CODES_FILE,
    )
    got = chronic_shares(
        tmp_path, ["A000", "0010", "A000", "B99"], ["ICD10CM", "ICD9CM", "ICD9CM", "ICD10CM"]
    )
    np.testing.assert_allclose(got, [0.3, 0.7, np.nan, np.nan])
    pq.write_table(pa.table({"condition": ["A00"]}), tmp_path / CATALOG_FILE)
    with pytest.raises(InputFileError, match=r"condition_catalog.parquet.*missing column\(s\) chronic"):
        chronic_shares(tmp_path, ["A000"], ["ICD10CM"])


def test_history_chapter_features_by_hand():
    slots = chapter_slots(
        ["SPECIAL", "ICD10CM", "ICD10CM", "ICD9CM", "ICD9CM", "ICD10CM", "SNOMED"],
        [None, 4, 9, 7, None, 30, 5],
    )
    assert slots.tolist() == [0, 4, 9, 23 + 7, 0, 0, 0]
    special = np.array([True] + [False] * 6)
    # patient 0: [CLS], visit 0 {1, 3}, visit 1 {1, 2}, visit 2 {2, 2}, padding; patient 1: [CLS] only
    ids = torch.tensor([[0, 1, 3, 1, 2, 2, 2, 0], [0, 0, 0, 0, 0, 0, 0, 0]])
    seg = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 0], [0] * 8])
    att = torch.tensor([[True] * 7 + [False], [True] + [False] * 7])
    f = history_chapter_features(Sequences(ids, seg, att, torch.tensor([7, 8])), special, slots)
    s = N_CHAPTER_SLOTS
    assert f.shape == (2, 3 * s + 1)
    want = np.zeros((2, 3 * s + 1))
    want[0, [4, 9, 30]] = 1  # distinct codes per slot: code 1 (chapter 4), 2 (9), 3 (ICD-9 7)
    want[0, [s + 4, s + 9]] = 1  # written at two visits or more: codes 1 and 2
    want[0, 2 * s + 9] = 1  # in the latest visit (2): code 2
    want[0, -1] = 3  # visits
    np.testing.assert_allclose(f, np.log1p(want))  # patient 1 has no code: all zero


def test_predictions_aligned_by_hospital_and_subject(done, data):
    out, _ = done
    _, _, _, truth = data
    _, blocks = read_baselines(out)
    by = {(b.model, b.task, b.split): b for b in blocks}
    assert {b.model for b in blocks} == set(MODELS) and {b.trial for b in blocks} == {0}
    for split, hosp in (("test", "mimic-iv"), ("transfer", "eicu")):
        c = by[("ceiling", "mortality", split)]
        want = np.array([truth[hosp][int(s)] for s in c.subject_id], np.float32)
        assert np.array_equal(c.probs[:, 0], want)
        lr = by[("logistic_regression", "mortality", split)]
        assert np.array_equal(lr.subject_id, c.subject_id) and np.array_equal(lr.labels, c.labels)
    const = by[("constant", "chapters", "test")]
    assert const.probs.shape[1] == 22 and (const.probs == const.probs[0]).all()
    assert const.thresholds.shape == (22,)
    rood, unseen = by[("ceiling", "chapters", "rood")], by[("ceiling", "chapters", "rood_unseen")]
    assert set(unseen.subject_id) < set(rood.subject_id)


def test_finished_folder_is_read_back_and_other_inputs_refused(done, data, program_dir):  # noqa: F811
    out, rec = done
    ds, tr, gt, _ = data
    stamp = (out / "predictions.parquet").stat().st_mtime_ns
    again = compute_baselines(ds, program_dir, out, ground_truth=gt, transfer_dataset=tr, mlm=MASKING)
    assert again == rec and (out / "predictions.parquet").stat().st_mtime_ns == stamp
    with pytest.raises(PipelineError, match="baselines of other inputs.*seed"):
        compute_baselines(ds, program_dir, out, ground_truth=gt, transfer_dataset=tr, mlm=MASKING, seed=1)


def test_bad_ground_truth_names_the_file(tmp_path, data, program_dir):  # noqa: F811
    ds, _, gt, _ = data
    with pytest.raises(InputFileError, match="task_probabilities.parquet.*missing"):
        compute_baselines(ds, program_dir, tmp_path / "a", ground_truth=tmp_path, mlm=MASKING)
    t = pq.read_table(gt / "task_probabilities.parquet")
    short = tmp_path / "gt"
    short.mkdir()
    pq.write_table(t.slice(5), short / "task_probabilities.parquet")  # a few MIMIC patients lack truth
    with pytest.raises(InputFileError, match="patient.*missing, e.g. subject_id"):
        compute_baselines(
            ds, program_dir, tmp_path / "b", ground_truth=short, tasks=("mortality",), mlm=MASKING
        )
    assert not (tmp_path / "b" / "baselines.json").exists()
    plain = tmp_path / "plain"
    shutil.copytree(ds, plain)
    m = json.loads((plain / "manifest.json").read_text())
    del m["source"]["reader"]
    (plain / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(InputFileError, match="names no source.reader"):
        compute_baselines(
            plain, program_dir, tmp_path / "c", ground_truth=gt, tasks=("mortality",), mlm=MASKING
        )


def test_baselines_command(tmp_path, data, program_dir):  # noqa: F811
    ds, _, gt, _ = data
    args = [
        "baselines",
        "--dataset",
        str(ds),
        "--program",
        str(program_dir),
        "--out",
        str(tmp_path / "b"),
        "--ground-truth",
        str(gt),
        "--task",
        "mortality",
        "--model",
        "tiny",
        "--max-val",
        "26",
        "--val-batch-size",
        "8",
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "mortality test auroc: constant 0.500" in res.output and "ceiling 1.000" in res.output
    rec = json.loads((tmp_path / "b" / "baselines.json").read_text())
    assert rec["inputs"]["mlm"]["limit"] == 26 and rec["inputs"]["mlm"]["batch_size"] == 8


def test_experiment_computes_baselines_once(tmp_path, dataset_dir, program_dir, one_thread):  # noqa: F811
    cfg = ExperimentConfig(
        dataset=str(dataset_dir),
        program=str(program_dir),
        name="x",
        out=str(tmp_path),
        configurations=("unstructured",),
        model="tiny",
        pretrain_seeds=1,
        trials=1,
        tasks=("mortality",),
        device="cpu",
        progress=False,
        pretrain={"max_steps": 1, "batch_size": 8, "save_every": 1, "max_val": 10},
        finetune={"epochs": 1, "batch_size": 8},
        evaluate={"tsne_points": 0, "cost_steps": 0, "per_bin": 5},
    )
    run_experiment(cfg)
    root = tmp_path / "x"
    exp = json.loads((root / "experiment.json").read_text())
    assert exp["baselines"] == "baselines/baselines.json"
    rec = json.loads((root / exp["baselines"]).read_text())
    assert rec["inputs"]["mlm"]["limit"] == 10 and rec["inputs"]["mlm"]["batch_size"] == 256
    val = [json.loads(ln) for ln in (root / "pretrain" / "unstructured-seed0" / "metrics.jsonl").open()]
    assert rec["mlm"]["n_masked"] == [r for r in val if "val_masked" in r][-1]["val_masked"]
    assert set(rec["tasks"]["mortality"]) == {"test"}  # no transfer dataset, no ground truth
    # an experiment.json written before the new options continues; the baselines are read back
    stamp = (root / "baselines" / "predictions.parquet").stat().st_mtime_ns
    for k in ("ground_truth", "baselines"):
        del exp["config"][k]
    (root / "experiment.json").write_text(json.dumps(exp))
    run_experiment(cfg)
    assert (root / "baselines" / "predictions.parquet").stat().st_mtime_ns == stamp
    with pytest.raises(PipelineError, match="ground_truth: experiment has None"):
        run_experiment(ExperimentConfig(**{**cfg.__dict__, "ground_truth": str(tmp_path)}))
