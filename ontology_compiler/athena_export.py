"""``export_athena``: write a compiled program's release (its ``graph/`` tables) and its ICD tokens as an
Athena vocabulary download (``docs/input-formats.md``, "Athena vocabulary download").

What is written, TAB-separated with the OMOP CDM v5.4 headers, dates ``YYYYMMDD``, unquoted:

- CONCEPT.csv: every SNOMED concept of the release (``concept_code`` the SCTID, ``concept_name`` the
  preferred term, standard ``S``) and every ICD token (``concept_code`` dotted, non-standard);
- CONCEPT_RELATIONSHIP.csv: each relationship whose attribute :data:`athena_schema.RELATIONSHIPS`
  lists, in both directions (attributes it does not list are counted in the result: OHDSI has no id for
  them), each token's ``Maps to`` its program concepts (and ``Mapped from`` back), and the standard
  concepts' ``Maps to`` themselves, as Athena has them;
- CONCEPT_SYNONYM.csv: the descriptions the compile takes words from (the FSN with its tag, the
  accepted synonyms), less the one that became ``concept_name``; CONCEPT_ANCESTOR.csv: the is-a
  closure with min and max levels; VOCABULARY, DOMAIN, CONCEPT_CLASS and RELATIONSHIP for what is used.

Compiling the export (``compile-ontology DIR``, found as Athena) gives the program's tokens, atoms,
relations and edges again; Athena keeps no role groups, so every attribute edge comes back in group 0.
Concept ids are synthetic (:data:`athena_schema.ID_BASE` plus the rank of the code). The folder is
written to a temporary sibling and renamed; an existing one is not replaced without ``force``.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import athena_schema as A
from . import rf2_schema as S
from .artifact import clean_leftovers, leftover_name
from .errors import OutputExistsError
from .program import verify_program
from .words import strip_semantic_tag

log = logging.getLogger(__name__)

ICD_START = {"ICD10CM": "20151001", "ICD9CM": "19700101"}


@dataclass
class AthenaExport:
    path: Path
    counts: dict = field(default_factory=dict)


def export_athena(program: str | Path, out: str | Path, *, force: bool = False) -> AthenaExport:
    """Write the program folder ``program`` as an Athena download in the folder ``out``."""
    program, out = Path(program), Path(out)
    manifest = verify_program(program)
    if not (program / "graph" / "snomed_concepts.parquet").is_file():
        raise ValueError(f"{program}: not compiled from a SNOMED release (no graph/snomed_concepts.parquet)")
    if out.exists() and not force:
        raise OutputExistsError(f"{out} exists; it is not overwritten without --force")
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(out.parent)
    tmp = out.parent / leftover_name("tmp", out.name)
    tmp.mkdir()
    try:
        counts = _write(program, manifest, tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("wrote Athena download %s (%d concepts)", out, counts["concepts"])
    return AthenaExport(out, counts)


def _write(program: Path, manifest: dict, out: Path) -> dict:
    g = program / "graph"
    sc = pq.read_table(g / "snomed_concepts.parquet").sort_by("id")
    rels = pq.read_table(g / "snomed_relationships.parquet")
    desc = pq.read_table(g / "snomed_descriptions.parquet")
    tokens = pq.read_table(program / "concepts.parquet")
    tokens = tokens.filter(pc.is_in(tokens["vocabulary"], value_set=pa.array(list(A.ICD_VOCABULARIES))))
    languages = manifest.get("options", {}).get("languages") or [S.US_ENGLISH]
    sctid = sc["id"].to_numpy()
    snomed_cid = A.ID_BASE[A.SNOMED] + np.arange(len(sctid), dtype=np.int64)
    cid_of = dict(zip(sctid.tolist(), snomed_cid.tolist(), strict=True))
    name = pc.coalesce(sc["preferred_term"], strip_semantic_tag(sc["fsn"])).to_pylist()
    concept_rows, rel_rows = _snomed_rows(sc, snomed_cid, name)
    n_tokens = _token_rows(tokens, cid_of, concept_rows, rel_rows)
    # attribute relationships, both directions
    inferred = rels.filter(pc.not_equal(rels["characteristic_type_id"], pa.scalar(S.STATED, pa.int64())))
    src, dst, typ = (inferred[c].to_numpy() for c in ("source_id", "destination_id", "type_id"))
    key = np.unique(np.stack([src, typ, dst], axis=1), axis=0) if len(src) else np.zeros((0, 3), np.int64)
    used_rel, not_expressible = _attribute_rows(key, cid_of, rel_rows)
    synonyms = _synonyms(desc, languages, cid_of, dict(zip(sctid.tolist(), name, strict=True)))
    ancestors = _ancestors(key, cid_of)
    _tsv(out / "CONCEPT.csv", "CONCEPT.csv", concept_rows)
    _tsv(out / "CONCEPT_RELATIONSHIP.csv", "CONCEPT_RELATIONSHIP.csv", rel_rows)
    _tsv(out / "CONCEPT_SYNONYM.csv", "CONCEPT_SYNONYM.csv", synonyms)
    _tsv(out / "CONCEPT_ANCESTOR.csv", "CONCEPT_ANCESTOR.csv", ancestors)
    _write_reference_tables(out, manifest.get("release", {}).get("date"), concept_rows, used_rel)
    return {
        "concepts": len(concept_rows),
        "snomed_concepts": len(sctid),
        "icd_concepts": n_tokens,
        "relationships": len(rel_rows),
        "synonyms": len(synonyms),
        "ancestors": len(ancestors),
        "attribute_rows_not_expressible": int(sum(not_expressible.values())),
        "attribute_types_not_expressible": sorted(not_expressible),
    }


def _snomed_rows(sc: pa.Table, snomed_cid: np.ndarray, name: list) -> tuple[list[list[str]], list[list[str]]]:
    """The CONCEPT rows of the program's SNOMED concepts (sorted by id, numbered ``snomed_cid``) and
    their ``Maps to`` self-rows of CONCEPT_RELATIONSHIP."""
    tags = pc.fill_null(sc["semantic_tag"], "").to_pylist()
    classes = [A.SNOMED_CLASSES.get(t, A.DEFAULT_CLASS) for t in tags]
    start = [str(x) for x in sc["effective_time"].to_pylist()]
    sctid = sc["id"].to_pylist()
    end = str(A.OPEN_END)
    concept_rows = [
        [str(c), n, d, A.SNOMED, k, "S", str(s), st, end, ""]
        for c, n, (d, k), s, st in zip(snomed_cid.tolist(), name, classes, sctid, start, strict=True)
    ]
    rel_rows = [
        [str(c), str(c), A.MAPS_TO, st, end, ""] for c, st in zip(snomed_cid.tolist(), start, strict=True)
    ]
    return concept_rows, rel_rows


def _token_rows(tokens: pa.Table, cid_of: dict, concept_rows: list, rel_rows: list) -> int:
    """Append the ICD tokens' CONCEPT rows and their ``Maps to`` / ``Mapped from`` rows to the SNOMED
    concepts of the program; returns the number of tokens."""
    end = str(A.OPEN_END)
    n = 0
    for vocab in A.ICD_VOCABULARIES:
        t = tokens.filter(pc.equal(tokens["vocabulary"], vocab)).sort_by("code")
        columns = (t[c].to_pylist() for c in ("code", "code_dotted", "title", "snomed_ids"))
        for i, (code, dotted, title, ids) in enumerate(zip(*columns, strict=True)):
            c = A.ID_BASE[vocab] + i
            row = [str(c), title or dotted, "Condition", vocab, _icd_class(vocab, code), "", dotted]
            concept_rows.append(row + [ICD_START[vocab], end, ""])
            for s in ids:
                rel_rows.append([str(c), str(cid_of[s]), A.MAPS_TO, ICD_START[vocab], end, ""])
                rel_rows.append([str(cid_of[s]), str(c), A.MAPPED_FROM, ICD_START[vocab], end, ""])
            n += 1
    return n


def _attribute_rows(key: np.ndarray, cid_of: dict, rel_rows: list) -> tuple[set[str], dict[int, int]]:
    """Append each distinct (source, type, destination) relationship ``key`` with an OHDSI relationship
    id to ``rel_rows``, both directions; returns the relationship ids used (with ``Maps to``) and the
    rows per attribute type that have none (logged, not exported)."""
    end = str(A.OPEN_END)
    not_expressible: dict[int, int] = {}
    used_rel: set[str] = {A.MAPS_TO}
    for s, ty, d in key.tolist():
        rid = A.ATTRIBUTE_OF.get(ty)
        if rid is None:
            not_expressible[ty] = not_expressible.get(ty, 0) + 1
            continue
        used_rel.add(rid)
        rel_rows.append([str(cid_of[s]), str(cid_of[d]), rid, "20020131", end, ""])
        rel_rows.append([str(cid_of[d]), str(cid_of[s]), A.RELATIONSHIPS[rid][1], "20020131", end, ""])
    if not_expressible:
        log.warning(
            "attribute types with no OHDSI relationship id, not exported: %s",
            ", ".join(f"{k} ({v} rows)" for k, v in sorted(not_expressible.items())),
        )
    return used_rel, not_expressible


# VOCABULARY.csv: (vocabulary_id, name, version or None for the release's, vocabulary_concept_id)
VOCABULARIES = (
    (A.SNOMED, "Systematic Nomenclature of Medicine - Clinical Terms", None, "44819097"),
    (
        "ICD10CM",
        "International Classification of Diseases, Tenth Revision, Clinical Modification",
        "ICD10CM",
        "44819098",
    ),
    (
        "ICD9CM",
        "International Classification of Diseases, Ninth Revision, Clinical Modification, Volume 1 and 2",
        "ICD9CM",
        "5046",
    ),
)


def _write_reference_tables(out: Path, version: str | None, concept_rows: list, used_rel: set[str]) -> None:
    """VOCABULARY, DOMAIN, CONCEPT_CLASS and RELATIONSHIP: the definitions the other tables refer to."""
    _tsv(
        out / "VOCABULARY.csv",
        "VOCABULARY.csv",
        [[v, n, "hrrbert export", ver or f"SNOMED {version}", c] for v, n, ver, c in VOCABULARIES],
    )
    domains = sorted({r[2] for r in concept_rows})
    _tsv(out / "DOMAIN.csv", "DOMAIN.csv", [[d, d, "0"] for d in domains])
    _tsv(
        out / "CONCEPT_CLASS.csv",
        "CONCEPT_CLASS.csv",
        [[c, c, "0"] for c in sorted({r[4] for r in concept_rows})],
    )
    rels = sorted(used_rel - {A.MAPS_TO})
    rel_defs = [
        [r, r, "1" if r == "Is a" else "0", "1" if r == "Is a" else "0", A.RELATIONSHIPS[r][1], "0"]
        for r in rels
    ]
    rel_defs += [[A.RELATIONSHIPS[r][1], A.RELATIONSHIPS[r][1], "0", "0", r, "0"] for r in rels]
    rel_defs += [
        [A.MAPS_TO, "Non-standard to Standard map (OMOP)", "0", "0", A.MAPPED_FROM, "44818977"],
        [A.MAPPED_FROM, "Standard to Non-standard map (OMOP)", "0", "0", A.MAPS_TO, "44818978"],
    ]
    _tsv(out / "RELATIONSHIP.csv", "RELATIONSHIP.csv", rel_defs)


def _icd_class(vocab: str, code: str) -> str:
    if vocab == "ICD10CM":
        return f"{len(code)}-char billing code"
    return f"{len(code) - (1 if code.startswith('E') else 0)}-dig billing code"


def _synonyms(
    desc: pa.Table, languages: list[int], cid_of: dict[int, int], names: dict[int, str]
) -> list[list[str]]:
    """The terms the compile reads words from (``graph.description_terms``' rule: FSNs and synonyms the
    language refsets accept, a concept's FSN when none is accepted), less each concept's name."""
    d = desc.filter(pc.is_in(desc["type_id"], value_set=pa.array([S.FSN, S.SYNONYM], pa.int64())))
    accepted = pc.and_(
        pc.is_valid(d["acceptability_id"]),
        pc.is_in(d["language_refset_id"], value_set=pa.array(languages, pa.int64())),
    )
    accepted = pc.fill_null(accepted, False).to_numpy(zero_copy_only=False)
    is_fsn = d["type_id"].to_numpy() == S.FSN
    concept = d["concept_id"].to_numpy()
    with_fsn = set(concept[accepted & is_fsn].tolist())
    fallback = is_fsn & np.fromiter((c not in with_fsn for c in concept.tolist()), bool, len(concept))
    keep = accepted | fallback
    rows: set[tuple[int, str]] = set()
    for c, term in zip(concept[keep].tolist(), d["term"].filter(pa.array(keep)).to_pylist(), strict=True):
        if c in cid_of and term != names.get(c):
            rows.add((cid_of[c], term))
    return [[str(c), t, str(A.ENGLISH)] for c, t in sorted(rows)]


def _ancestors(key: np.ndarray, cid_of: dict[int, int]) -> list[list[str]]:
    """CONCEPT_ANCESTOR rows of the is-a graph (each concept its own ancestor at level 0)."""
    isa = key[key[:, 1] == S.IS_A] if len(key) else key
    parents: dict[int, list[int]] = {}
    for child, _t, parent in isa.tolist():
        parents.setdefault(child, []).append(parent)
    memo: dict[int, dict[int, tuple[int, int]]] = {}

    def up(c: int) -> dict[int, tuple[int, int]]:
        stack = [c]
        while stack:
            x = stack[-1]
            todo = [p for p in parents.get(x, []) if p not in memo]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if x in memo:
                continue
            acc: dict[int, tuple[int, int]] = {x: (0, 0)}
            for p in parents.get(x, []):
                for a, (lo, hi) in memo[p].items():
                    old = acc.get(a)
                    acc[a] = (lo + 1, hi + 1) if old is None else (min(old[0], lo + 1), max(old[1], hi + 1))
            memo[x] = acc
        return memo[c]

    rows = []
    for c in sorted(cid_of):
        for a, (lo, hi) in sorted(up(c).items()):
            rows.append([str(cid_of[a]), str(cid_of[c]), str(lo), str(hi)])
    return rows


def _tsv(path: Path, name: str, rows: list[list[str]]) -> None:
    for r in rows:
        for v in r:
            if "\t" in v or "\n" in v:
                raise ValueError(f"{path.name}: a value holds a TAB or a line break: {v!r}")
    text = "\n".join(["\t".join(A.FILES[name])] + ["\t".join(r) for r in rows]) + "\n"
    path.write_bytes(text.encode("utf-8"))
