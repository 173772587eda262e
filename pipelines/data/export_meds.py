"""``export-meds``: a source ``prepare`` reads, written as a MEDS 0.4 dataset (``hrrbert export-meds``).

    export_meds("mimic-iv", "artifacts/ehr/demo-…", "artifacts/meds/demo")

The source goes through its reader (so the checks and findings of ``prepare`` apply) and the diagnoses it
keeps are written in the MIMIC-IV MEDS ETL's form; the layout is ``docs/input-formats.md``, "MEDS export":

- ``data/<split>/<i>.parquet``: DataSchema shards (``subject_id`` int64, ``time`` timestamp[us],
  ``code`` string, ``numeric_value`` float32, null here), one folder per split (as meds-torch-data needs),
  whole subjects per shard, each subject's rows contiguous and sorted by time, static events first. A
  diagnosis is ``DIAGNOSIS//ICD//{9,10}//<dotless code>`` (a MEDS source's unmapped ``SNOMED/<id>`` stays
  as it is) at the time its visit's codes are known (MIMIC-IV: ``dischtime``), once per (subject, time,
  code); ``GENDER//F``/``GENDER//M`` (no time) and ``MEDS_BIRTH`` come from the reader's static events;
  a death is ``MEDS_DEATH`` (MIMIC-IV: ``deathtime``, else ``dod``; MEDS: the earliest ``MEDS_DEATH``).
- ``metadata/dataset.json``: the DatasetMetadataSchema (name, version = the source's content hash, ETL).
- ``metadata/codes.parquet``: the CodeMetadataSchema, one row per code written: the ICD title where the
  source has one (MIMIC-IV ``hosp/d_icd_diagnoses``), ``parent_codes`` the OMOP-style dotted code
  (``ICD10CM/E11.9``).
- ``metadata/subject_splits.parquet``: every subject's ``train`` / ``tuning`` / ``held_out``: a dataset's
  splits (``splits_from``, :data:`MEDS_SPLITS`), else the source's, else a random 80/10/10.
- ``labels/mortality_6m/labels.parquet`` (``labels=True``): a LabelSchema task, one row per subject,
  ``prediction_time`` the start of its last visit and ``boolean_value`` the reader's ``mortality_6m`` of
  that visit: under MEDS semantics its input is the visits discharged by then, that of ``--task
  mortality``.

A source exports when its reader declares a ``meds_export`` (its deaths and titles;
:data:`pipelines.data.readers.READERS`); eICU has no absolute times (only offsets), which MEDS events
need, so it is refused with the reader's ``note``. The folder is
written into a temporary sibling and renamed into place; an existing folder is replaced only with
``force`` and only when it is an earlier export (its ``dataset.json`` names this ETL).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ontology_compiler.api import ICD9CM, ICD10CM, dotted
from pipelines.errors import PipelineError

from .folders import check_out, folder_written
from .readers import READERS, get_reader
from .readers.common import ReadResult, connect

log = logging.getLogger(__name__)

ETL_NAME = "hrrbert export-meds"
ETL_VERSION = "1"
MEDS_VERSION = "0.4"
DEATH_CODE = "MEDS_DEATH"
SHARD_SUBJECTS = 10_000  # subjects per data shard
LABEL_TASK = "mortality_6m"
BIRTH_CODE = "MEDS_BIRTH"
DATA_SCHEMA = pa.schema(
    [
        ("subject_id", pa.int64()),
        ("time", pa.timestamp("us")),
        ("code", pa.string()),
        ("numeric_value", pa.float32()),
    ]
)
STATIC_SCHEMA = pa.schema([("subject_id", pa.int64()), ("time", pa.timestamp("us")), ("code", pa.string())])
# a dataset's splits -> MEDS's (what meds-torch-data and MEDS-DEV read; ``prepare --meds`` honours them:
# held_out becomes test, tuning and train the fine-tuning pools, the rest pretraining)
MEDS_SPLITS = {"pretrain_train": "train", "finetune_train": "train", "pretrain_val": "tuning",
               "finetune_val": "tuning", "test": "held_out", "rood": "held_out"}  # fmt: skip
RANDOM_SPLITS = (("train", 0.8), ("tuning", 0.1), ("held_out", 0.1))  # without splits from anywhere
SPLIT_ORDER = {"train": 0, "tuning": 1, "held_out": 2}  # data/<split>/ folders, in this order first
SPLIT_NAME = re.compile(r"[A-Za-z0-9_.-]+")
STATIC_DESCRIPTIONS = {BIRTH_CODE: "Birth of the subject", "GENDER//F": "Gender: female",
                       "GENDER//M": "Gender: male"}  # fmt: skip
CODES_SCHEMA = pa.schema(
    [("code", pa.string()), ("description", pa.string()), ("parent_codes", pa.list_(pa.string()))]
)
SPLITS_SCHEMA = pa.schema([("subject_id", pa.int64()), ("split", pa.string())])
LABEL_SCHEMA = pa.schema(
    [("subject_id", pa.int64()), ("prediction_time", pa.timestamp("us")), ("boolean_value", pa.bool_())]
)
KINDS = tuple(name for name, r in READERS.items() if r.meds_export)  # the readers whose sources export


@dataclass
class ExportResult:
    path: Path
    counts: dict = field(default_factory=dict)
    files: list[str] = field(default_factory=list)  # paths relative to ``path``


def export_meds(
    kind: str,
    source: str | Path,
    out: str | Path,
    *,
    name: str | None = None,
    labels: bool = True,
    force: bool = False,
    splits_from: str | Path | None = None,
    seed: int = 0,
    shard_subjects: int = SHARD_SUBJECTS,
    threads: int | None = None,
) -> ExportResult:
    """Write the source ``source`` of ``kind`` (a reader with a ``meds_export``: :data:`KINDS`) as a MEDS
    dataset in ``out``. ``splits_from``: a dataset prepared from this source whose splits
    ``subject_splits.parquet`` carries (:data:`MEDS_SPLITS`); without it the source's own, else a random
    80/10/10 by ``seed``."""
    reader = get_reader(kind)
    if reader.meds_export is None:
        raise PipelineError(reader.note or f"a {kind} source cannot be exported as MEDS")
    if shard_subjects < 1:
        raise ValueError(f"shard_subjects must be >= 1, got {shard_subjects}")
    out, source = Path(out), Path(source)
    # before any work; an earlier export is one whose metadata/dataset.json names this ETL
    check_out(out, force, record=None, what="MEDS export", option="OUT", owned=_earlier_export)
    given = _dataset_splits(Path(splits_from)) if splits_from is not None else None
    data = reader.part("read")(source, threads=threads)
    root, inputs = reader.inputs(source)
    if data.events.num_rows == 0:
        raise PipelineError(f"{source}: no patient has a usable diagnosis code; nothing to export")
    con = connect(threads)
    con.register("ev", data.events)
    con.register("vis", data.visits)
    deaths, titles, static = reader.part("meds_export")(source, threads=threads)
    con.register("deaths", deaths)
    con.register("static", static.cast(STATIC_SCHEMA))
    tables = _tables(con, data, deaths, titles)
    tables["splits"], split_source = _splits(tables["splits"], given, tables["events"], seed)
    version = _content_hash(root, inputs)
    metadata = {
        "dataset_name": name or f"{data.source['kind']}-{source.resolve().name}",
        "dataset_version": version,
        "etl_name": ETL_NAME,
        "etl_version": ETL_VERSION,
        "meds_version": MEDS_VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with folder_written(out, "MEDS export", force=force, option="OUT", owned=_earlier_export) as tmp:
        files = _write(tmp, tables, metadata, labels, shard_subjects)
    counts = _counts(con, tables, labels, len([f for f in files if f.startswith("data/")]))
    counts["splits_from"] = split_source
    log.info("%s: MEDS dataset of %d subjects, %d events", out, counts["subjects"], counts["events"])
    return ExportResult(out, counts, files)


def _earlier_export(out: Path) -> bool:
    """Whether the folder ``out`` is an earlier export: its ``metadata/dataset.json`` names this ETL."""
    meta = out / "metadata" / "dataset.json"
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text(encoding="utf-8")).get("etl_name") == ETL_NAME
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, OSError):
        return False


def _tables(con: duckdb.DuckDBPyConnection, data: ReadResult, deaths: pa.Table, titles: dict) -> dict:
    """The exported tables: ``events`` (sorted, whole subjects), ``codes`` (with ``titles``: (vocabulary,
    dotless code) -> title), ``splits``, ``labels``; ``deaths``: each dead subject's time of death."""
    code = (
        "CASE vocabulary WHEN 'ICD9CM' THEN 'DIAGNOSIS//ICD//9//' || code WHEN 'ICD10CM' THEN "
        "'DIAGNOSIS//ICD//10//' || code ELSE vocabulary || '/' || code END"
    )
    # one row per (subject, time, code) at the time the visit's codes are known, in visit and code order;
    # before them the subject's static and birth events, after them its death
    con.execute(
        "CREATE TEMP TABLE dx AS SELECT subject_id, coalesce(known_time, visit_time) AS time, "
        f"{code} AS code, vocabulary, code AS dotless, visit_index, seq FROM ev QUALIFY row_number() "
        "OVER (PARTITION BY subject_id, coalesce(known_time, visit_time), "
        f"{code} ORDER BY visit_index, seq) = 1"
    )
    con.execute(
        "CREATE TEMP TABLE events AS SELECT subject_id, time, code, NULL::FLOAT AS numeric_value FROM "
        "(SELECT subject_id, time, code, 0 AS k, visit_index, seq FROM dx "
        "UNION ALL SELECT s.subject_id, s.time, s.code, -1, NULL, row_number() OVER () FROM static s "
        "SEMI JOIN dx USING (subject_id) "
        f"UNION ALL SELECT d.subject_id, d.time, '{DEATH_CODE}', 1, NULL, NULL FROM deaths d "
        "SEMI JOIN dx USING (subject_id)) ORDER BY subject_id, time NULLS FIRST, k, visit_index, seq"
    )
    codes = con.sql(
        "SELECT code, any_value(vocabulary) AS vocabulary, any_value(dotless) AS dotless FROM dx "
        "GROUP BY code "
        "ORDER BY code"
    ).to_arrow_table()
    vocab, dotless = codes["vocabulary"].to_pylist(), codes["dotless"].to_pylist()
    parents: list[list[str]] = [[] for _ in vocab]
    for v in (ICD9CM, ICD10CM):
        idx = [i for i, x in enumerate(vocab) if x == v]
        for i, dc in zip(
            idx, dotted(pa.array([dotless[i] for i in idx], pa.string()), v).to_pylist(), strict=True
        ):
            parents[i] = [f"{v}/{dc}"]
    dead = deaths.num_rows > 0
    static = sorted(
        r[0]
        for r in con.execute("SELECT DISTINCT code FROM static SEMI JOIN dx USING (subject_id)").fetchall()
    )
    code_rows = {
        "code": codes["code"].to_pylist() + static + [DEATH_CODE] * dead,
        "description": [titles.get(k) for k in zip(vocab, dotless, strict=True)]
        + [STATIC_DESCRIPTIONS.get(c) for c in static]
        + ["Death of the subject"] * dead,
        "parent_codes": parents + [[] for _ in static] + [[]] * dead,
    }
    splits = con.sql(
        "SELECT subject_id, any_value(given_split) AS split FROM vis WHERE given_split IS NOT NULL "
        "GROUP BY subject_id ORDER BY subject_id"
    ).to_arrow_table()
    # the reader's mortality_6m of the last visit (what `--task mortality` predicts), predicted at that
    # visit's start: its codes, known at discharge, are not in the input, as they are not for the task
    labels = con.sql(
        "WITH last AS (SELECT subject_id, max(visit_index) AS visit_index, "
        "max(visit_time) AS prediction_time FROM ev GROUP BY subject_id) "
        "SELECT l.subject_id, l.prediction_time, coalesce(v.mortality_6m, false) AS boolean_value "
        "FROM last l LEFT JOIN vis v USING (subject_id, visit_index) ORDER BY l.subject_id"
    ).to_arrow_table()
    return {
        "events": con.sql("SELECT * FROM events").to_arrow_table().cast(DATA_SCHEMA),
        "codes": pa.table(code_rows, schema=CODES_SCHEMA),
        "splits": splits.cast(SPLITS_SCHEMA),
        "labels": labels.cast(LABEL_SCHEMA),
    }


def _dataset_splits(dataset: Path) -> pa.Table:
    """``subject_id``, ``split`` (MEDS names, :data:`MEDS_SPLITS`) of every patient of the prepared dataset
    ``dataset``."""
    from .dataset import verify_dataset

    inner = sorted(p.parent.name for p in dataset.glob("*/manifest.json"))
    if not (dataset / "manifest.json").is_file() and inner:
        raise PipelineError(
            f"{dataset}: a folder of datasets ({', '.join(inner)}), not one: give --splits-from "
            f"{dataset / inner[-1]} or another of them"
        )
    verify_dataset(dataset, hashes=False)
    t = pq.read_table(dataset / "patients.parquet", columns=["subject_id", "split"])
    names = t["split"].cast(pa.string()).to_pylist()
    return pa.table(
        {"subject_id": t["subject_id"], "split": pa.array([MEDS_SPLITS[n] for n in names], pa.string())}
    ).sort_by("subject_id")


def _splits(source: pa.Table, given: pa.Table | None, events: pa.Table, seed: int) -> tuple[pa.Table, str]:
    """``subject_splits`` of the exported subjects and where it came from: the dataset's (``given``; its
    subjects only, those it dropped have none), else the source's own, else a random 80/10/10 by ``seed``."""
    subjects = np.unique(events["subject_id"].to_numpy())
    for table, where in ((given, "dataset"), (source, "source")):
        if table is None or not table.num_rows:
            continue
        ids, names = table["subject_id"].to_numpy(), np.asarray(table["split"].to_pylist(), dtype=object)
        bad = sorted({n for n in names.tolist() if not SPLIT_NAME.fullmatch(n)})
        if bad:
            raise PipelineError(
                f"the {where}'s split name(s) {', '.join(map(repr, bad[:5]))} cannot name a data/<split>/ "
                "folder (letters, digits, '_', '-' and '.' only)"
            )
        pos = np.minimum(np.searchsorted(ids, subjects), max(len(ids) - 1, 0))
        has = ids[pos] == subjects if len(ids) else np.zeros(len(subjects), bool)
        split = np.where(has, names[pos], "train")  # a subject without one (the dataset dropped it): train
        out = pa.table({"subject_id": subjects, "split": split.tolist()}, schema=SPLITS_SCHEMA)
        return out, where if has.all() else f"{where} ({int((~has).sum())} subjects without one: train)"
    rng = np.random.default_rng([seed, 34])
    order = rng.permutation(len(subjects))
    cuts = np.cumsum([0] + [round(f * len(subjects)) for _, f in RANDOM_SPLITS[:-1]] + [len(subjects)])
    split = np.empty(len(subjects), object)
    for (name, _), a, b in zip(RANDOM_SPLITS, cuts[:-1], cuts[1:], strict=True):
        split[order[a:b]] = name
    return pa.table({"subject_id": subjects, "split": split.tolist()}, schema=SPLITS_SCHEMA), "random"


def _write(tmp: Path, t: dict, metadata: dict, labels: bool, shard_subjects: int) -> list[str]:
    """Write the folder into ``tmp``; the files written, relative to it."""
    (tmp / "data").mkdir(parents=True)
    (tmp / "metadata").mkdir()
    files = []
    ev = t["events"]
    # every exported subject has a split (``_splits``: one row per subject, in subject order)
    sp = t["splits"]
    split_names = np.asarray(sp["split"].to_pylist(), dtype=object)
    names = split_names[np.searchsorted(sp["subject_id"].to_numpy(), ev["subject_id"].to_numpy())]  # (rows,)
    for name in sorted(set(names.tolist()), key=lambda n: (SPLIT_ORDER.get(n, len(SPLIT_ORDER)), n)):
        part = ev.filter(pa.array(names == name))  # (rows of the split's subjects, in subject order)
        ps = part["subject_id"].to_numpy()
        starts = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
        bounds = np.r_[starts[::shard_subjects], len(ps)]
        width = len(str(max(len(bounds) - 2, 0)))
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            rel = f"data/{name}/{i:0{width}d}.parquet"
            (tmp / rel).parent.mkdir(exist_ok=True)
            pq.write_table(part.slice(int(a), int(b - a)), tmp / rel)
            files.append(rel)
    (tmp / "metadata" / "dataset.json").write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    files.append("metadata/dataset.json")
    pq.write_table(t["codes"], tmp / "metadata" / "codes.parquet")
    files.append("metadata/codes.parquet")
    pq.write_table(t["splits"], tmp / "metadata" / "subject_splits.parquet")
    files.append("metadata/subject_splits.parquet")
    if labels:
        (tmp / "labels" / LABEL_TASK).mkdir(parents=True)
        pq.write_table(t["labels"], tmp / "labels" / LABEL_TASK / "labels.parquet")
        files.append(f"labels/{LABEL_TASK}/labels.parquet")
    return files


def _counts(con: duckdb.DuckDBPyConnection, t: dict, labels: bool, shards: int) -> dict:
    ev = t["events"]
    deaths = int(pc.sum(pc.equal(ev["code"], DEATH_CODE)).as_py() or 0)
    dup = con.execute("SELECT (SELECT count(*) FROM ev) - (SELECT count(*) FROM dx)").fetchall()[0][0]
    shared = con.execute(
        "SELECT count(*) FROM (SELECT subject_id, coalesce(known_time, visit_time) FROM ev GROUP BY ALL "
        "HAVING count(DISTINCT visit_index) > 1)"
    ).fetchall()[0][0]
    static = dict(
        con.execute(
            "SELECT CASE WHEN code = $1 THEN 'births' ELSE 'static_events' END, count(*) FROM static "
            "SEMI JOIN dx USING (subject_id) GROUP BY 1",
            [BIRTH_CODE],
        ).fetchall()
    )
    out = {
        "subjects": len(np.unique(ev["subject_id"].to_numpy())),
        "events": ev.num_rows,
        "diagnosis_events": ev.num_rows - deaths - sum(static.values()),
        "deaths": deaths,
        "births": int(static.get("births", 0)),
        "static_events": int(static.get("static_events", 0)),
        "codes": t["codes"].num_rows,
        "shards": shards,
        "subjects_with_split": t["splits"].num_rows,
        "diagnosis_rows_repeated_in_a_visit": int(dup),
        "visits_sharing_a_time": int(shared),
    }
    if labels:
        out[f"label_rows_{LABEL_TASK}"] = t["labels"].num_rows
        out[f"label_positives_{LABEL_TASK}"] = int(np.asarray(t["labels"]["boolean_value"]).sum())
    return out


def _content_hash(root: Path, files: list[Path]) -> str:
    """The first 16 hex digits of a SHA-256 over the source files' paths and SHA-256s (the export's
    version)."""
    from ontology_compiler.api import sha256_file

    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f"{f.relative_to(root).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()[:16]


def describe(r: ExportResult) -> str:
    """What ``hrrbert export-meds`` prints."""
    c = r.counts
    lines = [
        f"meds      {r.path}",
        f"subjects  {c['subjects']} in {c['shards']} shard(s); {c['events']} events ({c['diagnosis_events']} "
        f"diagnoses, {c['deaths']} deaths), {c['codes']} codes in metadata/codes.parquet",
    ]
    lines.append(
        f"static    {c['births']} MEDS_BIRTH, {c['static_events']} other static events; subject_splits from "
        f"{c['splits_from']}"
        + (
            " (80/10/10 by --seed; --splits-from DATASET for a dataset's)"
            if c["splits_from"] == "random"
            else ""
        )  # fmt: skip
    )
    if f"label_rows_{LABEL_TASK}" in c:
        lines.append(
            f"labels    {r.path / 'labels' / LABEL_TASK}: {c[f'label_rows_{LABEL_TASK}']} rows, "
            f"{c[f'label_positives_{LABEL_TASK}']} positive (finetune --labels)"
        )
    other = {
        k: c[k]
        for k in ("subjects_with_split", "diagnosis_rows_repeated_in_a_visit", "visits_sharing_a_time")
        if c[k]
    }
    if other:
        lines.append(f"counts    {', '.join(f'{k} {v}' for k, v in other.items())}")
    return "\n".join(lines)
