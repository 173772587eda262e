"""``hrrbert demo``: the main job on the embedded default data.

Builds the demo release (RF2 layout, from public ICD-10-CM / ICD-9-CM text and the real CMS GEMs; not
SNOMED content), compiles it into an HRR program, generates the synthetic MIMIC-IV / eICU-layout cohort,
tokenizes it into datasets, and queries the program with the README's SQL. Then it runs the smallest
instance of the paper's experiment (:mod:`pipelines.eval.experiment`): small (``mini``) ``unstructured`` and
``base`` models pretrained on ``demo-mimic`` side by side, fine-tuned on mortality and chapters, evaluated
(frequency bins, neighbours, t-SNE, ROOD, eICU-layout transfer, cost) and reported in
``<out>/runs/demo-<size>/report.md``; about 10 minutes on a 2-core CPU (9 min 57 s measured from a fresh
clone, install included). ``train_steps=0`` stops after the data steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from .defaults import (
    DEMO_EVALUATE,
    DEMO_EXPERIMENT,
    DEMO_FINETUNE,
    DEMO_PATIENTS,
    DEMO_PRETRAIN,
    demo_configurations,
)

log = logging.getLogger(__name__)

# The demo experiment: the smallest instance of the protocol that shows the effects on a 2-core CPU.


# The README's queries, run by the demo and by a test.
QUERIES: dict[str, str] = {
    "atoms composing E11.9": (
        "SELECT r.label AS relation, a.kind, a.label AS atom, e.slot, e.role_group "
        "FROM edges e JOIN concepts c USING (concept_id) JOIN relations r USING (relation_id) "
        "JOIN atoms a USING (atom_id) WHERE c.code = 'E119' ORDER BY e.relation_id, e.slot"
    ),
    "codes sharing most atoms with E11.9": (
        "WITH mine AS (SELECT relation_id, atom_id FROM edges JOIN concepts USING (concept_id) "
        "WHERE code = 'E119') "
        "SELECT c.vocabulary, c.code_dotted AS code, c.title, count(*) AS shared FROM edges e "
        "JOIN mine USING (relation_id, atom_id) JOIN concepts c USING (concept_id) "
        "WHERE c.code <> 'E119' GROUP BY ALL ORDER BY shared DESC, code LIMIT 10"
    ),
    "multiplicity histogram per relation": (
        "SELECT r.label AS relation, m AS multiplicity, count(*) AS concepts "
        "FROM (SELECT concept_id, relation_id, count(*) AS m FROM edges GROUP BY ALL) "
        "JOIN relations r USING (relation_id) GROUP BY ALL ORDER BY relation, multiplicity"
    ),
    # the share of ICD codes whose OMOP Maps to target is an ancestor of the RF2 (ICD-10) / NLM (ICD-9) map's:
    # what the Athena path coarsens (README "OMOP / OHDSI")
    "ICD codes OMOP maps to a coarser SNOMED concept than the RF2 and NLM maps": (
        "WITH RECURSIVE up(d, a) AS (SELECT source_id, destination_id FROM snomed_relationships WHERE "
        "type_id = 116680003 UNION SELECT u.d, r.destination_id FROM up u JOIN snomed_relationships r ON "
        "r.source_id = u.a AND r.type_id = 116680003), rf2 AS (SELECT vocabulary, code, list(DISTINCT "
        "sctid) AS t FROM icd_map WHERE chosen AND source <> 'omop' AND sctid IS NOT NULL GROUP BY ALL), "
        "omop AS (SELECT vocabulary, code, list(DISTINCT sctid) AS t FROM icd_map WHERE source = 'omop' "
        "AND sctid IS NOT NULL GROUP BY ALL), cmp AS (SELECT vocabulary, CASE WHEN list_sort(o.t) = "
        "list_sort(r.t) THEN 'the same concepts' WHEN EXISTS (SELECT 1 FROM up WHERE list_contains(r.t, "
        "up.d) AND list_contains(o.t, up.a)) THEN 'coarser: an ancestor of the RF2 map''s' WHEN EXISTS "
        "(SELECT 1 FROM up WHERE list_contains(o.t, up.d) AND list_contains(r.t, up.a)) THEN 'finer' "
        "ELSE 'unrelated' END AS maps_to FROM rf2 r JOIN omop o USING (vocabulary, code)) SELECT "
        "vocabulary, maps_to, count(*) AS codes, round(100.0 * count(*) / sum(count(*)) OVER (PARTITION "
        "BY vocabulary), 1) AS pct FROM cmp GROUP BY 1, 2 ORDER BY vocabulary, codes DESC"
    ),
}


def run_demo(
    out: str | Path = "artifacts",
    *,
    size: str = "default",
    patients: int = DEMO_PATIENTS,
    train_steps: int | None = None,
    trials: int | None = None,
    seed: int = 0,
    full: bool = False,
    configurations: tuple[str, ...] = (),
    device: str = "cpu",
    threads: int | None = 1,
    show: Callable[[str], None] = log.info,
) -> int:
    """Run the demo into ``out`` (releases/, programs/, ehr/, datasets/, runs/); ``show`` receives what it
    made, step by step (the command prints it; the default logs it).

    ``train_steps`` pretraining steps per model (None: the demo's; 0: stop after the data steps);
    ``trials`` fine-tuning trials per task (None: the demo's); ``seed`` the cohort and its splits (the
    release and its program are the same for every seed); ``full`` trains every registered configuration,
    ``configurations`` the ones given instead of the demo's; ``threads`` torch CPU threads (None: torch's
    default; the small demo models gain little from more, and one thread never stalls on a busy CPU).
    """
    from ontology_compiler.api import compile_ontology, format_result, run_sql, summary
    from pipelines.demo.prepare import prepare_demo

    out = Path(out)
    datasets = prepare_demo(artifacts=out, size=size, n_patients=patients, seed=seed)
    release = out / "releases" / f"demo_icd10cm_{size}"
    program = compile_ontology(release, out=out / "programs")  # already compiled: a verified no-op
    show(summary(program))
    for d in datasets:
        show(
            f"\ndataset   {d.path}\n  "
            + ", ".join(f"{k} {v}" for k, v in _dataset_counts(d.manifest).items())
        )
    for title, query in QUERIES.items():
        show(f'\n-- {title}\n$ hrrbert sql {program.path.parent} "{query}"')
        show(format_result(run_sql(program.path, query), max_rows=20))
    if train_steps == 0:
        return 0
    if threads:
        import torch

        torch.set_num_threads(threads)
    mimic = next(d for d in datasets if d.path.parent.name == "demo-mimic")
    eicu = next((d for d in datasets if d.path.parent.name == "demo-eicu"), None)
    ground_truth = Path(mimic.manifest["source"]["path"]) / "ground_truth"
    confs = demo_configurations(configurations, full)
    extra = {"configurations": confs} if confs else {}
    result = run_demo_experiment(
        out,
        mimic.path,
        program.path,
        eicu.path if eicu else None,
        name=demo_name(size, patients, train_steps, trials, seed, full, confs),
        train_steps=train_steps,
        trials=trials,
        device=device,
        ground_truth=str(ground_truth) if ground_truth.is_dir() else None,
        **extra,
    )
    show(f"\nexperiment {result.path} ({result.seconds:.0f} s)\nreport    {result.report}\n")
    show(result.headline)
    return 0


def demo_name(
    size: str,
    patients: int,
    train_steps: int | None,
    trials: int | None,
    seed: int = 0,
    full: bool = False,
    configurations: tuple[str, ...] = (),
) -> str:
    """``demo-<size>``, plus each option that differs from the demo's defaults (one folder per setting)."""
    parts = [f"demo-{size}"]
    if seed:
        parts.append(f"seed{seed}")
    if full:
        parts.append("full")
    elif configurations and configurations != DEMO_EXPERIMENT["configurations"]:
        parts.append("+".join(configurations))
    if patients != DEMO_PATIENTS:
        parts.append(f"n{patients}")
    if train_steps is not None:
        parts.append(f"s{train_steps}")
    if trials:
        parts.append(f"t{trials}")
    return "-".join(parts)


def run_demo_experiment(
    out: str | Path,
    dataset: Path,
    program: Path,
    transfer: Path | None,
    *,
    name: str = "demo",
    train_steps: int | None = None,
    trials: int | None = None,
    device: str = "cpu",
    **overrides,
):
    """The demo's experiment into ``<out>/runs/<name>`` (a finished one is only re-reported)."""
    from pipelines.eval.experiment import ExperimentConfig, run_experiment

    pre = dict(DEMO_PRETRAIN)
    if train_steps is not None:
        pre["max_steps"] = train_steps
        pre["save_every"] = min(pre["save_every"], train_steps)
    pre_o, fin_o, eval_o = (overrides.pop(k, {}) for k in ("pretrain", "finetune", "evaluate"))
    exp = {**DEMO_EXPERIMENT, **({"trials": trials} if trials else {}), **overrides}
    for key in ("pretrain_by_configuration", "finetune_by_configuration"):  # those this run trains
        exp[key] = {c: o for c, o in exp.get(key, {}).items() if c in exp["configurations"]}
    cfg = ExperimentConfig(
        dataset=str(dataset),
        program=str(program),
        transfer_dataset=str(transfer) if transfer else None,
        name=name,
        out=str(Path(out) / "runs"),
        device=device,
        pretrain={**pre, **pre_o},
        finetune={**DEMO_FINETUNE, **fin_o},
        evaluate={**DEMO_EVALUATE, **eval_o},
        **exp,
    )
    return run_experiment(cfg)


def _dataset_counts(manifest: dict) -> dict:
    c = manifest.get("counts", {})
    p, k = c.get("patients", {}), c.get("codes", {})
    out = {"patients kept": p.get("kept"), "splits": p.get("by_split"), "tokens": k.get("tokens")}
    if "unknown_code_share" in k:
        out["unknown code rows"] = f"{100 * k['unknown_code_share']:.2f} %"
    if "log_frequency_min" in k:
        out["log frequency"] = f"{k['log_frequency_min']:.1f} .. {k['log_frequency_max']:.1f}"
    return {key: v for key, v in out.items() if v is not None}
