"""Bad input to pretraining and fine-tuning: each error names the file and what differs."""

from __future__ import annotations

import pytest
from train_fixtures import dataset_dir, program_dir, write_dataset  # noqa: F401

from model import PretrainedFileError, ProgramMismatchError
from pipelines.data.sequences import DatasetProgramMismatchError, LabelsMissingError
from pipelines.train.checkpoint import CheckpointError, ConfigMismatchError, load_checkpoint
from pipelines.train.finetune import finetune
from pipelines.train.pretrain import pretrain

KW = dict(model="tiny", batch_size=8, device="cpu", progress=False)


def test_dataset_of_another_program(tmp_path, program_dir):  # noqa: F811
    ds = write_dataset(tmp_path / "ds", program_dir, program_id="0123456789abcdef")
    with pytest.raises(DatasetProgramMismatchError) as e:
        pretrain(ds, program_dir, out=tmp_path, max_steps=1, **KW)
    msg = str(e.value)
    assert "0123456789abcdef" in msg and program_dir.name in msg and "manifest.json" in msg


def test_missing_and_corrupt_checkpoints(tmp_path, dataset_dir, program_dir):  # noqa: F811
    with pytest.raises(CheckpointError, match="nope.pt"):
        load_checkpoint(tmp_path / "nope.pt")
    r = pretrain(dataset_dir, program_dir, out=tmp_path, max_steps=2, save_every=1, keep_checkpoints=5, **KW)
    ck = r.run_dir / "checkpoints" / "step-00000002.pt"
    ck.write_bytes(ck.read_bytes()[:200])
    with pytest.raises(CheckpointError, match="step-00000002.pt.*corrupt"):
        pretrain(
            dataset_dir,
            program_dir,
            out=tmp_path,
            max_steps=2,
            save_every=1,
            keep_checkpoints=5,
            resume=True,
            **KW,
        )
    for p in (r.run_dir / "checkpoints").iterdir():
        p.unlink()
    with pytest.raises(CheckpointError, match="checkpoints.*no checkpoint"):
        pretrain(dataset_dir, program_dir, out=tmp_path, max_steps=2, resume=True, **KW)
    with pytest.raises(Exception, match="config.json: missing; nothing to resume"):
        pretrain(dataset_dir, program_dir, out=tmp_path / "other", max_steps=2, resume=True, **KW)


def test_resume_with_changed_config_names_the_keys(tmp_path, dataset_dir, program_dir):  # noqa: F811
    pretrain(dataset_dir, program_dir, out=tmp_path, max_steps=2, **KW)
    with pytest.raises(ConfigMismatchError) as e:
        pretrain(dataset_dir, program_dir, out=tmp_path, max_steps=3, lr=5e-4, resume=True, **KW)
    msg = str(e.value)
    assert "max_steps" in msg and "lr" in msg and "config.json" in msg and "0.0005" in msg
    # runtime-only options may change
    pretrain(dataset_dir, program_dir, out=tmp_path, max_steps=2, resume=True, **{**KW, "progress": True})


@pytest.mark.parametrize(
    ("drop", "null", "task", "column"),
    [
        (("mortality_6m",), None, "mortality", "mortality_6m"),
        (("chapters",), None, "chapters", "chapters"),
        ((), "mortality_6m", "mortality", "mortality_6m"),
    ],
)
def test_task_labels_absent(tmp_path, program_dir, drop, null, task, column):  # noqa: F811
    ds = write_dataset(tmp_path / "ds", program_dir, drop_columns=drop, null_column=null)
    run = pretrain(ds, program_dir, out=tmp_path, max_steps=1, **KW).run_dir
    with pytest.raises(LabelsMissingError) as e:
        finetune(run, ds, program_dir, out=tmp_path, task=task, epochs=1, device="cpu", progress=False)
    assert column in str(e.value) and "patients.parquet" in str(e.value)


def test_finetune_with_missing_model_or_other_program(tmp_path, dataset_dir, program_dir):  # noqa: F811
    with pytest.raises(PretrainedFileError, match="config.json"):
        finetune(tmp_path, dataset_dir, program_dir, out=tmp_path, epochs=1, device="cpu")
    run = pretrain(dataset_dir, program_dir, out=tmp_path, max_steps=1, **KW).run_dir
    import json

    cfg = run / "model" / "config.json"
    meta = json.loads(cfg.read_text())
    meta["program_id"] = "feedfacefeedface"
    cfg.write_text(json.dumps(meta))
    with pytest.raises(ProgramMismatchError) as e:
        finetune(run, dataset_dir, program_dir, out=tmp_path, epochs=1, device="cpu")
    assert "feedfacefeedface" in str(e.value) and program_dir.name in str(e.value)
