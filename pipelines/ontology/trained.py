"""A trained model's HRR side, shared by ``explain`` and ``query``: its vectors and the names in its program.

:func:`load_trained` loads a model folder (a pretraining run or its ``model/``, a fine-tuned trial's
``model/``, or a fine-tuning run with one trial) with the program it carries and returns a
:class:`TrainedVectors`: the trained atoms and relations, the composition ``C`` of every code, and the
trained code vectors, the HRR part of the token embedding:

- ``base``: ``C`` (the embedding is the composition);
- ``freq``: ``C``; the fixed sinusoidal frequency encoding added to it in the embedding is left out (it is
  a function of the code's frequency, not of its edges) and kept as ``extra``;
- ``add``: ``C + W`` (the free table ``W`` trained alongside, kept as ``extra``);
- ``cat``: ``C``, the HRR half of ``[C, W]`` (the table half ``W`` kept as ``extra``).

A model that composes nothing (``unstructured``; ``gram`` and ``ancestors``, whose rows mix free vectors of
a code and its ancestors) is refused with a :class:`NotHRRError`.

Names: :func:`resolve_code` (``E11.9``, ``E119``, ``ICD10CM:E11.9``), :func:`resolve_relation` (label, case
insensitive, or SCTID), :func:`resolve_atom` (SCTID, word or label), :func:`parse_pair`
(``"finding site=Pancreatic islets"``); each raises a :class:`NameLookupError` that lists what matched or
what exists.

Dimension legend: N codes (concepts), A atoms, R relations, H HRR dimension.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.errors import PipelineError

__all__ = [
    "TrainedVectors",
    "NotHRRError",
    "NameLookupError",
    "load_trained",
    "model_folder",
    "resolve_code",
    "resolve_relation",
    "resolve_atom",
    "parse_pair",
    "code_edges",
    "describe_code",
    "describe_atom",
    "describe_relation",
]

MAX_LISTED = 12  # candidates named in an error message


class NotHRRError(PipelineError):
    """The model has no HRR part (``unstructured``): nothing to unbind or compose."""


class NameLookupError(PipelineError, LookupError):
    """A code, relation or atom name that matches nothing, or more than one thing."""


@dataclass
class TrainedVectors:
    """The HRR side of a trained model (tensors detached, float32, on the device it was loaded on)."""

    folder: Path  # the model folder read
    program: Any  # hrr_kernel.Program (the copy the folder carries)
    mode: str  # base, freq, add or cat
    normalize: bool  # the model scales each composed row to unit norm
    atoms: Any  # (A, H) trained atom vectors
    relations: Any  # (R, H) trained relation vectors
    composition: Any  # (N, H) C, the ontology composition of every code (unit rows when normalize)
    vectors: Any  # (N, H) the trained code vectors (C; add: C + W)
    extra: Any  # (N, D') what the mode puts beside C: freq encoding, add's W, cat's table half; None for base


def model_folder(path: str | Path) -> Path:
    """The model folder of ``path``: itself, its ``model/`` (a pretraining run), or the one trial of a
    fine-tuning run (several trials: an error listing them)."""
    from pipelines.eval.finetuned import trial_models
    from pipelines.train.finetune import model_dir

    p = Path(path)
    if not p.is_dir():
        raise PipelineError(f"{p}: no such model folder")
    mdir = model_dir(p)
    if (mdir / "config.json").is_file() and (mdir / "model.safetensors").is_file():
        return mdir
    trials = trial_models(p)  # raises when there are none
    if len(trials) > 1:
        listed = ", ".join(str(t) for t in trials[:MAX_LISTED])
        raise PipelineError(
            f"{p}: a fine-tuning run with {len(trials)} trials; pass one trial's model folder: {listed}"
        )
    return trials[0]


def load_trained(path: str | Path, device: str = "cpu", program: str | Path | None = None) -> TrainedVectors:
    """Load a model folder with its program (``program``: that program's folder, for a model folder that
    carries no copy; default: the copy, ``program/``) and return its HRR side (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    from hrr_kernel import compose, hrr_mode_names, load_program
    from model import HRRBert

    mdir = model_folder(path)
    given = None if program is None else load_program(program, device=device)
    model = HRRBert.from_pretrained(mdir, given, device=device)  # a given program's id is checked
    token = model.embeddings.token
    if not token.spec.composes:
        raise NotHRRError(
            f"{mdir}: the model is {token.mode!r} ({token.spec.note}): it composes nothing from atoms and "
            f"relations, so there is nothing to unbind or compose; explain and query need an HRR mode "
            f"({', '.join(hrr_mode_names())})"
        )
    with torch.no_grad():
        atoms, relations = token.atom_vectors().detach().float(), token.relation_vectors().detach().float()
        c = compose(model.program, atoms, relations)  # (N, H)
        if token.normalize:
            c = F.normalize(c, dim=1, eps=1e-12)
        extra = token.spec.beside(token)  # what the mode puts beside C (hrr_kernel.modes)
        extra = None if extra is None else extra.detach().float()
        vectors = token.spec.hrr_space(token, c, None).float()  # (N, H): C, or C + W for add
    return TrainedVectors(
        mdir, model.program, token.mode, token.normalize, atoms, relations, c, vectors, extra
    )


# --- names ------------------------------------------------------------------------------------------


def describe_code(program, row: int) -> str:
    """``ICD10CM:E11.9 Type 2 diabetes mellitus without complications``."""
    code = program.code(row)
    return f"{code} {code.title}".rstrip()


def describe_atom(program, atom: int) -> str:
    """``Pancreatic islets (concept 990…)`` or ``diabetes (word)``."""
    key, kind, label = program.atom_keys[atom], program.atom_kinds[atom], program.atom_labels[atom]
    return f"{label} ({kind})" if label == key else f"{label} ({kind} {key})"


def describe_relation(program, relation: int) -> str:
    key, label = program.relation_keys[relation], program.relation_labels[relation]
    return label if key == label else f"{label} ({key})"


def _listed(items: list[str], limit: int = MAX_LISTED) -> str:
    more = f", and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def resolve_code(program, text: str) -> int:
    """The row of a code: ``E11.9`` or ``E119`` (any vocabulary of the program), or ``ICD10CM:E11.9``.

    Raises:
        NameLookupError: no vocabulary holds the code, or several do (the message lists them).
    """
    from hrr_kernel import UnknownCodeError

    text = str(text).strip()
    vocabularies = {v.upper(): v for v in program.vocabularies}
    head, sep, tail = text.partition(":")
    if sep and head.strip().upper() in vocabularies:
        try:
            return program.row(vocabularies[head.strip().upper()], tail)
        except UnknownCodeError as e:
            raise NameLookupError(str(e)) from e
    hits = []
    for voc in program.vocabularies:
        try:
            hits.append(program.row(voc, text))
        except UnknownCodeError:
            continue
    if not hits:
        raise NameLookupError(
            f"program {program.program_id} has no code {text!r} in any of its vocabularies "
            f"{program.vocabularies}"
        )
    if len(hits) > 1:
        raise NameLookupError(
            f"code {text!r} is in several vocabularies: "
            f"{_listed([describe_code(program, r) for r in hits])}; "
            f"prefix it with one, e.g. {program.code(hits[0]).vocabulary}:{text}"
        )
    return hits[0]


def _norm(text: str) -> str:
    return " ".join(str(text).replace("_", " ").split()).casefold()


def resolve_relation(program, text: str) -> int:
    """The id of a relation named by its label (``finding site``, case and ``_`` insensitive), its key
    (SCTID ``363698007``, ``identity``, ``description``) or its kind (``is_a``).

    Raises:
        NameLookupError: no relation has that name (the message lists the program's relations).
    """
    want = _norm(text)
    for names in (program.relation_keys, program.relation_labels, program.relation_kinds):
        hits = [j for j, name in enumerate(names) if _norm(name) == want]
        if len(hits) == 1:
            return hits[0]
    names = [describe_relation(program, j) for j in range(program.n_relations)]
    raise NameLookupError(
        f"no relation {text!r} in program {program.program_id}; it has: {_listed(names, limit=len(names))}"
    )


def resolve_atom(program, text: str, relation: int | None = None) -> int:
    """The id of an atom named by its key (an SCTID or a word) or its label, case insensitive.

    Which one, when several atoms match: with ``relation`` given, the one matching atom the program binds
    to that relation (``finding site=kidney`` is the concept *Kidney*, not the word); else the one atom
    whose key matches; else the one atom whose label matches.

    Raises:
        NameLookupError: nothing matches (the message suggests close labels), or several atoms do and the
            rules above do not pick one (it lists them with their kind and key).
    """
    want = _norm(text)
    by_key = [i for i, name in enumerate(program.atom_keys) if _norm(name) == want]
    by_label = [i for i, name in enumerate(program.atom_labels) if _norm(name) == want]
    found = list(dict.fromkeys(by_key + by_label))
    if relation is not None and len(found) > 1:
        used = set(program.edge_atom[program.edge_relation == relation].tolist())
        bound = [i for i in found if i in used]
        if len(bound) == 1:
            return bound[0]
    for hits in (by_key, by_label):
        if len(hits) == 1 and (hits is by_key or not by_key):
            return hits[0]
    if found:
        raise NameLookupError(
            f"atom {text!r} is ambiguous: {_listed([describe_atom(program, i) for i in found])}; "
            "name it by its key (SCTID or word)"
        )
    names = sorted(set(program.atom_labels) | set(program.atom_keys))
    close = difflib.get_close_matches(str(text), names, n=5, cutoff=0.6)
    hint = f"; close keys and labels: {'; '.join(close)}" if close else ""
    raise NameLookupError(
        f"no atom {text!r} (by key, SCTID or word, or by label) in program {program.program_id}{hint}"
    )


def parse_pair(program, text: str) -> tuple[int, int]:
    """``"finding site=Pancreatic islets"`` -> ``(relation id, atom id)``.

    Raises:
        NameLookupError: no ``=``, or the relation or atom does not resolve.
    """
    rel, sep, atom = str(text).partition("=")
    if not sep or not rel.strip() or not atom.strip():
        raise NameLookupError(
            f"a pair must read RELATION=ATOM (e.g. 'finding site=Pancreatic islets'), got {text!r}"
        )
    j = resolve_relation(program, rel)
    return j, resolve_atom(program, atom, relation=j)


def code_edges(program, row: int) -> list[tuple[int, int]]:
    """The program's ``(relation id, atom id)`` edges of one code, in stored order."""
    sel = (program.edge_concept == int(row)).nonzero().flatten()
    return list(zip(program.edge_relation[sel].tolist(), program.edge_atom[sel].tolist(), strict=True))
