"""A hand-built pair of programs, an "old" release and a "new" one, for the carry tests (hrr_kernel,
model, pipelines).

Old (8 tokens): the 5 special tokens (each an identity edge to its own special atom), ``A001`` (is-a
concept 100, description word "fever"), ``A002`` (is-a concept 200), ``A003`` (is-a concept 200,
description word "100"). Relations: is-a (116680003), description, identity.

New (13 tokens), atoms and relations in another order, with a word atom "100" beside the concept atom
"100" (same key, other kind), and a new attribute relation 363698007:

========  ===================================================  ==================
token      edges                                                provenance
========  ===================================================  ==================
specials   identity -> own special atom                         carried, unchanged
A001       is-a 100, description "fever"                        carried, unchanged
A003       is-a 200, description "100", is-a 300 (new atom)     carried, changed
B001       is-a 100, description "100"                          composed_trained
B002       is-a 300 (new), description "fever"                  composed_some_new
B003       is-a 300 (new), attribute "cough" (both new)         entirely_new
B004       (no edges)                                           entirely_new
B005       attribute (new relation) -> concept 100              composed_some_new
C001       description "cough" (new)                            entirely_new
========  ===================================================  ==================

``A002`` is dropped.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.synthetic_program import write_program

SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
IS_A, ATTRIBUTE = 116680003, 363698007

OLD_ATOMS = [("special", s) for s in SPECIALS] + [
    ("concept", "100"),
    ("concept", "200"),
    ("word", "fever"),
    ("word", "100"),
]
NEW_ATOMS = [
    ("word", "100"),
    ("concept", "300"),
    ("concept", "100"),
    ("word", "cough"),
    ("word", "fever"),
    ("concept", "200"),
] + [("special", s) for s in SPECIALS]
OLD_RELATIONS = [("is_a", IS_A), ("description", None), ("identity", None)]
NEW_RELATIONS = [("description", None), ("is_a", IS_A), ("identity", None), ("attribute", ATTRIBUTE)]
OLD_CODES = SPECIALS + ["A001", "A002", "A003"]
NEW_CODES = SPECIALS + ["A001", "A003", "B001", "B002", "B003", "B004", "B005", "C001"]
# token -> [(relation kind, atom)]; a relation is named by its kind, an atom by (kind, key)
OLD_EDGES = {
    "A001": [("is_a", ("concept", "100")), ("description", ("word", "fever"))],
    "A002": [("is_a", ("concept", "200"))],
    "A003": [("is_a", ("concept", "200")), ("description", ("word", "100"))],
}
NEW_EDGES = {
    "A001": [("is_a", ("concept", "100")), ("description", ("word", "fever"))],
    "A003": [("is_a", ("concept", "200")), ("description", ("word", "100")), ("is_a", ("concept", "300"))],
    "B001": [("is_a", ("concept", "100")), ("description", ("word", "100"))],
    "B002": [("is_a", ("concept", "300")), ("description", ("word", "fever"))],
    "B003": [("is_a", ("concept", "300")), ("attribute", ("word", "cough"))],
    "B004": [],
    "B005": [("attribute", ("concept", "100"))],
    "C001": [("description", ("word", "cough"))],
}
# what hrr_kernel.token_provenance says of each new token (PROVENANCE names)
NEW_PROVENANCE = ["carried"] * 7 + [
    "composed_trained",
    "composed_some_new",
    "entirely_new",
    "entirely_new",
    "composed_some_new",
    "entirely_new",
]
UNCHANGED = SPECIALS + ["A001"]  # tokens of both programs with the same edges


def _write(root: Path, codes, atoms, relations, edges) -> Path:
    rel_index = {kind: j for j, (kind, _) in enumerate(relations)}
    atom_index = {a: i for i, a in enumerate(atoms)}
    c, r, a = [], [], []
    for i, code in enumerate(codes):
        pairs = [("identity", ("special", code))] if code in SPECIALS else edges[code]
        for kind, atom in pairs:
            c.append(i)
            r.append(rel_index[kind])
            a.append(atom_index[atom])
    return write_program(
        root,
        n_concepts=len(codes),
        n_atoms=len(atoms),
        n_relations=len(relations),
        edges=(c, r, a),
        relation_kinds=[k for k, _ in relations],
        atom_keys=[k for _, k in atoms],
        atom_kinds=[k for k, _ in atoms],
        relation_sctids=[s for _, s in relations],
        concept_codes=codes,
    )


def write_old_program(root: Path) -> Path:
    return _write(root, OLD_CODES, OLD_ATOMS, OLD_RELATIONS, OLD_EDGES)


def write_new_program(root: Path) -> Path:
    return _write(root, NEW_CODES, NEW_ATOMS, NEW_RELATIONS, NEW_EDGES)
