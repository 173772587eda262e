"""Carry a trained model over to a new program (``hrrbert carry``): :func:`carry`.

The source is a saved model folder (pretrained or fine-tuned; a pretraining run folder holding ``model/`` also
works) that carries its program (``program/``; else ``model_program`` names it). The new program is a program
folder or a release folder (its newest program). :func:`model.carry.carry_model` builds the model on the new
program: every weight that does not depend on the vocabulary copied, trained atoms and relations carried by
key (new ones by ``init``: ``parents`` (the default: a new concept atom starts at the mean of its is-a
parents, read from the new program's ``graph/snomed_relationships.parquet``; words and atoms without parents
start at zero), ``zero``, ``kind_mean`` or ``random``, seeded by ``seed``), per-token rows carried by
(vocabulary, code), and a new token's rows set by the rules that module documents (``unstructured``/``cat``
table and ``freq`` encoding: the trained ``[UNK]`` row; ``add`` table: zero; MLM bias: the median trained
bias).

The output folder ``out`` is a normal saved model folder (``config.json``, ``model.safetensors``,
``program/`` with a copy of the new program, ``vocab.txt``, the model card ``README.md``), so ``hrrbert
finetune``, ``hrrbert evaluate`` and ``hrrbert export-embeddings`` take it as they take any model folder
(with ``--program`` the new program and datasets tokenized against it). Its ``config.json`` keeps the
source's extra keys (``run_id``, ``task``, ...) and adds ``carried_from`` (the source folder, the old
and new program ids, ``init``, ``seed``). A fine-tuned source's ``thresholds.json`` is copied along with
its task head. ``carry.json`` holds the report (:data:`REPORT_FILE`).

A new program that shares no code with the model's program (nor, for a mode that composes, a concept or
ICD node atom) is refused before any work: only the special tokens' rows would be carried. One of whose
codes fewer than half (:data:`SMALL_OVERLAP`) are the model's is carried with a warning giving the counts.

The folder is written into a temporary folder beside ``out`` and renamed into place. An existing ``out``
is refused unless it is an empty folder, or ``force`` is given and it holds an earlier carry (its
``carry.json``); anything else is never replaced.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.data.folders import check_out, folder_written
from pipelines.errors import PipelineError

__all__ = ["CarryResult", "carry", "is_a_parents", "REPORT_FILE", "INIT_RULES"]

log = logging.getLogger(__name__)

REPORT_FILE = "carry.json"
CARRIED_KEY = "carried_from"  # config.json: where a carried model came from
OLD_CARRIED_KEY = "transferred_from"  # the same record before "transfer" became "carry" (read, not written)
THRESHOLDS_FILE = "thresholds.json"  # pipelines.train.finetune.THRESHOLDS_FILE (a fine-tuned model's)
INIT_RULES = ("parents", "zero", "kind_mean", "random")  # hrr_kernel.INIT_RULES (light copy for the CLI)
IS_A = 116680003
GRAPH_RELATIONSHIPS = (
    "graph/snomed_relationships.parquet"  # the program's copy of the release's relationships
)
# config.json keys save_pretrained writes itself; every other key of the source is kept
OWN_KEYS = ("kind", "model_type", "architectures", "config", "program_id", "n_concepts")


@dataclass
class CarryResult:
    """What :func:`carry` wrote."""

    out: Path
    source: Path  # the source model folder
    new_program: Path  # the new program's folder
    report: dict[str, Any]  # the report (also in carry.json)
    seconds: float
    files: list[str] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        """What the command prints."""
        r = self.report
        t, atoms, rel = r["tokens"], r["atoms"], r["relations"]
        kinds = ", ".join(f"{k} {v['matched']}/{v['new']}" for k, v in atoms["by_kind"].items())
        rules = "; ".join(f"{k}: {v}" for k, v in r["new_token_rows"]["rules"].items())
        lines = [
            f"carried {r['mode']} model {self.source} from program {r['old_program_id']} to "
            f"{r['new_program_id']} (init {r['init']}) in {self.seconds:.1f} s",
            f"  tokens: {r['new_tokens']} ({r['old_tokens']} before): carried {t['carried']} "
            f"({r['carried_edges_unchanged']} with unchanged edges, {r['carried_edges_changed']} changed), "
            f"composed from trained atoms {t['composed_trained']}, with some new atoms "
            f"{t['composed_some_new']}, entirely new {t['entirely_new']}",
            f"  new token rows: {r['new_token_rows']['count']} ({rules})",
            f"  old tokens dropped: {r['old_tokens_dropped']}"
            + (f" (e.g. {', '.join(r['dropped_examples'][:5])})" if r["dropped_examples"] else ""),
            f"  atoms matched {atoms['matched']}, new {atoms['new']} (matched/new by kind: {kinds})"
            + ("" if atoms["used"] else "; not used by an unstructured model"),
            f"  relations matched {rel['matched']}, new {rel['new']}",
            f"  wrote {self.out}: {', '.join(self.files)}",
            f"  next: hrrbert finetune {self.out} --program {self.new_program} --dataset DATASET "
            "(a dataset tokenized against the new program)",
        ]
        return lines


def is_a_parents(program) -> list[list[int]]:
    """Per atom of ``program``, the atom ids of its is-a parents (concept atoms whose SCTIDs the program's
    ``graph/snomed_relationships.parquet`` links by is-a); empty lists when the program has no such table
    (then ``parents`` leaves every new atom at zero, said in a log line)."""
    import pyarrow.parquet as pq

    out: list[list[int]] = [[] for _ in range(program.n_atoms)]
    path = Path(program.path) / GRAPH_RELATIONSHIPS
    if not path.is_file():
        log.warning("%s: missing; init 'parents' has no is-a graph, so new atoms start at zero", path)
        return out
    rel = pq.read_table(path, columns=["source_id", "destination_id", "type_id"]).to_pydict()
    atom = {
        k: i
        for i, (k, kind) in enumerate(zip(program.atom_keys, program.atom_kinds, strict=True))
        if kind == "concept"
    }
    for s, d, t in zip(rel["source_id"], rel["destination_id"], rel["type_id"], strict=True):
        child, parent = atom.get(str(s)), atom.get(str(d))
        if t == IS_A and child is not None and parent is not None and parent not in out[child]:
            out[child].append(parent)
    return out


def _check_out(out: Path, force: bool, source: Path) -> None:
    """Refuse ``out`` inside the source, and an existing ``out`` unless it is an empty folder or (``force``)
    an earlier carry."""
    if out.resolve() == source.resolve() or source.resolve() in out.resolve().parents:
        raise PipelineError(f"{out}: is the source model {source} or inside it; choose another --out")
    check_out(out, force, record=REPORT_FILE, what="carry")


def overlap(old, new) -> dict[str, int]:
    """What the programs ``old`` and ``new`` share, special tokens left out: ``codes`` (of ``new``, by
    (vocabulary, code)), ``shared_codes`` (of them also in ``old``), and per atom kind of ``new``
    (``concept``, ``word``, ``icd``) ``<kind>_atoms`` and ``shared_<kind>_atoms`` (by key)."""
    from hrr_kernel import SPECIAL_TOKENS

    def codes(p):
        return {
            k for k in zip(p.concept_vocabularies, p.concept_codes, strict=True) if k[1] not in SPECIAL_TOKENS
        }

    def atoms(p):
        return {(k, a) for a, k in zip(p.atom_keys, p.atom_kinds, strict=True) if k != "special"}

    new_codes, new_atoms, old_atoms = codes(new), atoms(new), atoms(old)
    out = {"codes": len(new_codes), "shared_codes": len(new_codes & codes(old))}
    for kind in ("concept", "word", "icd"):
        mine = {a for a in new_atoms if a[0] == kind}
        out[f"{kind}_atoms"], out[f"shared_{kind}_atoms"] = len(mine), len(mine & old_atoms)
    return out


SMALL_OVERLAP = 0.5  # fewer of the new program's codes than this share in the old one: a warning


def _check_overlap(program: str | Path, model, new_program) -> None:
    """Refuse a carry to a program that shares no code (and, for a mode that composes, no concept or ICD atom)
    with the model's: only the special tokens' rows would be carried. Warn with the counts when fewer than
    :data:`SMALL_OVERLAP` of the new program's codes are the model's."""
    o = overlap(model.program, new_program)
    composes = model.config.spec.composes
    counts = f"{o['shared_codes']} of its {o['codes']} codes"
    if composes:
        counts += (
            f", {o['shared_concept_atoms']} of {o['concept_atoms']} concept atoms, "
            f"{o['shared_word_atoms']} of {o['word_atoms']} word atoms and "
            f"{o['shared_icd_atoms']} of {o['icd_atoms']} ICD node atoms"
        )
    new_id, old_id = new_program.program_id, model.program_id
    if o["shared_codes"] == 0 and not (composes and (o["shared_concept_atoms"] or o["shared_icd_atoms"])):
        nothing = "no code and no concept or ICD node atom" if composes else "no code"
        raise PipelineError(
            f"{program}: program {new_id} shares {nothing} with the model's program {old_id} ({counts} are "
            "the model's): a carry would keep only the special tokens' rows; carry to a program of the same "
            "ontology (a later release of the model's), or train a new model on this program"
        )
    if o["shared_codes"] < SMALL_OVERLAP * o["codes"]:
        log.warning(
            "%s: program %s shares little with the model's program %s: %s are the model's; the rest start "
            "from the --init rules",
            program,
            new_id,
            old_id,
            counts,
        )


def _load_source(model_dir: Path, model_program: str | None):
    """``(folder, config.json, model)`` of the source; its program from ``model_program`` or its copy."""
    from hrr_kernel import load_program
    from model import HRRBert
    from pipelines.train.finetune import model_dir as find_model

    if not model_dir.is_dir():
        raise PipelineError(f"{model_dir}: no such folder (expected a saved model folder)")
    mdir = find_model(model_dir)
    meta = HRRBert.read_config(mdir)
    program = load_program(model_program) if model_program is not None else None
    model = HRRBert.from_pretrained(mdir, program)  # checks the program id and the files
    model.eval()
    return mdir, meta, model


def _extra(meta: dict[str, Any], mdir: Path, report: dict[str, Any]) -> dict[str, Any]:
    """The source's own config.json keys plus ``carried_from`` (a source carried before "transfer" became
    "carry" holds it as ``transferred_from``; either becomes ``earlier``). The record of untrained tokens is
    left behind: its ids are the old program's, and which tokens of the new one were trained is not known
    (a model without the record is not settled by fine-tuning)."""
    from model.common import UNTRAINED_KEY

    drop = {*OWN_KEYS, CARRIED_KEY, OLD_CARRIED_KEY, UNTRAINED_KEY}
    extra = {k: v for k, v in meta.items() if k not in drop}
    history = [meta[k] for k in (CARRIED_KEY, OLD_CARRIED_KEY) if isinstance(meta.get(k), dict)][:1]
    extra[CARRIED_KEY] = {
        "model": str(mdir),
        "program_id": report["old_program_id"],
        "new_program_id": report["new_program_id"],
        "init": report["init"],
        "seed": report["seed"],
        **({"earlier": history} if history else {}),
    }
    return extra


def _write(tmp: Path, new_model, meta, mdir: Path, report, record) -> list[str]:
    """The model folder into ``tmp``; returns the files written at its top level."""
    from pipelines.train.runtime import write_json

    new_model.save_pretrained(tmp, extra=_extra(meta, mdir, report))
    if (mdir / THRESHOLDS_FILE).is_file():
        shutil.copy2(mdir / THRESHOLDS_FILE, tmp / THRESHOLDS_FILE)
    write_json(tmp / REPORT_FILE, record)
    return sorted(p.name + ("/" if p.is_dir() else "") for p in tmp.iterdir())


def carry(
    model_dir: str | Path,
    program: str | Path,
    out: str | Path,
    *,
    init: str = "parents",
    seed: int = 0,
    force: bool = False,
    model_program: str | Path | None = None,
) -> CarryResult:
    """Carry the model in ``model_dir`` over to ``program`` and write it to ``out`` (see the module
    docstring).

    Raises :class:`PipelineError` (or a ``model`` / ``hrr_kernel`` error) naming the path and what is wrong;
    nothing is left under ``out`` on failure.
    """
    from hrr_kernel import load_program, resolve_program
    from model.carry import carry_model
    from pipelines.train.runtime import now_iso

    if init not in INIT_RULES:
        raise PipelineError(f"init must be one of {INIT_RULES}, got {init!r}")
    start = time.perf_counter()
    source, out = Path(model_dir), Path(out)
    _check_out(out, force, source)  # before any work
    mdir, meta, model = _load_source(source, None if model_program is None else str(model_program))
    new_path = resolve_program(program)
    new_program = load_program(new_path)
    if new_program.program_id == model.program_id:
        raise PipelineError(
            f"{program}: is program {new_program.program_id}, the one the model {mdir} already has; "
            "nothing to carry"
        )
    _check_overlap(program, model, new_program)  # before any work: a program sharing nothing is refused
    parents = is_a_parents(new_program) if init == "parents" else None
    new_model, report = carry_model(model, new_program, init=init, seed=seed, atom_parents=parents)
    record = {
        "kind": "carry",
        "model": str(mdir),
        "program": str(new_path),
        **report,
        "created_at": now_iso(),
    }
    with folder_written(out, "carried model", force=force, record=REPORT_FILE) as tmp:
        files = _write(tmp, new_model, meta, mdir, report, record)
    seconds = time.perf_counter() - start
    log.info("carried %s to program %s: %s", mdir, new_program.program_id, out)
    return CarryResult(
        out=out, source=mdir, new_program=new_path, report=report, seconds=seconds, files=files
    )
