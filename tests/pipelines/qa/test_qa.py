"""Clinical QA: the generator on a tiny cohort, training/evaluation, bad input, CLI, and the
``finetune --model visit-transformer`` path, all at toy size."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from train_fixtures import dataset_dir, program_dir, write_dataset  # noqa: F401

from pipelines.cli import main
from pipelines.qa.data import QUESTION_TYPES, QADataError, QAOptions, generate_qa, read_ontology, read_qa
from pipelines.qa.train import QAVocabularyMismatchError, evaluate_qa, load_split, train_qa

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


OPTS = QAOptions(max_memories=12, train_patients=0, val_patients=0, test_patients=0, unseen_fraction=0.3)
TRAIN = dict(dim=8, hops=2, epochs=2, batch_size=16, device="cpu", progress=False, max_memories=12)


@pytest.fixture(scope="module")
def qa_dir(tmp_path_factory, dataset_dir, program_dir):  # noqa: F811
    return generate_qa(dataset_dir, program_dir, out=tmp_path_factory.mktemp("qa"), options=OPTS).path


def test_generator(qa_dir, dataset_dir, program_dir, tmp_path):  # noqa: F811
    manifest, q, vocab, answers = read_qa(qa_dir)
    assert manifest["kind"] == "clinical-qa" and manifest["qa_id"] == qa_dir.name
    assert set(q.column("qtype").to_pylist()) <= set(QUESTION_TYPES)
    assert {"chapter_latest", "has_site"} <= set(q.column("qtype").to_pylist())
    assert set(q.column("split").to_pylist()) == {"train", "val", "test"}
    held = set(manifest["held_out_codes"])
    assert held
    onto = read_ontology(program_dir)
    n_words = manifest["n_words"]
    ans = answers.column("answer").to_pylist()
    for r in q.to_pylist():
        codes = [f[2] - n_words for f in r["facts"]]
        assert codes == r["fact_codes"] and 1 <= len(codes) <= 12
        if r["split"] != "test":  # held-out codes never reach train / val memories
            assert not held & set(codes)
        assert r["unseen"] == any(codes[i] in held for i in r["supporting"])
        a = ans[r["answer"]]
        if r["qtype"] == "chapter_latest":
            assert r["supporting"] == [len(codes) - 1]
            assert a == f"chapter:{onto.chapter[codes[-1]]}"
        if r["qtype"] == "has_site":
            site = int(vocab.column("token")[r["question"][-1]].as_py().split(":")[1])
            has = any(site in onto.sites.get(c, ()) for c in codes)
            assert a == ("yes" if has else "no")
            assert all(site in onto.sites[codes[i]] for i in r["supporting"])
    # content-addressed: the same inputs give the same folder, untouched
    again = generate_qa(dataset_dir, program_dir, out=qa_dir.parent.parent, options=OPTS)
    assert again.path == qa_dir and not again.written


def test_generator_bad_input(tmp_path, program_dir):  # noqa: F811
    d = write_dataset(tmp_path / "other", program_dir, program_id="someotherprogram")
    with pytest.raises(QADataError, match="someotherprogram"):
        generate_qa(d, program_dir, out=tmp_path / "qa", options=OPTS)
    # codes outside the program and patients left without memories are counted, not fatal
    d = write_dataset(tmp_path / "ds", program_dir)
    t = pq.read_table(d / "patients.parquet")
    ids = t.column("input_ids").to_pylist()
    ids[0] = [1] + [9999] * (len(ids[0]) - 1)  # every code of patient 0 unknown
    t = t.set_column(t.column_names.index("input_ids"), "input_ids", pa.array(ids, pa.list_(pa.int32())))
    pq.write_table(t, d / "patients.parquet")
    r = generate_qa(d, program_dir, out=tmp_path / "qa", options=OPTS)
    c = r.manifest["counts"]
    assert c["facts"]["outside_program"] == len(ids[0]) - 1
    assert c["patients"]["skipped_empty_memory"] == 1


def test_load_split_skips_and_counts(qa_dir):
    manifest, q, _, _ = read_qa(qa_dir)
    kw = dict(n_words=manifest["n_words"], n_codes=manifest["n_codes"])
    full = load_split(q, "train", max_memories=12, max_question_len=12, **kw)
    assert len(full) > 0 and not full.skipped
    short = load_split(q, "train", max_memories=2, max_question_len=6, **kw)
    assert short.skipped["memory_over_limit"] > 0 and short.skipped["question_over_limit"] > 0
    assert len(short) + sum(short.skipped.values()) == len(full)
    small = load_split(q, "train", max_memories=12, max_question_len=12, n_words=kw["n_words"], n_codes=5)
    assert small.skipped["code_outside_program"] > 0
    rows = q.to_pylist()
    rows[0]["facts"] = []
    rows[0]["fact_codes"] = []
    empty = load_split(
        pa.Table.from_pylist(rows, schema=q.schema),
        rows[0]["split"],
        max_memories=12,
        max_question_len=12,
        **kw,
    )
    assert empty.skipped["empty_memory"] == 1


@pytest.mark.parametrize("model,embedding", [("memn2n", "hrr"), ("memnn", "plain")])
def test_train_and_evaluate(tmp_path, qa_dir, program_dir, model, embedding):  # noqa: F811
    r = train_qa(qa_dir, program_dir, out=tmp_path, model=model, embedding=embedding, **TRAIN)
    res = json.loads((r.run_dir / "results.json").read_text())
    assert res["parameters"] > 0 and 0 <= res["test"]["accuracy"] <= 1
    assert set(res["test"]["by_type"]) <= set(QUESTION_TYPES)
    assert "accuracy_unseen" in res["test"] and (r.run_dir / "model" / "model.safetensors").is_file()
    report, text = evaluate_qa(r.run_dir, qa_dir, program_dir)
    assert report["accuracy"] == pytest.approx(res["test"]["accuracy"])
    assert "Hop 1:" in text and "Question" in text and "Answer:" in text


def test_mismatched_vocabulary(tmp_path, qa_dir, dataset_dir, program_dir):  # noqa: F811
    r = train_qa(
        qa_dir, program_dir, out=tmp_path, epochs=1, **{k: v for k, v in TRAIN.items() if k != "epochs"}
    )
    other = generate_qa(
        dataset_dir, program_dir, out=tmp_path / "qa2", options=QAOptions(max_memories=5, unseen_fraction=0.0)
    ).path
    m = json.loads((other / "manifest.json").read_text())
    cfg = json.loads((r.run_dir / "model" / "config.json").read_text())
    cfg["vocab_fingerprint"] = "0000"
    (r.run_dir / "model" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(QAVocabularyMismatchError, match="vocab_fingerprint"):
        evaluate_qa(r.run_dir, other, program_dir)
    assert m["qa_id"] != qa_dir.name


def test_cli(tmp_path, dataset_dir, program_dir):  # noqa: F811
    runner = CliRunner()
    r = runner.invoke(
        main,
        [
            "qa",
            "generate",
            str(dataset_dir),
            "--program",
            str(program_dir),
            "--out",
            str(tmp_path / "qa"),
            "--max-memories",
            "12",
        ],
    )
    assert r.exit_code == 0, r.output
    qa = r.output.split()[1]
    r = runner.invoke(
        main,
        [
            "qa",
            "train",
            qa,
            "--program",
            str(program_dir),
            "--out",
            str(tmp_path),
            "--run-id",
            "x",
            "--dim",
            "8",
            "--epochs",
            "1",
            "--no-progress",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "accuracy" in r.output
    r = runner.invoke(
        main, ["qa", "evaluate", str(tmp_path / "x"), "--qa", qa, "--program", str(program_dir)]
    )
    assert r.exit_code == 0, r.output and "Hop 1:" in r.output
    r = runner.invoke(main, ["qa", "train", qa, "--program", str(tmp_path), "--out", str(tmp_path)])
    assert r.exit_code != 0


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, dataset_dir, program_dir):  # noqa: F811
    from pipelines.train.pretrain import pretrain

    return pretrain(
        dataset_dir,
        program_dir,
        out=tmp_path_factory.mktemp("runs"),
        model="tiny",
        mode="base",
        max_steps=2,
        batch_size=8,
        device="cpu",
        progress=False,
    ).run_dir


@pytest.mark.parametrize("task", ["mortality", "chapters"])
def test_finetune_visit_transformer(tmp_path, pretrained, dataset_dir, program_dir, task):  # noqa: F811
    from pipelines.train.finetune import finetune

    r = finetune(
        pretrained,
        dataset_dir,
        program_dir,
        out=tmp_path,
        task=task,
        model="visit-transformer",
        epochs=1,
        batch_size=8,
        lr=1e-3,
        device="cpu",
        progress=False,
    )
    assert "visit-transformer" in r.run_dir.name
    t = r.trials[0]
    assert t["model"] == "visit-transformer" and t["config"]["model"] == "visit-transformer"
    assert {"accuracy", "f1", "auroc"} <= set(t["test"]) and "loss" in t["val"]
    cfg = json.loads((r.run_dir / "trial-0" / "model" / "config.json").read_text())
    assert cfg["kind"] == "visit-transformer"


def test_finetune_cli_model_option(tmp_path, pretrained, dataset_dir, program_dir):  # noqa: F811
    args = [
        "finetune",
        str(pretrained),
        "--dataset",
        str(dataset_dir),
        "--program",
        str(program_dir),
        "--out",
        str(tmp_path),
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--device",
        "cpu",
        "--no-progress",
    ]
    r = CliRunner().invoke(main, [*args, "--model", "visit-transformer"])
    assert r.exit_code == 0, r.output
    assert "visit-transformer" in r.output
    r = CliRunner().invoke(main, [*args, "--model", "gpt"])
    assert r.exit_code != 0


@pytest.mark.slow
def test_compare_report(tmp_path, dataset_dir, program_dir):  # noqa: F811
    from pipelines.qa.compare import QA_GRID, compare

    path = compare(
        dataset_dir, program_dir, out=tmp_path / "cmp", epochs=1, dim=8, skip_finetune=True, qa_options=OPTS
    )
    text = path.read_text()
    for title in ("plain vs HRR", "hops 1-3", "weight tying", "Hard-attention MemNN", "per question type"):
        assert title in text
    assert all(name in text for _, name, _ in QA_GRID)
    assert (
        compare(
            dataset_dir,
            program_dir,
            out=tmp_path / "cmp",
            epochs=1,
            dim=8,
            skip_finetune=True,
            qa_options=OPTS,
        )
        == path
    )  # fmt: skip  (runs are read back, not retrained)
