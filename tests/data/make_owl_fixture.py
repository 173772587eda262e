"""Write ``owl_mini.owl`` (RDF/XML) and ``owl_mini_codes.txt``: a hand-made OWL ontology for the OWL tests.

    .venv/bin/python tests/data/make_owl_fixture.py

The content (a small disease / body structure / organism / morphology ontology) was written for this
fixture; ids are ``MINI_nnnnnnn`` under ``http://hrrbert.invalid/owl_mini/`` (a reserved, never-resolving
domain). It holds labels (one also in French), ``oboInOwl:hasExactSynonym`` / ``hasRelatedSynonym`` and
``skos:altLabel`` synonyms, ``property some Class`` restrictions (direct, inside a subClassOf
intersection, inside an equivalent-class intersection, and grouped SNOMED-style under ``role_group``),
one deprecated class, and ``oboInOwl:hasDbXref`` cross-references to ICD-10-CM (``ICD10CM:``) and WHO
ICD-10 (``ICD-10:``) codes. The output is byte-identical on every run.
"""

from __future__ import annotations

import types
from pathlib import Path

import owlready2 as owl

HERE = Path(__file__).resolve().parent
BASE = "http://hrrbert.invalid/owl_mini/"
VERSION_IRI = "http://hrrbert.invalid/owl_mini/releases/2024-01-31/owl_mini.owl"
OBO_IN_OWL = "http://www.geneontology.org/formats/oboInOwl#"
SKOS = "http://www.w3.org/2004/02/skos/core#"

# id: (label, parents, exact synonyms, related synonyms, xrefs)
# fmt: off
CLASSES: dict[int, tuple[str, tuple[int, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    1: ("Clinical finding", (), (), (), ()),
    2: ("Disease", (1,), ("Disorder",), (), ()),
    3: ("Body structure", (), ("Anatomical structure",), (), ()),
    4: ("Lung structure", (3,), ("Pulmonary structure",), (), ()),
    5: ("Bronchial structure", (4,), (), (), ()),
    6: ("Pancreatic islet structure", (3,), ("Islet of Langerhans",), (), ()),
    7: ("Heart structure", (3,), ("Cardiac structure",), (), ()),
    8: ("Organism", (), (), (), ()),
    9: ("Bacterium", (8,), ("Bacteria",), (), ()),
    10: ("Streptococcus pneumoniae", (9,), ("Pneumococcus",), (), ()),
    11: ("Lung disease", (2,), ("Pulmonary disease",), (), ("ICD10CM:J98.4",)),
    12: ("Asthma", (11,), ("Bronchial asthma",), ("Reactive airway disease",),
         ("ICD10CM:J45.909", "ICD-10:J45")),
    13: ("Pneumonia", (11,), ("Lung inflammation",), (), ("ICD10CM:J18.9",)),
    14: ("Pneumococcal pneumonia", (), ("Streptococcal pneumonia",), ("Lobar pneumonia",), ("ICD10CM:J13",)),
    15: ("Diabetes mellitus", (2,), (), (), ("ICD-10:E14",)),
    16: ("Type 2 diabetes mellitus", (15,), ("Adult-onset diabetes",), (), ("ICD10CM:E11.9",)),
    17: ("Heart disease", (2,), ("Cardiac disease",), (), ("ICD10CM:I51.9",)),
    18: ("Myocardial infarction", (17,), ("Heart attack",), (), ("ICD10CM:I21.9", "UMLS:C9999999")),
    19: ("Myocardium structure", (7,), ("Heart muscle",), (), ()),
    20: ("Morphologic abnormality", (), (), (), ()),
    21: ("Infarct", (20,), (), (), ()),
    22: ("Inflammation", (20,), (), (), ()),
    23: ("Chronic lung disease", (11,), (), (), ("ICD10CM:J98.4",)),
}
# fmt: on
DEPRECATED = {99: "obsolete Lung inflammation of unknown cause"}
CODES_FILE = ("MINI:0000012", f"{BASE}MINI_0000014", "MINI:0000016", "MINI:0000018", "MINI:0000023")


def iri(i: int) -> str:
    return f"MINI_{i:07d}"


def build(path: Path) -> None:
    world = owl.World()
    onto = world.get_ontology(BASE)
    obo = onto.get_namespace(OBO_IN_OWL)
    skos = onto.get_namespace(SKOS)
    with onto:
        owl_version_iri = world._abbreviate("http://www.w3.org/2002/07/owl#versionIRI")
        onto._add_obj_triple_spo(onto.storid, owl_version_iri, world._abbreviate(VERSION_IRI))
        with obo:
            exact = types.new_class("hasExactSynonym", (owl.AnnotationProperty,))
            related = types.new_class("hasRelatedSynonym", (owl.AnnotationProperty,))
            xref = types.new_class("hasDbXref", (owl.AnnotationProperty,))
        with skos:
            alt = types.new_class("altLabel", (owl.AnnotationProperty,))
        props = {}
        for name, label in (
            ("finding_site", "Finding site"),
            ("causative_agent", "Causative agent"),
            ("associated_morphology", "Associated morphology"),
            ("role_group", "Role group"),
        ):
            props[name] = types.new_class(name, (owl.ObjectProperty,))
            props[name].label = [label]
        c = {i: types.new_class(iri(i), (owl.Thing,)) for i in CLASSES}
        for i, (label, parents, syns, rel, xrefs) in CLASSES.items():
            k = c[i]
            k.label = [label]
            if parents:
                k.is_a = [c[p] for p in parents]
            for prop, values in ((exact, syns), (related, rel), (xref, xrefs)):
                for v in values:  # one at a time: a list assignment writes in set order
                    prop[k].append(v)
        c[12].label.append(owl.locstr("Asthme", "fr"))
        alt[c[16]] = ["T2DM"]
        site, agent, morph, group = (
            props[n] for n in ("finding_site", "causative_agent", "associated_morphology", "role_group")
        )
        c[11].is_a.append(site.some(c[4]))  # a direct restriction
        c[12].is_a.append(site.some(c[5]))
        c[13].is_a.append(site.some(c[4]) & morph.some(c[22]))  # inside a subClassOf intersection
        # equivalent-class intersection with a role group (SNOMED style)
        c[14].equivalent_to.append(c[13] & group.some(site.some(c[4]) & agent.some(c[10])))
        c[15].is_a.append(site.some(c[6]))
        c[17].is_a.append(site.some(c[7]))
        c[18].is_a.append(group.some(site.some(c[19]) & morph.some(c[21])))
        c[18].is_a.append(group.some(site.some(c[7])))  # a second group, of one restriction
        for i, label in DEPRECATED.items():
            d = types.new_class(iri(i), (owl.Thing,))
            d.label = [label]
            d.deprecated = [True]
    onto.save(str(path), format="rdfxml")
    world.close()


def main() -> None:
    build(HERE / "owl_mini.owl")
    lines = ["# classes that become tokens (IRIs or CURIEs, one per line)", *CODES_FILE]
    (HERE / "owl_mini_codes.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
