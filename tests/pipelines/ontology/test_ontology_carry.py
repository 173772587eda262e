"""pipelines.ontology.carry and ``hrrbert carry``: a saved model carried to a new program is written as a
normal model folder (with carry.json) that loads, keeps its extra config keys and fine-tunes as usual."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from carry_fixtures import NEW_CODES, OLD_CODES, write_new_program, write_old_program
from click.testing import CliRunner
from train_fixtures import write_dataset

from hrr_kernel import load_program
from model import HRRBert, PretrainedFileError, bert_tiny
from pipelines.cli import main
from pipelines.errors import PipelineError
from pipelines.ontology.carry import REPORT_FILE, carry


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ontology_carry")
    old = write_old_program(root / "old")
    new = write_new_program(root / "release" / "new")  # alone in its release folder
    return old, new


@pytest.fixture(scope="module")
def saved(tmp_path_factory, programs):
    """A fine-tuned-looking cat model on the old program: extra keys run_id and task, and thresholds.json."""
    torch.manual_seed(0)
    model = HRRBert(
        bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32, mode="cat"), load_program(programs[0])
    )
    d = tmp_path_factory.mktemp("models") / "ft-model"
    model.untrained_tokens = [5, 6]  # the old program's ids: not to be carried to the new program
    model.save_pretrained(d, extra={"run_id": "pre-1", "task": "mortality"})
    (d / "thresholds.json").write_text(json.dumps({"task": "mortality", "thresholds": [0.3]}))
    return d


def test_carry_writes_a_loadable_model_folder(tmp_path, programs, saved, one_thread):
    old_path, new_path = programs
    r = carry(saved, new_path.parent, tmp_path / "moved", init="kind_mean", seed=3)  # a release folder
    out = tmp_path / "moved"
    assert r.out == out and r.new_program == new_path
    assert {
        "config.json",
        "model.safetensors",
        "program/",
        "vocab.txt",
        "tokenizer_config.json",
        "hrrbert_hf.py",
        "README.md",
        REPORT_FILE,
        "thresholds.json",
    } == set(r.files)
    moved = HRRBert.from_pretrained(out)  # carries the new program
    new = load_program(new_path)
    assert moved.program_id == new.program_id and moved.n_concepts == len(NEW_CODES)
    meta = json.loads((out / "config.json").read_text())
    assert meta["run_id"] == "pre-1" and meta["task"] == "mortality"
    assert "untrained_tokens" not in meta and moved.untrained_tokens is None
    assert meta["carried_from"] == {
        "model": str(saved),
        "program_id": load_program(old_path).program_id,
        "new_program_id": new.program_id,
        "init": "kind_mean",
        "seed": 3,
    }
    report = json.loads((out / REPORT_FILE).read_text())
    assert (
        report["kind"] == "carry" and report["tokens"]["carried"] == 7 and report["old_tokens_dropped"] == 1
    )
    original = HRRBert.from_pretrained(saved)
    a, b = original.state_dict(), moved.state_dict()
    assert torch.equal(a["layers.0.ffn_in.weight"], b["layers.0.ffn_in.weight"])
    assert torch.equal(a["heads.tasks.mortality.weight"], b["heads.tasks.mortality.weight"])
    i, j = OLD_CODES.index("A003"), NEW_CODES.index("A003")
    assert torch.equal(a["embeddings.token.table"][i], b["embeddings.token.table"][j])
    assert not list(tmp_path.glob(".tmp-*"))
    text = "\n".join(r.summary_lines())
    assert "from program" in text and "carried 7 (6 with unchanged edges, 1 changed)" in text
    assert "new token rows: 6 (table: [UNK] row; mlm_bias: median bias of the trained codes)" in text
    assert "old tokens dropped: 1 (e.g. ICD10CM:A00.2)" in text


def test_out_is_never_written_over(tmp_path, programs, saved):
    _, new_path = programs
    out = tmp_path / "moved"
    carry(saved, new_path, out)
    with pytest.raises(PipelineError, match="pass --force"):
        carry(saved, new_path, out)
    carry(saved, new_path, out, force=True, init="random")  # replaces an earlier carry
    assert json.loads((out / REPORT_FILE).read_text())["init"] == "random"
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(PipelineError, match="not an earlier carry"):
        carry(saved, new_path, other, force=True)
    assert (other / "notes.txt").read_text() == "mine"
    with pytest.raises(PipelineError, match="inside it"):
        carry(saved, new_path, saved / "sub")


def test_same_program_and_bad_init_are_refused(tmp_path, programs, saved):
    old_path, new_path = programs
    with pytest.raises(PipelineError, match="already has; nothing to carry"):
        carry(saved, old_path, tmp_path / "x")
    with pytest.raises(PipelineError, match="init must be one of"):
        carry(saved, new_path, tmp_path / "y", init="mean")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_cli(tmp_path, programs, saved):
    _, new_path = programs
    out = tmp_path / "moved"
    res = CliRunner().invoke(main, ["carry", str(saved), "--program", str(new_path), "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert "carried cat model" in res.output and f"wrote {out}" in res.output
    res = CliRunner().invoke(main, ["carry", str(saved), "--program", str(new_path), "--out", str(out), "-q"])
    assert res.exit_code == 1 and "pass --force" in res.output
    res = CliRunner().invoke(
        main, ["carry", str(saved), "--program", str(new_path), "--out", str(out), "--init", "mean"]
    )
    assert res.exit_code == 2 and "'mean' is not one of" in res.output


def test_transfer_is_a_hidden_alias_of_carry(tmp_path, programs, saved):
    """``hrrbert transfer``, the command's name before: same options and output, one line on stderr."""
    _, new_path = programs
    out = tmp_path / "moved"
    res = CliRunner().invoke(
        main, ["transfer", str(saved), "--program", str(new_path), "--out", str(out), "-q"]
    )
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == "'hrrbert transfer' is now 'hrrbert carry'"
    assert "carried cat model" in res.stdout and (out / REPORT_FILE).is_file()
    listing = CliRunner().invoke(main, ["--help"]).output
    names = [line.split()[0] for line in listing.splitlines() if line.startswith("  ")]
    assert "carry" in names and "transfer" not in names  # hidden


def test_a_model_carried_before_the_rename_keeps_its_record(tmp_path, programs, saved):
    """A source whose config.json has ``transferred_from`` (the key's name before) keeps it as ``earlier``."""
    _, new_path = programs
    src = tmp_path / "src"
    shutil.copytree(saved, src)
    meta = json.loads((src / "config.json").read_text())
    meta["transferred_from"] = {"model": "elsewhere", "init": "zero"}
    (src / "config.json").write_text(json.dumps(meta))
    carry(src, new_path, tmp_path / "moved")
    moved = json.loads((tmp_path / "moved" / "config.json").read_text())
    assert "transferred_from" not in moved
    assert moved["carried_from"]["earlier"] == [{"model": "elsewhere", "init": "zero"}]


def test_carried_folder_fine_tunes(tmp_path, programs, saved, one_thread):
    from pipelines.train.finetune import finetune

    _, new_path = programs
    out = tmp_path / "moved"
    carry(saved, new_path, out)
    ds = write_dataset(tmp_path / "ds", new_path)
    r = finetune(
        out,
        ds,
        new_path,
        out=tmp_path / "ft",
        task="mortality",
        epochs=1,
        batch_size=8,
        device="cpu",
        progress=False,
    )
    assert len(r.trials) == 1 and "test" in r.trials[0]


def test_model_without_its_program_needs_model_program(tmp_path, programs):
    old_path, new_path = programs
    torch.manual_seed(0)
    model = HRRBert(bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32, mode="add"), load_program(old_path))
    bare = model.save_pretrained(tmp_path / "run" / "model", carry_program=False, card=False)
    with pytest.raises(PretrainedFileError, match="does not carry its program"):
        carry(bare, new_path, tmp_path / "a")
    r = carry(
        tmp_path / "run", new_path, tmp_path / "b", model_program=old_path
    )  # a run folder holding model/
    assert r.source == bare and HRRBert.from_pretrained(tmp_path / "b").config.mode == "add"
