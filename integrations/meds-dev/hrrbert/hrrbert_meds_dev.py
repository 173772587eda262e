r"""hrrbert's MEDS-DEV model commands: thin calls of the ``hrrbert`` command line (``model.yaml``).

    python hrrbert_meds_dev.py pretrain dataset_dir=D output_dir=O demo=False
    python hrrbert_meds_dev.py finetune dataset_dir=D labels_dir=L output_dir=O \
        model_initialization_dir=I demo=False
    python hrrbert_meds_dev.py predict dataset_dir=D labels_dir=L output_dir=O \
        model_initialization_dir=I split=held_out

Arguments are MEDS-DEV's template variables as ``key=value`` (its ``{dataset_dir}`` ... in ``model.yaml``).

The ontology: hrrbert embeds codes through a compiled HRR program, which MEDS-DEV does not provide. The
environment variable ``HRRBERT_PROGRAM`` names one (a program folder, or a folder of programs: the
newest), compiled from the user's SNOMED CT release (``hrrbert compile-ontology``); with ``demo=True`` and
no ``HRRBERT_PROGRAM``, the demo release's program is built under ``output_dir`` (a synthetic SNOMED over
the real ICD-10-CM codes: for trying the harness, not for results).

- ``pretrain`` (unsupervised train): ``hrrbert prepare --meds`` with the dataset's ``subject_splits``
  (held_out becomes test, so pretraining never sees it; no ROOD hold-out), then ``hrrbert pretrain``.
- ``finetune`` (supervised train): a second dataset of the same program in which every train and tuning
  patient with a visit before its last is a fine-tuning patient, then ``hrrbert finetune --labels``.
- ``predict`` (supervised predict): ``hrrbert evaluate --labels`` on the rows of ``split`` (only the
  label-task evaluation runs), then ``output_dir/predictions.parquet`` in MEDS-DEV's layout (every label
  row of the split's subjects: ``subject_id``, ``prediction_time``, ``boolean_value``,
  ``predicted_boolean_value``, ``predicted_boolean_probability``). A row hrrbert cannot place (no visit
  known by its prediction time, or a subject with no code the program knows) gets the fine-tuning rows'
  positive rate; ``output_dir/hrrbert_predict.json`` counts them.

Each stage writes ``output_dir/hrrbert_stage.json`` (the program, datasets and runs) for the next one,
which finds it through ``model_initialization_dir``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

STAGE_FILE = "hrrbert_stage.json"
PREDICTIONS_FILE = "predictions.parquet"
# the demo's recipes (pipelines/demo/defaults.py); demo=True: a few steps, to try the harness
PRETRAIN = ["--model", "tiny", "--max-steps", "2000", "--batch-size", "64", "--lr", "2e-3", "--warmup", "0.1"]
PRETRAIN_DEMO = ["--model", "tiny", "--max-steps", "30", "--batch-size", "32", "--lr", "2e-3"]
FINETUNE = [
    "--max-steps",
    "600",
    "--lr",
    "1e-3",
    "--batch-size",
    "32",
    "--schedule",
    "linear",
    "--pos-weight",
    "auto",
    "--pooling",
    "cls+mean",
    "--trials",
    "1",
]
FINETUNE_DEMO = [
    "--max-steps",
    "20",
    "--lr",
    "1e-3",
    "--batch-size",
    "32",
    "--pos-weight",
    "auto",
    "--trials",
    "1",
]
EVALUATE_LABELS_ONLY = [
    "--per-bin",
    "0",
    "--per-group",
    "0",
    "--tsne-points",
    "0",
    "--unbinding-rows",
    "0",
    "--cost-steps",
    "0",
    "--no-chapters-probe",
    "--next-visit-epochs",
    "0",
]
ALL = str(10**9)  # a split size larger than any cohort: every eligible patient


def hrrbert(*args: str) -> str:
    """Run ``hrrbert ARGS`` (the console script beside this Python); its standard output."""
    exe = Path(sys.executable).parent / "hrrbert"
    cmd = [str(exe) if exe.is_file() else "hrrbert", *args]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(done.stdout)
    return done.stdout


def printed(output: str, key: str) -> str:
    """The value of the line ``<key>  <value>`` that hrrbert printed (e.g. ``dataset``, ``run``)."""
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == key:
            return parts[1]
    raise RuntimeError(f"hrrbert printed no '{key}' line")


def program_for(output_dir: Path, demo: bool) -> str:
    """``HRRBERT_PROGRAM``, else (demo only) the demo release's program built under ``output_dir``."""
    given = os.environ.get("HRRBERT_PROGRAM")
    if given:
        return given
    if not demo:
        raise SystemExit(
            "set HRRBERT_PROGRAM to a compiled HRR program (hrrbert compile-ontology on your SNOMED CT "
            "release); without one only demo=True runs, on the demo's synthetic ontology"
        )
    from ontology_compiler.api import compile_ontology
    from pipelines.demo.defaults import DEMO_RELEASE_SEED
    from pipelines.demo.prepare import ensure_demo_release

    release = ensure_demo_release(output_dir / "release", size="default", seed=DEMO_RELEASE_SEED)
    return str(compile_ontology(release, out=output_dir / "programs").path)


def prepare(dataset_dir: str, program: str, out: Path, name: str, *sizes: str) -> str:
    output = hrrbert(
        "prepare",
        "--meds",
        dataset_dir,
        "--program",
        program,
        "--out",
        str(out),
        "--name",
        name,
        "--rood-codes",
        "0",
        "--rood-unseen-patients",
        "0",
        *sizes,
    )
    return printed(output, "dataset")


def read_stage(model_initialization_dir: str) -> dict:
    f = Path(model_initialization_dir) / STAGE_FILE
    if not f.is_file():
        raise SystemExit(
            f"{f}: not found; model_initialization_dir must be the output_dir of the stage before"
        )
    return json.loads(f.read_text(encoding="utf-8"))


def write_stage(output_dir: Path, stage: dict) -> None:
    (output_dir / STAGE_FILE).write_text(json.dumps(stage, indent=2) + "\n", encoding="utf-8")


def pretrain(a: dict) -> None:
    out, demo = Path(a["output_dir"]), a.get("demo", "False") == "True"
    out.mkdir(parents=True, exist_ok=True)
    program = program_for(out, demo)
    dataset = prepare(
        a["dataset_dir"],
        program,
        out / "datasets",
        "pretrain",
        "--finetune-train",
        "0",
        "--finetune-val",
        "0",
    )
    run = printed(
        hrrbert(
            "pretrain",
            dataset,
            "--program",
            program,
            "--out",
            str(out),
            "--run-id",
            "pretrain",
            *(PRETRAIN_DEMO if demo else PRETRAIN),
        ),
        "run",
    )
    write_stage(out, {"program": program, "pretrain_dataset": dataset, "pretrain_run": run})


def finetune(a: dict) -> None:
    out, demo = Path(a["output_dir"]), a.get("demo", "False") == "True"
    out.mkdir(parents=True, exist_ok=True)
    stage = read_stage(a["model_initialization_dir"])
    dataset = prepare(
        a["dataset_dir"],
        stage["program"],
        out / "datasets",
        "finetune",
        "--finetune-train",
        ALL,
        "--finetune-val",
        ALL,
    )
    run = printed(
        hrrbert(
            "finetune",
            stage["pretrain_run"],
            "--dataset",
            dataset,
            "--program",
            stage["program"],
            "--labels",
            a["labels_dir"],
            "--out",
            str(out),
            "--run-id",
            "finetune",
            *(FINETUNE_DEMO if demo else FINETUNE),
        ),
        "run",
    )
    write_stage(out, {**stage, "finetune_dataset": dataset, "finetune_run": run})


def predict(a: dict) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = Path(a["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    stage = read_stage(a["model_initialization_dir"])
    split = a.get("split", "held_out")
    if split != "held_out":
        raise SystemExit(f"split={split}: hrrbert predicts the held_out split (its test split)")
    ev = out / "evaluate"
    hrrbert(
        "evaluate",
        stage["pretrain_run"],
        "--dataset",
        stage["finetune_dataset"],
        "--program",
        stage["program"],
        "--out",
        str(ev),
        "--labels",
        a["labels_dir"],
        "--labels-run",
        stage["finetune_run"],
        "--labels-split",
        "test",
        "--force",
        *EVALUATE_LABELS_ONLY,
    )
    scored = pq.read_table(next(iter(sorted((ev / "labels_predictions").glob("*.parquet")))))
    splits = pq.read_table(Path(a["dataset_dir"]) / "metadata" / "subject_splits.parquet")
    subjects = splits.filter(pc.equal(splits["split"], split))["subject_id"]
    files = sorted(Path(a["labels_dir"]).rglob("*.parquet"))
    labels = pa.concat_tables(
        pq.read_table(f, columns=["subject_id", "prediction_time", "boolean_value"]) for f in files
    )
    labels = labels.filter(pc.is_in(labels["subject_id"], subjects))
    labels = labels.set_column(1, "prediction_time", labels["prediction_time"].cast(pa.timestamp("us")))
    joined = labels.join(
        scored.drop_columns(["boolean_value"]), ["subject_id", "prediction_time"], join_type="left outer"
    )
    record = json.loads((ev / "evaluation.json").read_text(encoding="utf-8"))["labels"]
    placed = record["placed"]
    rate = placed["positives_by_split"]["finetune_train"] / max(placed["rows_by_split"]["finetune_train"], 1)
    missing = pc.is_null(joined["predicted_boolean_probability"])
    thr = record["trials"][0]["threshold"]
    prob = pc.fill_null(joined["predicted_boolean_probability"], pa.scalar(rate, pa.float32()))
    value = pc.if_else(missing, pa.scalar(rate >= thr), joined["predicted_boolean_value"])
    table = pa.table(
        {
            "subject_id": joined["subject_id"].cast(pa.int64()),
            "prediction_time": joined["prediction_time"],
            "boolean_value": joined["boolean_value"].cast(pa.bool_()),
            "predicted_boolean_value": value,
            "predicted_boolean_probability": prob.cast(pa.float32()),
        }
    ).sort_by([("subject_id", "ascending"), ("prediction_time", "ascending")])
    pq.write_table(table, out / PREDICTIONS_FILE)
    n_missing = int(np.asarray(missing).sum())
    (out / "hrrbert_predict.json").write_text(
        json.dumps(
            {
                "rows": table.num_rows,
                "scored_by_the_model": table.num_rows - n_missing,
                "filled_with_the_finetuning_positive_rate": n_missing,
                "positive_rate": rate,
                "threshold": thr,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"predictions {out / PREDICTIONS_FILE}: {table.num_rows} rows ({n_missing} without input)")


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("pretrain", "finetune", "predict"):
        raise SystemExit("usage: hrrbert_meds_dev.py pretrain|finetune|predict key=value ...")
    args = dict(x.split("=", 1) for x in argv[1:])
    {"pretrain": pretrain, "finetune": finetune, "predict": predict}[argv[0]](args)


if __name__ == "__main__":
    main(sys.argv[1:])
