"""``hrrbert demo``: the main job on the embedded default data.

Builds the demo release (RF2 layout, from public ICD-10-CM / ICD-9-CM text and the real CMS GEMs; not
SNOMED content), compiles it into an HRR program, generates the synthetic MIMIC-IV / eICU-layout cohort,
tokenizes it into datasets, and queries the program with the README's SQL. Later stages (pretraining,
fine-tuning, evaluation) join here as they land.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

PROGRAM_NAME = "demo_icd10cm_default"

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
}


def run_demo(out: str | Path = "artifacts", *, size: str = "default", patients: int = 20000) -> int:
    """Run the demo into ``out`` (releases/, programs/, ehr/, datasets/) and print what it made."""
    import click

    from ontology_compiler import compile_ontology, run_sql
    from ontology_compiler.cli import summary
    from ontology_compiler.sql import format_result
    from pipelines.prepare import prepare_demo

    out = Path(out)
    datasets = prepare_demo(artifacts=out, size=size, n_patients=patients)
    release = out / "releases" / f"demo_icd10cm_{size}"
    program = compile_ontology(release, out=out / "programs")  # already compiled: a verified no-op
    click.echo(summary(program))
    for d in datasets:
        m = d.manifest
        click.echo(f"\ndataset   {d.path}")
        click.echo("  " + ", ".join(f"{k} {v}" for k, v in _dataset_counts(m).items()))
    for title, query in QUERIES.items():
        click.echo(f'\n-- {title}\n$ hrrbert sql {program.path.parent} "{query}"')
        click.echo(format_result(run_sql(program.path, query), max_rows=20))
    return 0


def _dataset_counts(manifest: dict) -> dict:
    c = manifest.get("counts", {})
    p, k = c.get("patients", {}), c.get("codes", {})
    out = {"patients kept": p.get("kept"), "splits": p.get("by_split"), "tokens": k.get("tokens")}
    if "unknown_code_share" in k:
        out["unknown code rows"] = f"{100 * k['unknown_code_share']:.2f} %"
    if "log_frequency_min" in k:
        out["log frequency"] = f"{k['log_frequency_min']:.1f} .. {k['log_frequency_max']:.1f}"
    return {key: v for key, v in out.items() if v is not None}
