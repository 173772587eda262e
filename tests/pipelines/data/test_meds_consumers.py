"""An ``export-meds`` folder loaded by the MEDS community's own readers (issue 34 item 1): meds-reader 0.2.0
converts it and verifies the conversion against it; meds-torch-data 0.9.0 pre-processes it
(``MTD_preprocess``, a MEDS-Transforms pipeline) and its ``MEDSPytorchDataset`` serves every split and the
exported ``mortality_6m`` task, with each sample's sequence ending at its prediction time; ACES (es-aces
0.7.3) extracts a cohort with a sex criterion (tests/data/aces_female_mortality.yaml: women, a death within
182 days of a diagnosis), which the export's GENDER events make possible."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from pipelines.demo.prepare import export_demo_meds

    tmp = tmp_path_factory.mktemp("consumers")
    return export_demo_meds(
        tmp / "meds", artifacts=tmp / "artifacts", size="small", n_patients=400, seed=2
    ).path


@pytest.mark.slow
def test_meds_reader_converts_and_verifies_the_export(export, tmp_path):
    pytest.importorskip("meds_reader")
    out = tmp_path / "reader"
    subprocess.run([_bin("meds_reader_convert"), str(export), str(out), "--num_threads", "1"], check=True)
    done = subprocess.run([_bin("meds_reader_verify"), str(export), str(out)], capture_output=True, text=True)
    assert done.returncode == 0 and "Test passed" in done.stdout + done.stderr
    import meds_reader

    with meds_reader.SubjectDatabase(str(out)) as db:
        s = db[next(iter(db))]
        codes = [e.code for e in s.events]
        assert codes[0].startswith("GENDER//") and "MEDS_BIRTH" in codes


@pytest.mark.slow
def test_meds_torch_data_serves_every_split_and_the_task(export, tmp_path):
    pytest.importorskip("meds_torchdata")
    from meds_torchdata import MEDSPytorchDataset, MEDSTorchDataConfig

    out = tmp_path / "mtd"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    subprocess.run(
        [_bin("MTD_preprocess"), f"MEDS_dataset_dir={export}", f"output_dir={out}"],
        check=True, env=env, capture_output=True,
    )  # fmt: skip
    splits = pq.read_table(export / "metadata" / "subject_splits.parquet")
    for name in ("train", "tuning", "held_out"):
        ds = MEDSPytorchDataset(
            MEDSTorchDataConfig(tensorized_cohort_dir=str(out), max_seq_len=64), split=name
        )
        assert len(ds) == pc.sum(pc.equal(splits["split"], name)).as_py() > 0
    cfg = MEDSTorchDataConfig(
        tensorized_cohort_dir=str(out), max_seq_len=64, seq_sampling_strategy="to_end",
        task_labels_dir=str(export / "labels" / "mortality_6m"),
    )  # fmt: skip
    task = MEDSPytorchDataset(cfg, split="held_out")
    batch = task.collate([task[i] for i in range(min(4, len(task)))])
    assert len(task) > 0 and batch.boolean_value is not None


@pytest.mark.slow
def test_aces_extracts_a_cohort_on_sex_from_the_export(export, tmp_path):
    pytest.importorskip("aces")
    config = Path(__file__).resolve().parents[2] / "data" / "aces_female_mortality.yaml"
    subprocess.run(
        [_bin("aces-cli"), f"config_path={config}", f"cohort_dir={tmp_path}", "cohort_name=f", "data=sharded",
         "data.standard=meds", f"data.root={export / 'data'}", "data.shard=train/0"],
        check=True, capture_output=True,
    )  # fmt: skip
    got = pq.read_table(tmp_path / "f" / "train" / "0.parquet")
    data = pq.read_table(export / "data" / "train" / "0.parquet")
    female = set(data.filter(pc.equal(data["code"], "GENDER//F"))["subject_id"].to_pylist())
    subjects = set(got["subject_id"].to_pylist())
    assert got.num_rows > 0 and subjects <= female and len(subjects) > 0
