"""``hrrbert demo --carry``: a model trained on one release meets the codes the next release added.

The demo release's Full files hold two effective times; compiled ``--as-of`` the first
(:data:`~pipelines.demo.release_model.ET1`) the program lacks the codes whose concepts the second added
(the *new codes*; real ICD-10-CM codes, with their maps). The study:

1. compiles the old program beside the demo's (latest) one, lists the new codes, and writes a copy of
   the demo cohort without the patients who carry any of them (``ehr/<cohort>-before-<ET2>``);
2. prepares that copy against the old program (dataset ``demo-carry-old``) and the whole cohort
   against the new program with the new codes held out (``demo-carry-new``: its ``rood`` split is
   exactly the patients carrying new codes, whom no model trains on);
3. pretrains ``unstructured`` and ``base`` on the old dataset and fine-tunes each on the chapters task
   (the demo's settings), then carries every model to the new program (:mod:`pipelines.ontology.carry`:
   ``base`` composes the new codes from its trained atoms; ``unstructured`` can only give them the
   ``[UNK]`` row);
4. scores the new codes (:mod:`pipelines.ontology.newcodes`): MLM top-k of every new-code occurrence
   in those patients, the chapters task on the patients whose history holds a new code, and the
   ontology-relatedness of the new codes' nearest trained codes (with old codes as the reference).

Everything lands in ``<out>/runs/<name>/`` (the experiment of the old models) and its ``carry/``
folder: ``carry.json`` (every number, with how its interval was made) and ``carry.md``.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.data.prepare import prepare_source
from pipelines.data.splits import SplitOptions

from .defaults import DEMO_PATIENTS, DEMO_RELEASE_SEED, demo_split_sizes
from .prepare import ensure_cohort, ensure_demo_release
from .release_model import ET1, ET2

__all__ = ["CarryStudy", "run_carry_demo", "cohort_without"]

log = logging.getLogger(__name__)

CONFIGURATIONS = ("unstructured", "base")
TASK = "chapters"
MLM_K = 10  # the headline top-k of the MLM probes
NEIGHBOURS = 4  # neighbours scored per code (the evaluation's k)
HOSP_TABLES = ("patients", "admissions", "diagnoses_icd")  # what the MIMIC-IV reader reads


@dataclass
class CarryStudy:
    path: Path  # the study folder (<experiment>/carry)
    record: dict[str, Any]
    headline: str


def cohort_without(ehr: Path, codes: pa.Table, dest: Path) -> Path:
    """A copy of the MIMIC-IV-layout cohort ``ehr`` (its ``hosp/`` tables the reader needs) without the
    patients who carry any of ``codes`` (columns ``vocabulary``, ``code`` dotless); written once into
    ``dest`` (atomic rename)."""
    import duckdb

    from pipelines.data.folders import folder_written
    from pipelines.data.readers.common import duckdb_path

    if (dest / "hosp" / "diagnoses_icd.csv.gz").is_file():
        return dest
    with folder_written(dest, "cohort copy", force=True) as tmp:  # a cache: an incomplete one is replaced
        (tmp / "hosp").mkdir()
        con = duckdb.connect()
        con.register("new_codes", codes.select(["vocabulary", "code"]))
        # glob characters escaped, so the compression is named (DuckDB's guess from the name fails then)
        src = {t: duckdb_path(ehr / "hosp" / f"{t}.csv.gz") for t in HOSP_TABLES}
        con.execute(
            "CREATE TABLE carriers AS SELECT DISTINCT d.subject_id "
            "FROM read_csv(?, all_varchar = true, compression = 'gzip') d "
            "JOIN new_codes n ON n.code = d.icd_code AND n.vocabulary = "
            "CASE d.icd_version WHEN '9' THEN 'ICD9CM' ELSE 'ICD10CM' END",
            [src["diagnoses_icd"]],
        )
        for t in HOSP_TABLES:
            rel = con.sql(
                "SELECT * FROM read_csv($1, all_varchar = true, compression = 'gzip') "
                "WHERE subject_id NOT IN (SELECT subject_id FROM carriers)",
                params=[src[t]],
            )
            rel.write_csv(str(tmp / "hosp" / f"{t}.csv.gz"), header=True, compression="gzip")
        for extra in ("d_icd_diagnoses.csv.gz",):
            if (ehr / "hosp" / extra).is_file():
                shutil.copy2(ehr / "hosp" / extra, tmp / "hosp" / extra)
        con.close()
    return dest


def _new_codes_table(new, rows: np.ndarray) -> pa.Table:
    return pa.table(
        {
            "vocabulary": [new.concept_vocabularies[i] for i in rows],
            "code": [new.concept_codes[i] for i in rows],
            "code_dotted": [new.concept_codes_dotted[i] for i in rows],
            "title": [new.concept_titles[i] for i in rows],
        }
    )


def _programs(out: Path, size: str) -> tuple[Path, Path, Path]:
    """(release, new program, old program) folders; compiled once."""
    from ontology_compiler.api import compile_ontology

    release = ensure_demo_release(
        out / "releases" / f"demo_icd10cm_{size}", size=size, seed=DEMO_RELEASE_SEED
    )
    new = compile_ontology(release, out=out / "programs").path
    old = compile_ontology(
        release, out=out / "programs", name=f"demo_icd10cm_{size}_as_of_{ET1}", as_of=ET1, release="full"
    ).path
    return release, new, old


def _datasets(out: Path, ehr: Path, new_dir: Path, old_dir: Path, codes_file: Path, patients: int, seed: int):
    sizes = demo_split_sizes(patients)
    before = cohort_without(ehr, pq.read_table(codes_file), out / "ehr" / f"{ehr.name}-before-{ET2}")
    common = {"out": out / "datasets", "label": "demo"}
    d_old = prepare_source(
        "mimic-iv",
        before,
        old_dir,
        name="demo-carry-old",
        splits=SplitOptions(seed=seed, rood_codes=0, **sizes),
        **common,
    )
    d_new = prepare_source(
        "mimic-iv",
        ehr,
        new_dir,
        name="demo-carry-new",
        splits=SplitOptions(seed=seed, **sizes),
        hold_out=codes_file,
        **common,
    )
    return before, d_old, d_new


def run_carry_demo(
    out: str | Path = "artifacts",
    *,
    size: str = "default",
    patients: int = DEMO_PATIENTS,
    seed: int = 0,
    train_steps: int | None = None,
    trials: int | None = None,
    device: str = "cpu",
    init: str = "parents",
    show: Callable[[str], None] = log.info,
) -> CarryStudy | None:
    """Run the study (see the module docstring) into ``out``; returns its folder, record and headline
    (None with ``train_steps=0``: the data steps only)."""
    from hrr_kernel import load_program
    from pipelines.ontology.newcodes import new_code_rows

    from .run import demo_name, run_demo_experiment

    out = Path(out)
    _, new_dir, old_dir = _programs(out, size)
    ehr = ensure_cohort(out / "ehr", new_dir, n_patients=patients, seed=seed)
    old_p, new_p = load_program(old_dir), load_program(new_dir)
    rows = new_code_rows(old_p, new_p)
    codes_file = out / "ehr" / f"{ehr.name}-new-codes-{old_p.program_id}.parquet"
    if not codes_file.is_file():
        pq.write_table(_new_codes_table(new_p, rows), codes_file)
    show(f"old program {old_dir} (as of {ET1}): {old_p.n_concepts} tokens")
    show(f"new program {new_dir} (as of {ET2}): {new_p.n_concepts} tokens, {rows.size} new codes")
    before, d_old, d_new = _datasets(out, ehr, new_dir, old_dir, codes_file, patients, seed)
    show(
        f"cohort without new-code carriers {before}\ndataset (old program) {d_old.path}\n"
        f"dataset (new program, carriers held out as rood) {d_new.path}"
    )
    if train_steps == 0:
        return None
    name = demo_name(size, patients, train_steps, trials, seed) + "-carry"
    exp = run_demo_experiment(
        out,
        d_old.path,
        old_dir,
        None,
        name=name,
        train_steps=train_steps,
        trials=trials,
        device=device,
        tasks=(TASK,),
        baselines=False,
        evaluate={"tsne_points": 0, "cost_steps": 0},
    )
    show(f"experiment (old program) {exp.path} ({exp.seconds:.0f} s)")
    from .carry_study_eval import evaluate_carry

    return evaluate_carry(exp.path, new_dir, d_new.path, rows, init=init, seed=seed, device=device, show=show)


def write_study(folder: Path, record: dict[str, Any], markdown: str) -> None:
    """``carry.json`` and ``carry.md`` into ``folder``, each written atomically."""
    from pipelines.train.runtime import write_file_atomically, write_json

    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "carry.json", record)
    write_file_atomically(
        folder / "carry.md", lambda tmp: tmp.write_text(markdown, encoding="utf-8"), what="report"
    )
