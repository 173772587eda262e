"""The demo's data: the demo release (built once), its program, the synthetic cohort (generated once, in
the MIMIC-IV and eICU layouts, and as an OMOP CDM beside them with the program as its Athena vocabulary)
and the tokenized MIMIC-IV- and eICU-layout datasets: :func:`prepare_demo` (``hrrbert prepare --demo``);
the cohort as a MEDS dataset: :func:`export_demo_meds` (``hrrbert export-meds --demo``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.data.folders import folder_written
from pipelines.data.prepare import PrepareResult, prepare_source
from pipelines.data.splits import SplitOptions

from .cohort import GENERATOR_VERSION, generate_cohort
from .defaults import DEMO_PATIENTS, DEMO_RELEASE_SEED, demo_split_sizes

if TYPE_CHECKING:
    from pipelines.data.export_meds import ExportResult

__all__ = ["ensure_cohort", "ensure_demo_release", "ensure_omop", "export_demo_meds", "prepare_demo"]

RESERVED_CODES = "ground_truth/reserved_codes.parquet"  # the cohort's codes to hold out (ROOD)
ATHENA, OMOP = "athena", "omop"  # the cohort's Athena vocabulary download and OMOP CDM folders


def prepare_demo(
    *,
    artifacts: str | Path = "artifacts",
    out: str | Path | None = None,
    size: str = "default",
    n_patients: int = DEMO_PATIENTS,
    seed: int = 0,
    splits: SplitOptions | dict | None = None,
    hold_out: str | Path | None = None,
    **kwargs,
) -> list[PrepareResult]:
    """Build the demo release, compile it, generate the cohort (cached) and prepare MIMIC and eICU datasets.

    ``splits``: as given; or a dict of :class:`SplitOptions` fields (``hrrbert prepare --demo``'s, seed
    aside) whose sizes left None take the demo's; None: the demo's sizes
    (:data:`~pipelines.demo.defaults.DEMO_SPLITS` scaled to ``n_patients``, seed ``seed``). ``kwargs``:
    the :class:`~pipelines.data.config.PrepareConfig` fields ``max_len``, ``max_visits``, ``unknown``.
    ``hold_out``: default the cohort's reserved codes (``ground_truth/reserved_codes.parquet``, the codes
    only its flagged patients have), so that the ROOD split is those patients; a cohort without that file
    falls back to the chosen hold-out (:func:`pipelines.data.splits.choose_rood`).
    """
    from ontology_compiler.api import compile_ontology

    artifacts = Path(artifacts)
    # one release (and program) for every seed: the seed draws the cohort and its splits
    release = ensure_demo_release(
        artifacts / "releases" / f"demo_icd10cm_{size}", size=size, seed=DEMO_RELEASE_SEED
    )
    program = compile_ontology(release, out=artifacts / "programs").path
    ehr = ensure_cohort(artifacts / "ehr", program, n_patients=n_patients, seed=seed)
    ensure_omop(ehr, program, seed=seed)
    out = Path(out) if out is not None else artifacts / "datasets"
    if not isinstance(splits, SplitOptions):  # the demo's sizes where none is given
        given = {k: v for k, v in (splits or {}).items() if v is not None}
        splits = SplitOptions(seed=seed, **{**demo_split_sizes(n_patients), **given})
    if hold_out is None and (ehr / RESERVED_CODES).is_file():
        hold_out = ehr / RESERVED_CODES
    common = {"out": out, "label": "demo", "splits": splits, "hold_out": hold_out, **kwargs}
    return [
        prepare_source("mimic-iv", ehr, program, name="demo-mimic", **common),
        prepare_source("eicu", ehr / "eicu", program, name="demo-eicu", **common),
    ]


def export_demo_meds(
    out: str | Path,
    *,
    artifacts: str | Path = "artifacts",
    size: str = "default",
    n_patients: int = DEMO_PATIENTS,
    seed: int = 0,
    **kwargs,
) -> ExportResult:
    """``hrrbert export-meds --demo``: the demo's synthetic MIMIC-IV-layout cohort (built if missing, with
    its release and program, under ``artifacts``) written as a MEDS dataset in ``out``, its
    ``subject_splits`` those of the demo's MIMIC-IV dataset (``prepare --demo``'s, prepared if missing);
    ``kwargs``: those of :func:`~pipelines.data.export_meds.export_meds` (``name``, ``labels``, ``force``)."""
    from pipelines.data.export_meds import export_meds

    mimic = prepare_demo(artifacts=artifacts, size=size, n_patients=n_patients, seed=seed)[0]
    cohort = Path(mimic.manifest["source"]["path"])
    return export_meds("mimic-iv", cohort, out, splits_from=mimic.path, seed=seed, **kwargs)


def ensure_cohort(parent: Path, program: Path, *, n_patients: int, seed: int) -> Path:
    """The synthetic cohort for ``program`` (generated once into ``parent``; atomic rename)."""
    final = parent / f"demo-{program.name}-n{n_patients}-s{seed}"
    # a finished cohort has its ground truth; one cached before the ICU/procedure/prescription tables existed,
    # or by another version of the generator, is generated again
    readme = final / "ground_truth" / "README.json"
    if readme.is_file() and (final / "icu" / "icustays.csv.gz").is_file():
        if json.loads(readme.read_text(encoding="utf-8")).get("version") == GENERATOR_VERSION:
            return final
    # a cache: a stale or unfinished cohort there is replaced (moved aside, removed once the new one is in)
    with folder_written(final, "synthetic cohort", force=True) as tmp:
        generate_cohort(tmp, n_patients=n_patients, seed=seed, codes=program)
    return final


def ensure_omop(ehr: Path, program: Path, *, seed: int) -> Path:
    """The cohort ``ehr`` as an OMOP CDM v5.4 in ``ehr/omop/`` (:func:`~.cohort_write_omop.write_omop`),
    its concepts those of ``ehr/athena/``, the Athena vocabulary download of ``program``
    (:func:`~ontology_compiler.api.export_athena`); each written once (atomic rename), the cohort's own
    files untouched. Returns ``ehr/omop``."""
    from ontology_compiler.api import export_athena

    from .cohort_write_omop import write_omop

    athena, omop = ehr / ATHENA, ehr / OMOP
    if not (athena / "CONCEPT.csv").is_file():
        export_athena(program, athena, force=True)  # a folder there without CONCEPT.csv is unfinished
    if not (omop / "concept.csv").is_file():
        with folder_written(omop, "OMOP CDM of the synthetic cohort", force=True) as tmp:
            write_omop(ehr, athena, tmp, seed=seed)
    return omop


def ensure_demo_release(folder: Path, *, size: str, seed: int) -> Path:
    """The demo release in ``folder``, built unless a finished build of the same size and seed is there."""
    from .release import build_demo_release

    info = folder / "release_info.json"
    if info.is_file():
        meta = json.loads(info.read_text(encoding="utf-8"))
        if meta.get("demo") is True and meta.get("size") == size and meta.get("seed") == seed:
            return folder
    return build_demo_release(folder, size=size, seed=seed)
