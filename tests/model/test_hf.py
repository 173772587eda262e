"""The self-contained model folder (program copy, vocabulary, model card) and the Hugging Face classes
(model.hf), loaded through transformers' own Auto classes and compared with HRRBert on the same input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from hrr_kernel import HashMismatchError, load_program
from model import HRRBert, PretrainedFileError, ProgramMismatchError, preset, read_vocab, write_model_card


def make(program, mode="base", seed=0):
    torch.manual_seed(seed)
    logf = torch.linspace(-8, -1, program.n_concepts) if mode == "freq" else None
    m = HRRBert(preset("tiny", mode=mode), program, log_frequency=logf)
    with torch.no_grad():  # weights unlike any fresh initialisation, so a load that drops them shows
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return m.eval()


def batch(program, b=3, t=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, program.n_concepts, (b, t), generator=g)
    ids[:, 0] = 1  # [CLS]
    seg = torch.arange(t).div(3, rounding_mode="floor").expand(b, t).clone()
    att = torch.ones(b, t, dtype=torch.long)
    att[0, 6:] = 0
    ids[0, 6:] = 0
    return ids, seg, att


@pytest.fixture
def hf():
    pytest.importorskip("transformers")
    import model.hf

    return model.hf


@pytest.fixture
def saved(program, tmp_path):
    """A tiny pretrained model saved to a folder, then moved elsewhere (only the folder itself remains)."""
    m = make(program)
    m.save_pretrained(tmp_path / "first", extra={"run_id": "demo-run", "dataset_id": "ds1", "step": 7})
    folder = tmp_path / "shared" / "model"
    shutil.copytree(tmp_path / "first", folder)
    shutil.rmtree(tmp_path / "first")
    return m, folder


# --- the self-contained folder (no transformers needed) --------------------------------------------


def test_saved_folder_carries_program_vocabulary_and_card(program, saved):
    m, folder = saved
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["README.md", "config.json", "hrrbert_hf.py", "model.safetensors", "program",
                     "tokenizer_config.json", "vocab.txt"]  # fmt: skip
    manifest = json.loads((program.path / "manifest.json").read_text())
    for entry in manifest["files"]:  # every program file, byte for byte
        assert (folder / "program" / entry["path"]).read_bytes() == (
            program.path / entry["path"]
        ).read_bytes()
    meta = HRRBert.read_config(folder)  # what the pipelines read
    assert meta["kind"] == "hrrbert" and meta["model_type"] == "hrrbert" and meta["run_id"] == "demo-run"
    assert meta["architectures"] == ["HRRBertForMaskedLM"]
    vocab = read_vocab(folder)
    assert len(vocab) == program.n_concepts
    assert vocab[: len(program.SPECIAL_TOKENS)] == list(program.SPECIAL_TOKENS)
    for i, tok in enumerate(vocab):  # line i is token id i: its code, with the vocabulary
        assert tok == program.concept_codes[i] or tok.replace(".", "").endswith(
            ":" + program.concept_codes[i]
        )
    # loads with no other path; the program comes from the folder and is verified there
    again = HRRBert.from_pretrained(folder).eval()
    assert again.program.path == folder / "program" and again.program_id == program.program_id
    ids, seg, att = batch(program)
    with torch.no_grad():
        torch.testing.assert_close(again(ids, seg, att, task="chapters"), m(ids, seg, att, task="chapters"))


def test_resave_into_the_folder_it_was_loaded_from(saved):
    m, folder = saved
    again = HRRBert.from_pretrained(folder)
    again.save_pretrained(folder, extra={"run_id": "again"})
    assert HRRBert.read_config(folder)["run_id"] == "again"
    assert HRRBert.from_pretrained(folder).program_id == m.program_id


def test_graph_false_copies_only_the_model_tables(program, tmp_path):
    make(program).save_pretrained(tmp_path / "m", graph=False)
    assert not (tmp_path / "m" / "program" / "graph").exists()
    assert HRRBert.from_pretrained(tmp_path / "m").program_id == program.program_id


def test_folder_without_program_needs_one(program, tmp_path):
    make(program).save_pretrained(tmp_path / "m", carry_program=False, card=False)
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors"]
    with pytest.raises(PretrainedFileError, match="does not carry its program"):
        HRRBert.from_pretrained(tmp_path / "m")
    assert HRRBert.from_pretrained(tmp_path / "m", program).program_id == program.program_id


def test_edited_program_copy_is_refused(saved):
    _, folder = saved
    edges = folder / "program" / "edges.parquet"
    data = edges.read_bytes()
    edges.unlink()  # the copy may be a hard link of the original: replace, never edit in place
    edges.write_bytes(data[:-9] + bytes(9))
    with pytest.raises(HashMismatchError, match="edges.parquet"):
        HRRBert.from_pretrained(folder)


def test_model_card(program, saved):
    _, folder = saved
    text = (folder / "README.md").read_text()
    front, body = text.split("---\n")[1], text.split("---\n", 2)[2]
    yaml = pytest.importorskip("yaml")
    meta = yaml.safe_load(front)
    assert meta["library_name"] == "hrrbert" and meta["license"] == "other" and "hrrbert" in meta["tags"]
    for section in (
        "## Data",
        "## Program",
        "## Configuration",
        "## Metrics",
        "## Intended use",
        "## Limitations",
    ):
        assert section in body
    assert program.program_id in body and "snomed_mini_20220531" in body and "demo-run" in body
    assert "No metrics were recorded" in body
    write_model_card(
        folder, {"val": {"loss": 2.345678, "top5": 0.4}, "steps": 7}, license="apache-2.0", tags=["x"]
    )
    text = (folder / "README.md").read_text()
    assert "| val.loss | 2.346 |" in text and "| val.top5 | 0.4 |" in text and "| steps | 7 |" in text
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["license"] == "apache-2.0" and "x" in meta["tags"]


def test_importing_model_does_not_import_transformers():
    code = "import sys, model; assert 'transformers' not in sys.modules, 'model imported transformers'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- transformers ----------------------------------------------------------------------------------


def test_auto_classes_load_the_folder(hf, program, saved):
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

    m, folder = saved
    cfg = AutoConfig.from_pretrained(folder)
    assert isinstance(cfg, hf.HRRBertConfig) and cfg.model_type == "hrrbert"
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (64, 2, program.n_concepts)
    assert cfg.program_id == program.program_id and cfg.run_id == "demo-run"

    ids, seg, att = batch(program)
    base = AutoModel.from_pretrained(folder)
    assert type(base) is hf.HRRBertModel and not base.training
    assert base.program.path == folder / "program"  # the folder's own program, verified on load
    with torch.no_grad():
        out = base(input_ids=ids, attention_mask=att, token_type_ids=seg)
        torch.testing.assert_close(out.last_hidden_state, m.encode(ids, seg, att), rtol=0, atol=0)
        torch.testing.assert_close(out.pooler_output, torch.tanh(m.heads.pool(m.encode(ids, seg, att)[:, 0])))
    assert set(base.state_dict()) == {f"hrrbert.{k}" for k in m.state_dict()}

    mlm = AutoModelForMaskedLM.from_pretrained(folder)
    assert type(mlm) is hf.HRRBertForMaskedLM
    labels = torch.full_like(ids, -100)
    labels[:, 2], labels[1, 4] = ids[:, 2], ids[1, 4]
    with torch.no_grad():
        out = mlm(input_ids=ids, attention_mask=att, segment_ids=seg, labels=labels)
        ref = m(ids, seg, att, mlm_mask=torch.ones_like(ids, dtype=torch.bool))  # (B*T, N)
    assert out.logits.shape == (3, 9, program.n_concepts)
    torch.testing.assert_close(out.logits.reshape(-1, program.n_concepts), ref)
    scored = labels.reshape(-1) != -100
    torch.testing.assert_close(out.loss, F.cross_entropy(ref[scored], labels.reshape(-1)[scored]))

    for task, n in (("mortality", 1), ("chapters", 22)):
        clf = AutoModelForSequenceClassification.from_pretrained(folder, task=task)
        assert type(clf) is hf.HRRBertForSequenceClassification and clf.config.num_labels == n
        y = torch.ones(3, n)
        with torch.no_grad():
            out = clf(input_ids=ids, attention_mask=att, token_type_ids=seg, labels=y)
            ref = m(ids, seg, att, task=task)
        # same model, same call; equal up to float rounding (bit-equal on some CPUs, not on all)
        torch.testing.assert_close(out.logits, ref)
        torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(ref, y))


@pytest.mark.parametrize("mode", ["freq", "cat", "unstructured"])
def test_every_embedding_mode_loads_identically(hf, program, tmp_path, mode):
    from transformers import AutoModelForMaskedLM

    m = make(program, mode, seed=3)
    m.save_pretrained(tmp_path / "m")
    got = AutoModelForMaskedLM.from_pretrained(tmp_path / "m")
    ids, seg, att = batch(program, seed=1)
    with torch.no_grad():
        ref = m(ids, seg, att, mlm_mask=torch.ones_like(ids, dtype=torch.bool))
        out = got(input_ids=ids, attention_mask=att, token_type_ids=seg).logits
    torch.testing.assert_close(out.reshape(ref.shape), ref)


def test_hf_save_writes_the_same_folder(hf, program, saved, tmp_path):
    from transformers import AutoModel, AutoModelForSequenceClassification

    m, folder = saved
    clf = AutoModelForSequenceClassification.from_pretrained(folder, task="chapters")
    with torch.no_grad():
        clf.hrrbert.heads.tasks["chapters"].bias.add_(1.0)  # "fine-tuned"
    clf.save_pretrained(tmp_path / "ft", metrics={"test": {"f1": 0.5}})
    meta = HRRBert.read_config(tmp_path / "ft")
    assert meta["task"] == "chapters" and meta["architectures"] == ["HRRBertForSequenceClassification"]
    assert meta["run_id"] == "demo-run" and "| test.f1 | 0.5 |" in (tmp_path / "ft" / "README.md").read_text()
    plain = HRRBert.from_pretrained(tmp_path / "ft").eval()  # no prefix in the saved keys, program carried
    ids, seg, att = batch(program)
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path / "ft")
    assert again.config.task == "chapters"
    with torch.no_grad():
        ref = plain(ids, seg, att, task="chapters")
        torch.testing.assert_close(again(input_ids=ids, attention_mask=att, token_type_ids=seg).logits, ref)
        torch.testing.assert_close(ref, m(ids, seg, att, task="chapters") + 1.0)
    assert type(AutoModel.from_pretrained(tmp_path / "ft")) is hf.HRRBertModel


def test_new_model_from_a_config(hf, program, tmp_path):
    cfg = hf.HRRBertConfig.from_bert_config(preset("tiny"), program)
    torch.manual_seed(0)
    new = hf.HRRBertForMaskedLM(cfg, program=program)
    ids, seg, att = batch(program)
    assert new(input_ids=ids).logits.shape == (3, 9, program.n_concepts)
    new.save_pretrained(tmp_path / "new")
    loaded = HRRBert.from_pretrained(tmp_path / "new")
    torch.testing.assert_close(loaded.state_dict(), new.hrrbert.state_dict())
    direct = hf.HRRBertForMaskedLM.from_pretrained(tmp_path / "new")  # the class itself, not an Auto class
    torch.testing.assert_close(direct.hrrbert.state_dict(), new.hrrbert.state_dict())
    with pytest.raises(ValueError, match="unknown task"):
        hf.HRRBertConfig(task="sepsis")
    with pytest.raises(ValueError, match="unknown HRRBertSettings key"):
        hf.HRRBertConfig(config={"dim": 64, "width": 3})


def test_program_mismatch_and_missing_program(hf, program, other_program, tmp_path):
    from transformers import AutoModel

    make(program).save_pretrained(tmp_path / "m", carry_program=False)
    with pytest.raises(PretrainedFileError, match="does not carry its program"):
        AutoModel.from_pretrained(tmp_path / "m")
    with pytest.raises(ProgramMismatchError):
        AutoModel.from_pretrained(tmp_path / "m", program=other_program)
    got = AutoModel.from_pretrained(tmp_path / "m", program=program.path)  # a program folder works too
    assert got.program.program_id == program.program_id
    assert (
        AutoModel.from_pretrained(tmp_path / "m", program=load_program(program.path)).program.path
        == program.path
    )


def test_config_json_written_by_transformers_stays_readable(hf, saved, tmp_path):
    from transformers import AutoConfig

    _, folder = saved
    AutoConfig.from_pretrained(folder).save_pretrained(tmp_path / "c")
    meta = HRRBert.read_config(tmp_path / "c")
    assert meta["model_type"] == "hrrbert" and meta["config"]["dim"] == 64 and meta["run_id"] == "demo-run"


def test_cls_mean_pooling_travels_with_the_folder(hf, program, tmp_path):
    from transformers import AutoModel, AutoModelForSequenceClassification

    torch.manual_seed(5)
    m = HRRBert(preset("tiny", mode="base", pooling="cls+mean"), program)
    m.eval().save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["config"]["pooling"] == "cls+mean"
    ids, seg, att = batch(program, seed=2)
    with torch.no_grad():
        h = m.encode(ids, seg, att)
        mask = att.unsqueeze(-1).float()
        want = torch.tanh(m.heads.pool(h[:, 0] + (h * mask).sum(1) / mask.sum(1)))
        torch.testing.assert_close(
            AutoModel.from_pretrained(tmp_path / "m")(
                input_ids=ids, attention_mask=att, token_type_ids=seg
            ).pooler_output,
            want,
        )
        clf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "m", task="chapters")
        got = clf(input_ids=ids, attention_mask=att, token_type_ids=seg).logits
    torch.testing.assert_close(got, m(ids, seg, att, task="chapters"))


# --- the tokenizer, auto_map, the code cache and new heads (issue 34 item 4) --------------------------


def test_the_tokenizer_maps_every_code_form_and_numbers_the_visits(hf, program, saved):
    from transformers import AutoTokenizer

    _, folder = saved
    tok = AutoTokenizer.from_pretrained(folder)
    assert type(tok).__name__ == "HRRBertTokenizer" and tok.model_max_length == 128
    vocab = read_vocab(folder)
    icd10 = [t for t in vocab if t.startswith("ICD10CM:") and "." in t][:2]
    (v, a), (_, b) = (t.split(":") for t in icd10)
    want = [vocab.index(t) for t in icd10]
    for text in (
        f"{a} [SEP] {b}",
        f"{v}:{a} | {v}/{b}",
        f"{a.replace('.', '')} [SEP] {v}/{b.replace('.', '')}",
    ):
        enc = tok(text)
        assert enc["input_ids"] == [1, *want], text  # [CLS] first, no separator among the inputs
        assert enc["token_type_ids"] == [0, 0, 1] and enc["attention_mask"] == [1, 1, 1]
    enc = tok(f"{a} XYZ99 [MASK]")
    assert enc["input_ids"] == [1, want[0], tok.unk_token_id, tok.mask_token_id] and tok.unknown_codes(
        f"{a} XYZ99"
    ) == ["XYZ99"]
    # a batch pads, and the model reads it as HRRBert reads the same ids and segments
    m = hf.HRRBertModel.from_pretrained(folder).eval()
    batch_enc = tok([f"{a} [SEP] {b}", a], padding=True, return_tensors="pt")
    with torch.no_grad():
        h = m(**batch_enc).last_hidden_state
        ref = m.hrrbert.encode(
            batch_enc["input_ids"], batch_enc["token_type_ids"], batch_enc["attention_mask"]
        )
    torch.testing.assert_close(h, ref)
    # too long a history keeps its latest codes, as prepare does
    long = " ".join([a] * 200 + [b])
    ids = tok(long, truncation=True)["input_ids"]
    assert len(ids) == 128 and ids[0] == 1 and ids[-1] == want[1]


def test_the_folder_loads_by_auto_map_without_importing_model_hf(saved, tmp_path):
    """A fresh interpreter: trust_remote_code finds the classes through config.json's auto_map."""
    pytest.importorskip("transformers")
    _, folder = saved
    code = (
        "import sys\n"
        "from transformers import AutoModelForMaskedLM, AutoTokenizer\n"
        f"m = AutoModelForMaskedLM.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
        f"t = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
        "print(type(m).__name__, type(t).__name__)\n"
    )
    env_dir = tmp_path / "hf_home"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**__import__("os").environ, "HF_HOME": str(env_dir)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["HRRBertForMaskedLM", "HRRBertTokenizer"]


def test_masked_lm_applies_the_saved_code_cache(hf, program, tmp_path):
    from model.code_cache import CodeCache

    m = make(program)
    m.mlm_cache = CodeCache(weight=0.3, sharpness=50.0)
    m.save_pretrained(tmp_path / "m")
    mlm = hf.HRRBertForMaskedLM.from_pretrained(tmp_path / "m").eval()
    assert mlm.hrrbert.mlm_cache == m.mlm_cache
    ids, seg, att = batch(program)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, 2] = True
    ids = ids.masked_fill(mask, program.special_id("[MASK]"))
    with torch.no_grad():
        got = torch.log_softmax(mlm(input_ids=ids, attention_mask=att, token_type_ids=seg).logits[mask], -1)
        want = m.masked_log_probs(ids, seg, att, mask)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_classifier_on_a_folder_without_that_head_warns(hf, saved, caplog):
    _, folder = saved
    with caplog.at_level("WARNING", logger="model.hf"):
        hf.HRRBertForSequenceClassification.from_pretrained(folder)
    assert "newly initialised" in caplog.text and "pretrained model" in caplog.text
    caplog.clear()
    from transformers import AutoModelForSequenceClassification

    with caplog.at_level("WARNING", logger="model.hf"):
        AutoModelForSequenceClassification.from_pretrained(folder, task="chapters")
    assert "the 'chapters' head" in caplog.text


def test_hidden_states_and_attentions_are_the_layers_own(hf, program, saved):
    m, folder = saved
    enc = hf.HRRBertModel.from_pretrained(folder).eval()
    clf = hf.HRRBertForSequenceClassification.from_pretrained(folder, task="chapters").eval()
    ids, seg, att = batch(program)
    with torch.no_grad():
        out = enc(input_ids=ids, attention_mask=att, token_type_ids=seg, output_hidden_states=True,
                  output_attentions=True)  # fmt: skip
        plain = enc(input_ids=ids, attention_mask=att, token_type_ids=seg)
        c = clf(input_ids=ids, attention_mask=att, token_type_ids=seg, output_hidden_states=True)
        ref = m(ids, seg, att, task="chapters")
    n = m.config.n_layers
    assert len(out.hidden_states) == n + 1 and len(out.attentions) == n
    torch.testing.assert_close(out.hidden_states[-1], plain.last_hidden_state)
    torch.testing.assert_close(out.last_hidden_state, plain.last_hidden_state)
    a = out.attentions[0]  # (B, H, T, T)
    assert a.shape == (ids.shape[0], m.config.n_heads, ids.shape[1], ids.shape[1])
    torch.testing.assert_close(a.sum(-1), torch.ones(a.shape[:-1]))
    assert float(a[0, :, :, 6:].abs().max()) == 0.0  # padded keys get no attention
    torch.testing.assert_close(c.logits, ref)
    assert len(c.hidden_states) == n + 1
    assert plain.hidden_states is None and plain.attentions is None


def test_dtype_other_than_float32_is_refused_not_ignored(hf, saved):
    _, folder = saved
    with pytest.raises(ValueError, match="float32"):
        hf.HRRBertForMaskedLM.from_pretrained(folder, dtype=torch.bfloat16)
    assert (
        next(hf.HRRBertForMaskedLM.from_pretrained(folder, dtype="auto").parameters()).dtype == torch.float32
    )


def test_trainer_runs_a_few_steps_with_the_tokenizer_and_the_mlm_collator(hf, saved, tmp_path):
    pytest.importorskip("accelerate")
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments

    _, folder = saved
    tok = AutoTokenizer.from_pretrained(folder)
    codes = [t.split(":")[1] for t in read_vocab(folder) if ":" in t][:12]
    texts = [" ".join(codes[i : i + 3]) + " [SEP] " + " ".join(codes[i + 3 : i + 5]) for i in range(0, 7)] * 4
    model = hf.HRRBertForMaskedLM.from_pretrained(folder)
    before = [p.detach().clone() for p in model.parameters()]
    args = TrainingArguments(output_dir=str(tmp_path / "t"), max_steps=3, per_device_train_batch_size=4,
                             report_to=[], use_cpu=True, save_strategy="no", logging_steps=1)  # fmt: skip
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.3, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=[tok(t) for t in texts], data_collator=collator)
    result = trainer.train()
    assert result.global_step == 3 and torch.isfinite(torch.tensor(result.training_loss))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    example = collator([tok(texts[0]), tok(texts[1])])  # padded, visits kept, labels -100 off the masks
    assert set(example) >= {"input_ids", "token_type_ids", "attention_mask", "labels"}
    scored = example["labels"] != -100  # the chosen positions: real codes only, never [CLS] or padding
    assert bool((example["attention_mask"].bool() | ~scored).all()) and not bool(scored[:, 0].any())


def test_resize_token_embeddings_says_how_to_add_codes(hf, saved):
    _, folder = saved
    with pytest.raises(NotImplementedError, match="hrrbert carry"):
        hf.HRRBertForMaskedLM.from_pretrained(folder).resize_token_embeddings(10)
