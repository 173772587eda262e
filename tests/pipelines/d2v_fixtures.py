"""A tiny tokenized dataset (with MIMIC-IV demographics) for the Doctor2Vec tests, on the fixture program."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ontology_compiler.artifact import sha256_file
from pipelines.doctor2vec.data import D2VOptions

# fixture program codes (tests/data/snomed_mini_20220531): J45* (16-19) and M81* (24-26) are made rare
RARE_CODES = (16, 17, 18, 19, 24, 25, 26)
OPTS = D2VOptions(
    doctors=12,
    panel_median=20,
    panel_min=5,
    panel_max=40,
    train_trials=6,
    val_trials=2,
    test_trials=2,
    rare_trials=2,
    rare_min_patients=3,
    rare_max_patients=15,
    common_min_patients=30,
    seed=3,
)


def make_dataset(root, program, *, demographics: bool = True, n: int = 360, seed: int = 0, source_path=None):
    """A tokenized dataset (format 1) of ``n`` patients: [CLS] then 2-3 visits of common codes; a few
    patients also carry one rare code. With ``demographics``, a MIMIC-IV ``hosp/patients.csv.gz`` under
    ``<root>/ehr``, listed with its sha256 in the manifest's ``source.inputs`` as the reader lists it;
    ``source_path`` is the source folder the manifest records (default: ``<root>/ehr``, absolute)."""
    concepts = pq.read_table(program / "concepts.parquet").to_pydict()
    normal = [i for i, c in enumerate(concepts["code"]) if not c.startswith("[") and i not in RARE_CODES]
    rng = np.random.default_rng(seed)
    rare_of = {
        int(p): RARE_CODES[k % len(RARE_CODES)] for k, p in enumerate(rng.choice(n, 56, replace=False))
    }
    ids, segs = [], []
    for p in range(n):
        row, seg = [1], [0]
        for v in range(int(rng.integers(2, 4))):
            visit = rng.choice(normal, size=int(rng.integers(1, 4)), replace=False).tolist()
            if v == 0 and p in rare_of:
                visit.append(rare_of[p])
            row += visit
            seg += [v] * len(visit)
        ids.append(row)
        segs.append(seg)
    pid = json.loads((program / "manifest.json").read_text())["program_id"]
    root.mkdir(parents=True)
    patients = pa.table(
        {
            "subject_id": pa.array(np.arange(n) + 5000, pa.int64()),
            "split": pa.array(["pretrain_train"] * n).dictionary_encode(),
            "input_ids": pa.array(ids, pa.list_(pa.int32())),
            "segment_ids": pa.array(segs, pa.list_(pa.int16())),
        }
    )
    pq.write_table(patients, root / "patients.parquet")
    source = {"kind": "test"}
    if demographics:
        (root / "ehr" / "hosp").mkdir(parents=True)
        lines = ["subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod"]
        for p in range(n - 5):  # the last 5 patients have no demographics row
            age = "" if p % 50 == 7 else str(int(rng.integers(18, 95)))
            lines.append(f"{p + 5000},{'F' if rng.random() < 0.5 else 'M'},{age},2150,2014 - 2016,")
        with gzip.open(root / "ehr" / "hosp" / "patients.csv.gz", "wt") as f:
            f.write("\n".join(lines) + "\n")
        f = root / "ehr" / "hosp" / "patients.csv.gz"
        inputs = [{"path": "hosp/patients.csv.gz", "sha256": sha256_file(f), "bytes": f.stat().st_size}]
        source = {
            "kind": "test",
            "reader": "mimic-iv",
            "path": str(source_path or root / "ehr"),
            "inputs": inputs,
        }
    manifest = {
        "format_version": 1,
        "dataset_id": f"d2vtest{int(demographics)}{seed}",
        "program_id": pid,
        "source": source,
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root
