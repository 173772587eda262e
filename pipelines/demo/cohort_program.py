"""What the synthetic cohort reads from a compiled HRR program (``docs/program-format.md``).

* the code universe: the (vocabulary, dotless code) pairs of its ICD concepts;
* twins: concepts with exactly the same set of (relation, atom) edges (their HRR vectors are identical, so a
  twin of a seen code is not an unseen code), and the SNOMED concepts its ICD-9-CM codes map to;
* atom severity: the log-odds each code adds to 6-month mortality, a sum over the atoms of its is-a and
  attribute edges (finding site, associated morphology, ...). The same atom in two ICD categories adds the
  same amount, so mortality follows the ontology's attributes across categories, not only the category.

Only the ontology's part of the program counts (:func:`ontology_edges`): the ICD classification nodes a
program binds its tokens to (``icd`` atoms, ``icd_hierarchy`` relations, ``compile-ontology
--no-icd-hierarchy`` leaves them out) enter neither twins nor severity, so a cohort is the same with and
without them.

The label chapter of a code (:func:`label_chapters`) is computed with the readers' own SQL, so the ground
truth counts chapters exactly as the chapters task does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.data.readers.common import chapter_sql, register_chapters

# Log-odds added by an atom, by (relation label, atom label); other is-a and attribute atoms draw a small
# random weight (ATOM_NOISE) from the seed.
ATOM_SEVERITY = {
    "Associated morphology": {
        "Malignant neoplasm": 1.4,
        "Leukemia": 1.5,
        "Lymphoma": 1.2,
        "Neoplasm": 0.6,
        "Hemorrhage": 0.9,
        "Infarct": 1.1,
        "Embolus": 0.9,
        "Thrombus": 0.6,
        "Perforation": 0.9,
        "Obstruction": 0.5,
        "Abscess": 0.5,
        "Necrosis": 0.8,
        "Ulcer": 0.3,
        "Stenosis": 0.3,
        "Fracture": 0.2,
        "Benign neoplasm": -0.3,
        "Sprain": -0.7,
        "Contusion": -0.5,
        "Open wound": -0.4,
        "Laceration": -0.4,
        "Deformity": -0.4,
        "Cyst": -0.4,
        "Dislocation": -0.3,
    },
    "Finding site": {
        "Heart": 0.5,
        "Lung": 0.5,
        "Brain": 0.6,
        "Kidney": 0.45,
        "Liver": 0.6,
        "Blood": 0.4,
        "Pancreas": 0.6,
        "Respiratory system": 0.45,
        "Artery": 0.3,
        "Spinal cord": 0.3,
        "Bone marrow": 0.5,
        "Joint": -0.4,
        "Tooth": -0.6,
        "Skin": -0.3,
        "Finger": -0.5,
        "Eye": -0.4,
        "Ear": -0.4,
        "Wrist": -0.4,
        "Ankle": -0.4,
        "Hand": -0.4,
        "Foot": -0.3,
        "Tendon": -0.4,
        "Back": -0.2,
        "Shoulder": -0.3,
    },
}
ATOM_NOISE = 0.15
# what a program adds from the ICD classifications themselves, not from the ontology (docs/program-format.md)
ICD_ATOM_KINDS = ("icd",)
ICD_RELATION_KINDS = ("icd_hierarchy",)


@dataclass
class ProgramFacts:
    """Per ICD concept of a program: universe, twin groups and atom severity."""

    universe: set[tuple[str, str]]
    twin_group: dict[tuple[str, str], int] = field(default_factory=dict)  # equal edge sets share a group
    group_size: dict[int, int] = field(default_factory=dict)
    snomed: dict[tuple[str, str], frozenset[int]] = field(default_factory=dict)
    icd9_snomed: frozenset[int] = frozenset()
    severity: dict[tuple[str, str], float] = field(default_factory=dict)


def read_program(program: str | Path, seed: int) -> ProgramFacts:
    """The facts the cohort needs from the program folder ``program``."""
    folder = Path(program)
    files = {n: folder / f"{n}.parquet" for n in ("concepts", "edges", "relations", "atoms")}
    for name, path in files.items():
        if not path.is_file():
            raise FileNotFoundError(f"{path}: expected the program's {name}.parquet (docs/program-format.md)")
    concepts = pq.read_table(files["concepts"], columns=["concept_id", "vocabulary", "code", "snomed_ids"])
    edges, relations, atoms = ontology_edges(
        pq.read_table(files["edges"], columns=["concept_id", "relation_id", "atom_id"]),
        pq.read_table(files["relations"], columns=["relation_id", "kind", "label"]),
        pq.read_table(files["atoms"], columns=["atom_id", "kind", "label"]),
    )
    cid = concepts["concept_id"].to_numpy()
    vocab, code = concepts["vocabulary"].to_pylist(), concepts["code"].to_pylist()
    keys = list(zip(vocab, code, strict=True))
    icd = np.array([v in ("ICD9CM", "ICD10CM") for v in vocab])
    facts = ProgramFacts(universe={k for k, ok in zip(keys, icd, strict=True) if ok})
    row_of = np.full(int(cid.max()) + 1 if len(cid) else 0, -1, dtype=np.int64)
    row_of[cid] = np.arange(len(cid))
    # twins: one group per distinct sorted (relation, atom) edge set
    con = duckdb.connect()
    con.register("e", edges)
    sig = con.sql(
        "SELECT concept_id, dense_rank() OVER (ORDER BY sig) AS g FROM (SELECT concept_id, "
        "list(relation_id::BIGINT * 4294967296 + atom_id ORDER BY relation_id, atom_id) AS sig FROM e "
        "GROUP BY 1)"
    ).fetchnumpy()
    group = np.full(len(cid), -1, dtype=np.int64)
    group[row_of[sig["concept_id"]]] = sig["g"]
    for k, ok, g in zip(keys, icd, group.tolist(), strict=True):
        if ok and g >= 0:
            facts.twin_group[k] = g
            facts.group_size[g] = facts.group_size.get(g, 0) + 1
    snomed = concepts["snomed_ids"].to_pylist()
    facts.snomed = {k: frozenset(s or ()) for k, s, ok in zip(keys, snomed, icd, strict=True) if ok}
    facts.icd9_snomed = frozenset(x for k, s in facts.snomed.items() if k[0] == "ICD9CM" for x in s)
    # severity: atom weights summed over the is-a and attribute edges of each concept
    w = _atom_weights(relations, atoms, seed)  # (R, A)
    rel = edges["relation_id"].to_numpy()
    atom = edges["atom_id"].to_numpy()
    sev = np.zeros(len(cid))
    np.add.at(sev, row_of[edges["concept_id"].to_numpy()], w[rel, atom])
    facts.severity = {k: float(s) for k, s, ok in zip(keys, sev.tolist(), icd, strict=True) if ok}
    return facts


def ontology_edges(
    edges: pa.Table, relations: pa.Table, atoms: pa.Table
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """``(edges, relations, atoms)`` without the ICD classification's atoms and relations
    (:data:`ICD_ATOM_KINDS`, :data:`ICD_RELATION_KINDS`) and their edges, the rest renumbered densely in id
    order: the ids a program compiled without the ICD hierarchy gives them."""
    rel_new = _renumber(relations["relation_id"], pc.is_in(relations["kind"], pa.array(ICD_RELATION_KINDS)))
    atom_new = _renumber(atoms["atom_id"], pc.is_in(atoms["kind"], pa.array(ICD_ATOM_KINDS)))
    r = rel_new[edges["relation_id"].to_numpy()]
    a = atom_new[edges["atom_id"].to_numpy()]
    keep = (r >= 0) & (a >= 0)
    edges = pa.table(
        {
            "concept_id": edges["concept_id"].filter(pa.array(keep)),
            "relation_id": pa.array(r[keep].astype(np.int32)),
            "atom_id": pa.array(a[keep].astype(np.int32)),
        }
    )

    def kept(t: pa.Table, id_column: str, new: np.ndarray) -> pa.Table:
        ids = new[t[id_column].to_numpy()]
        t = t.filter(pa.array(ids >= 0))
        return t.set_column(
            t.column_names.index(id_column), id_column, pa.array(ids[ids >= 0].astype(np.int32))
        )

    return edges, kept(relations, "relation_id", rel_new), kept(atoms, "atom_id", atom_new)


def _renumber(ids: pa.ChunkedArray, drop: pa.ChunkedArray) -> np.ndarray:
    """Old id -> new id (-1 for a dropped one): the kept ids numbered 0, 1, ... in id order."""
    ids_np = ids.to_numpy()
    out = np.full(int(ids_np.max()) + 1 if len(ids_np) else 0, -1, dtype=np.int64)
    kept = np.sort(ids_np[~drop.to_numpy(zero_copy_only=False)])
    out[kept] = np.arange(len(kept))
    return out


def _atom_weights(relations: pa.Table, atoms: pa.Table, seed: int) -> np.ndarray:
    """(relations, atoms) log-odds: the named ones of :data:`ATOM_SEVERITY`, small random ones for other
    is-a and attribute atoms, zero for identity and description words."""
    n_rel = int(max(relations["relation_id"].to_pylist(), default=-1)) + 1
    n_atom = int(max(atoms["atom_id"].to_pylist(), default=-1)) + 1
    rng = np.random.default_rng([seed, 4242])
    w = rng.normal(0.0, ATOM_NOISE, (n_rel, n_atom))
    label_of = dict(zip(atoms["atom_id"].to_pylist(), atoms["label"].to_pylist(), strict=True))
    for r, kind, label in zip(
        *(relations[c].to_pylist() for c in ("relation_id", "kind", "label")), strict=True
    ):
        if kind not in ("is_a", "attribute"):
            w[r] = 0.0
            continue
        named = ATOM_SEVERITY.get(label, {})
        for a, name in label_of.items():
            if name in named:
                w[r, a] = named[name]
    return w


def label_chapters(code: np.ndarray, version: np.ndarray) -> np.ndarray:
    """ICD-10-CM chapter (0 = none) of each (dotless code, ICD version 9 or 10), as the readers count the
    chapters label (``pipelines.data.readers.common.chapter_sql``)."""
    con = duckdb.connect()
    register_chapters(con)
    vocab = np.where(np.asarray(version) == 9, "ICD9CM", "ICD10CM")
    con.register("k", pa.table({"i": np.arange(len(code)), "vocabulary": vocab, "code": np.asarray(code)}))
    ch = chapter_sql("k.vocabulary", "k.code", "g.chapter")
    out = con.sql(
        f"SELECT i, coalesce({ch}, 0)::INT AS ch FROM k LEFT JOIN icd9_chapter g "
        "ON k.vocabulary = 'ICD9CM' AND g.code = k.code ORDER BY i"
    ).fetchnumpy()
    return out["ch"].astype(np.int8)
