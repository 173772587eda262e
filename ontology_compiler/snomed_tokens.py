"""Tokens that are SNOMED CT concepts themselves (``compile-ontology --tokens snomed|both``).

Data coded in SNOMED concepts (OMOP ``condition_concept_id``, MEDS ``SNOMED/<sctid>``) then embeds each
concept as itself instead of through an ICD code. A SNOMED token has vocabulary ``SNOMEDCT`` (the one
``hrrbert prepare`` resolves ``SNOMED`` events to directly), its SCTID as code, the concept as its only
SNOMED concept (mapping source ``snomed``, kind ``identity``), so it takes the concept's relationship and
word edges like an ICD token mapped to it, and no ICD classification.

Which concepts: every active concept at or below the ``roots`` in the is-a hierarchy (default Clinical
finding, 404684003), or the concepts a concept-set file names (one SCTID per line, the first field of a
TAB- or comma-separated line; ``#`` starts a comment; a header line that is not a number is skipped).
Named concepts that are not active in the release are counted and left out.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import rf2_schema as S
from .errors import InputFileError, OptionError

log = logging.getLogger(__name__)

TOKEN_KINDS = ("icd", "snomed", "both")
VOCABULARY = "SNOMEDCT"
CLINICAL_FINDING = 404684003
DEFAULT_ROOTS = (CLINICAL_FINDING,)


def token_options(tokens: str, roots: tuple[int, ...], concept_set: str | Path | None) -> dict:
    """The options that enter the program id (nothing for the default ``icd``, so ICD programs keep their
    ids); raises :class:`OptionError` for a bad combination."""
    if tokens not in TOKEN_KINDS:
        raise OptionError(f"--tokens must be one of {', '.join(TOKEN_KINDS)}, got {tokens!r}")
    if tokens == "icd":
        if concept_set is not None or tuple(roots) not in ((), DEFAULT_ROOTS):
            raise OptionError(
                "--snomed-root and --concept-set choose SNOMED tokens: give --tokens snomed or both"
            )
        return {}
    return {"tokens": tokens, "snomed_roots": sorted(int(r) for r in (roots or DEFAULT_ROOTS))}


def read_concept_set(path: str | Path) -> np.ndarray:
    """The SCTIDs a concept-set file names (see the module docstring), sorted and unique."""
    path = Path(path)
    ids = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        field = line.split("#", 1)[0].replace(",", "\t").split("\t", 1)[0].strip()
        if not field:
            continue
        if not field.isdigit():
            if not ids and n == 1:
                continue  # a header
            raise InputFileError(
                path, "not an SCTID", line=n, expected="digits, e.g. 44054006", found=repr(field)
            )
        ids.append(int(field))
    return np.unique(np.array(ids, dtype=np.int64))


def descendants(relationships: pa.Table, roots: tuple[int, ...]) -> np.ndarray:
    """The roots and every concept below them in is-a (``relationships``: the release's active view)."""
    isa = relationships.filter(pc.equal(relationships["typeId"], pa.scalar(S.IS_A, pa.int64())))
    child, parent = isa["sourceId"].to_numpy(), isa["destinationId"].to_numpy()
    order = np.argsort(parent, kind="stable")
    child, parent = child[order], parent[order]
    found = set(int(r) for r in roots)
    frontier = np.array(sorted(found), dtype=np.int64)
    while len(frontier):
        lo, hi = np.searchsorted(parent, frontier, "left"), np.searchsorted(parent, frontier, "right")
        kids = np.concatenate([child[a:b] for a, b in zip(lo, hi, strict=True)]) if len(lo) else child[:0]
        new = np.setdiff1d(np.unique(kids), np.array(sorted(found), dtype=np.int64))
        found.update(new.tolist())
        frontier = new
    return np.array(sorted(found), dtype=np.int64)


def with_snomed_tokens(mres, release, tokens: str, roots: tuple[int, ...], concept_set: str | Path | None):
    """``mres`` (a :class:`map_codes.MappingResult`) with the SNOMED tokens added (``both``) or in place
    of the ICD tokens (``snomed``); its ``counts`` gain ``snomed_tokens`` and what was left out."""
    if tokens == "icd":
        return mres
    active = release.concepts["id"].to_numpy()
    if concept_set is not None:
        named = read_concept_set(concept_set)
        keep = np.isin(named, active)
        chosen = named[keep]
        n_out = int((~keep).sum())
        mres = replace(mres, counts={**mres.counts, "snomed_tokens_not_active": n_out})
        if n_out:
            log.warning(
                "%s: %d concept(s) are not active in the release; they get no token", concept_set, n_out
            )
    else:
        roots = tuple(roots or DEFAULT_ROOTS)
        missing = [r for r in roots if r not in set(active.tolist())]
        if missing:
            raise OptionError(f"--snomed-root {missing[0]}: not an active concept of the release")
        chosen = np.intersect1d(descendants(release.relationships, roots), active)
    n = len(chosen)
    codes = pa.array([str(x) for x in chosen.tolist()], pa.string())
    tok = pa.table(
        {
            "vocabulary": pa.array([VOCABULARY] * n, pa.string()),
            "code": codes,
            "code_dotted": codes,
            "mapping_source": pa.array(["snomed"] * n, pa.string()),
            "mapping_kind": pa.array(["identity"] * n, pa.string()),
            "title": pa.nulls(n, pa.string()),
        }
    )
    ts = pa.table({"vocabulary": tok["vocabulary"], "code": codes, "sctid": pa.array(chosen)})
    base_tok = mres.tokens
    ts = ts.cast(mres.token_snomed.schema)
    tok = tok.select(base_tok.column_names).cast(base_tok.schema)
    if tokens == "snomed":
        new_tokens, new_ts = tok, ts
        token_terms = mres.token_terms.schema.empty_table()
    else:
        new_tokens = pa.concat_tables([base_tok, tok])
        new_ts = pa.concat_tables([mres.token_snomed, ts])
        token_terms = mres.token_terms
    counts = dict(mres.counts)
    counts["snomed_tokens"] = n
    log.info(
        "%d SNOMED concept tokens (%s)", n, "concept set" if concept_set is not None else f"below {roots}"
    )
    return replace(mres, tokens=new_tokens, token_snomed=new_ts, token_terms=token_terms, counts=counts)
