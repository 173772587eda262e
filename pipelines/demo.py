"""``hrrbert demo``: compile the bundled fixture release and query it.

Until the full demo (generated release, cohort, pretraining) lands, the demo compiles the small
hand-made RF2 fixture in ``tests/data/`` and runs the README's three SQL queries on the program.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "snomed_mini_20220531"

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
        "SELECT c.code_dotted AS code, c.title, count(*) AS shared FROM edges e "
        "JOIN mine USING (relation_id, atom_id) JOIN concepts c USING (concept_id) "
        "WHERE c.code <> 'E119' GROUP BY ALL ORDER BY shared DESC, code LIMIT 10"
    ),
    "multiplicity histogram per relation": (
        "SELECT r.label AS relation, m AS multiplicity, count(*) AS concepts "
        "FROM (SELECT concept_id, relation_id, count(*) AS m FROM edges GROUP BY ALL) "
        "JOIN relations r USING (relation_id) GROUP BY ALL ORDER BY relation, multiplicity"
    ),
}


def run_demo(out: str | Path = "artifacts") -> int:
    """Compile the fixture into ``out/programs`` and print the summary and the three queries."""
    import click

    from ontology_compiler import compile_ontology, run_sql
    from ontology_compiler.cli import summary
    from ontology_compiler.sql import format_result

    if not FIXTURE.is_dir():
        raise click.ClickException(f"{FIXTURE}: the bundled fixture release is missing (run from a checkout)")
    result = compile_ontology(FIXTURE, out=Path(out) / "programs")
    click.echo(summary(result))
    for title, query in QUERIES.items():
        click.echo(f'\n-- {title}\n$ hrrbert sql {result.path} "{query}"')
        click.echo(format_result(run_sql(result.path, query), max_rows=20))
    return 0
