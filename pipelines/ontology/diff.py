"""Compare two compiled programs, and the vectors one trained model composes under each (``hrrbert diff``).

Everything is matched by key, never by id (ids are dense and differ between programs): a token by
(``vocabulary``, ``code``), an atom by (``kind``, ``key``), a relation by its key (the SCTID as text, the
label for an ``icd_hierarchy`` relation, or the kind for ``identity`` and ``description``), and an edge by
(token, relation key, atom). Edges are
compared as sets of those triples.

:func:`diff_programs` reads ``atoms``, ``relations``, ``concepts`` and ``edges`` of both programs
(each file's sha256 checked against its manifest), and writes one folder (``docs/diff-format.md``):

* ``tokens.parquet``: every token of either program: ``added``, ``removed``, ``changed`` (edges gained
  or lost) or ``unchanged``, with its edge counts and the relations whose edges changed;
* ``edges.parquet``: the gained and lost edges, with readable relation and atom labels;
* ``atoms.parquet``: atoms added, removed or relabelled; ``relations.parquet``: every relation, with
  the edges it gained and lost;
* ``mappings.parquet``: codes whose ``snomed_ids``, ``mapping_source`` or ``mapping_kind`` differ;
* with a model, ``vectors.parquet``: per token of both programs the cosine between the vector composed
  under OLD and under NEW with the model's trained atoms and relations, lowest first. The program the
  model was not trained on gets the trained vectors by key (:func:`hrr_kernel.carry_parameters`, init
  ``zero``): its new atoms and relations contribute nothing, so the cosine measures what the edges the
  two programs share (and those one of them lost) do to the vector. Only the HRR composition is
  compared (modes ``base``, ``freq``, ``add``, ``cat``; the frequency encoding and free tables are the
  same per token on both sides and are left out); ``unstructured`` models have none and are refused;
* ``diff.json``: both program ids and paths, the model, and every count.

The folder (default ``artifacts/diffs/<old_id>__<new_id>``) is written into a temporary folder beside
it and renamed into place; an existing folder is refused unless ``force`` is given and it holds an
earlier diff (its ``diff.json``). Reading and matching live in :mod:`.diff_match`, the tables in
:mod:`.diff_tables`; this module composes the vectors, writes the folder and prints the summary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.data.folders import check_out, folder_written
from pipelines.errors import PipelineError

from .diff_match import MAPPING_FIELDS, Match, Side, diff_edges, match, read_side
from .diff_tables import (
    DIFF_FILES,
    atoms_table,
    by_union,
    diff_counts,
    edges_table,
    mappings_table,
    relations_table,
    tokens_table,
)

__all__ = ["DiffResult", "diff_programs", "summary_lines", "default_out", "DIFF_FILES", "RECORD_FILE"]

log = logging.getLogger(__name__)

RECORD_FILE = "diff.json"
VECTORS_FILE = "vectors.parquet"
INIT_RULE = "zero"  # how the program the model was not trained on gets vectors for its new atoms
DEFAULT_ROOT = Path("artifacts") / "diffs"

# --- vectors under a trained model ------------------------------------------------------------------


def _model_record(model: str | Path, old: Side, new: Side) -> tuple[Path, dict[str, Any]]:
    """The model folder and what the diff needs to know of it; refuses a model of neither program, or one
    without an HRR composition."""
    from model import HRRBert
    from pipelines.train.finetune import model_dir

    mdir = model_dir(model)
    meta = HRRBert.read_config(mdir)
    pid, mode = meta.get("program_id"), meta["config"].get("mode")
    if pid not in (old.program_id, new.program_id):
        raise PipelineError(
            f"{mdir}: the model was trained on program {pid!r}, but the diff compares {old.program_id} (OLD) "
            f"and {new.program_id} (NEW); pass a model of one of them"
        )
    from hrr_kernel import hrr_mode_names, mode_spec

    if not mode_spec(mode).composes:
        raise PipelineError(
            f"{mdir}: mode {mode!r} ({mode_spec(mode).note}) composes nothing, so there is no "
            f"HRR vector to compare across programs; pass a model of mode {', '.join(hrr_mode_names())}"
        )
    trained_on = "old" if pid == old.program_id else "new"
    return mdir, {
        "path": str(mdir),
        "program_id": pid,
        "mode": mode,
        "trained_on": trained_on,
        "init": INIT_RULE,
    }


def composed_vectors(mdir: Path, record: dict[str, Any], old: Side, new: Side):
    """``(C_old, C_new)``, float64 ``(N_old, H)`` and ``(N_new, H)``: the model's HRR composition under each
    program; the other program's atoms and relations carried by key (:data:`INIT_RULE` for new ones)."""
    import torch

    from hrr_kernel import carry_parameters, compose, load_program
    from model import HRRBert

    programs = {"old": load_program(old.path), "new": load_program(new.path)}
    trained_on = record["trained_on"]
    other = "new" if trained_on == "old" else "old"
    token = HRRBert.from_pretrained(mdir, programs[trained_on]).embeddings.token
    with torch.no_grad():
        atoms, relations = token.atom_vectors().detach().double(), token.relation_vectors().detach().double()
        carried = carry_parameters(programs[trained_on], programs[other], atoms, relations, init=INIT_RULE)
        out = {
            trained_on: compose(programs[trained_on], atoms, relations),
            other: compose(programs[other], carried.atoms, carried.relations),
        }
    record.update(dim=int(atoms.shape[1]), carried=carried.counts())
    return out["old"].numpy(), out["new"].numpy()


def vectors_table(tokens: pa.Table, m: Match, c_old: np.ndarray, c_new: np.ndarray) -> pa.Table:
    """Per token of both programs (``tokens`` in union order): the cosine between its two vectors, lowest
    first (null, first of all, where one vector is zero), ranked from 1."""
    both = np.flatnonzero((m.tokens.old_row >= 0) & (m.tokens.new_row >= 0))
    a, b = c_old[m.tokens.old_row[both]], c_new[m.tokens.new_row[both]]
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    ok = (na > 0) & (nb > 0)
    cos = np.full(both.size, np.nan)
    cos[ok] = (a[ok] * b[ok]).sum(1) / (na[ok] * nb[ok])
    cols = ["vocabulary", "code", "code_dotted", "title", "status", "old_concept_id", "new_concept_id",
            "edges_gained", "edges_lost"]  # fmt: skip
    table = tokens.take(pa.array(both, pa.int64())).select(cols)
    table = table.append_column("old_norm", pa.array(na)).append_column("new_norm", pa.array(nb))
    table = table.append_column("cosine", pa.array(np.clip(cos, -1.0, 1.0), pa.float64(), mask=~ok))
    table = table.append_column("_order", pa.array(np.where(ok, cos, -np.inf)))  # zero vectors first
    table = table.sort_by([("_order", "ascending"), ("vocabulary", "ascending"), ("code", "ascending")])
    table = table.drop_columns(["_order"])
    return table.append_column("rank", pa.array(np.arange(1, table.num_rows + 1, dtype=np.int32)))


def vector_counts(vectors: pa.Table) -> dict[str, Any]:
    """How far the vectors moved: tokens compared, zero vectors, cosine quantiles, tokens below thresholds."""
    cos = vectors.column("cosine").to_numpy(zero_copy_only=False)
    cos = cos[~np.isnan(cos)]
    q = np.quantile(cos, [0.0, 0.01, 0.5]).tolist() if cos.size else [None] * 3
    changed = vectors.column("status").to_numpy(zero_copy_only=False) == "changed"
    return {
        "tokens": vectors.num_rows,
        "zero_vector": vectors.num_rows - int(cos.size),
        "mean_cosine": float(cos.mean()) if cos.size else None,
        "min_cosine": q[0],
        "p01_cosine": q[1],
        "median_cosine": q[2],
        "below_0_99": int((cos < 0.99).sum()),
        "below_0_9": int((cos < 0.9).sum()),
        "changed_tokens": int(changed.sum()),
    }


# --- writing ----------------------------------------------------------------------------------------


def default_out(old_id: str, new_id: str) -> Path:
    """``artifacts/diffs/<old_id>__<new_id>``."""
    return DEFAULT_ROOT / f"{old_id}__{new_id}"


def _write_folder(out: Path, tables: dict[str, pa.Table], record: dict[str, Any], force: bool) -> None:
    """Write the tables and ``diff.json`` into a temporary folder beside ``out``, then rename it into place
    (an earlier diff there is moved aside first and removed after)."""
    from pipelines.train.runtime import write_json

    meta = {
        b"old_program_id": record["old"]["program_id"].encode(),
        b"new_program_id": record["new"]["program_id"].encode(),
    }
    with folder_written(out, "diff", force=force, record=RECORD_FILE) as tmp:
        for name, table in tables.items():
            pq.write_table(table.replace_schema_metadata(meta), tmp / name, compression="zstd")
        write_json(tmp / RECORD_FILE, record)


# --- the diff ---------------------------------------------------------------------------------------


@dataclass
class DiffResult:
    """What :func:`diff_programs` compared and wrote."""

    out: Path
    old_id: str
    new_id: str
    old_path: Path
    new_path: Path
    counts: dict[str, Any]
    tokens: pa.Table  # tokens.parquet
    vectors: pa.Table | None  # vectors.parquet (with a model)
    model: dict[str, Any] | None  # path, program_id, mode, trained_on, init, dim, carried, counts
    files: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _side_record(side: Side) -> dict[str, Any]:
    release = side.manifest.get("release") if isinstance(side.manifest.get("release"), dict) else {}
    return {
        "program_id": side.program_id,
        "path": str(side.path),
        "release": release.get("name"),
        "as_of": release.get("as_of"),
        "date": release.get("date"),
    }


def diff_programs(
    old: str | Path,
    new: str | Path,
    *,
    out: str | Path | None = None,
    model: str | Path | None = None,
    force: bool = False,
) -> DiffResult:
    """Compare the programs ``old`` and ``new`` (program or release folders) and write the diff folder
    ``out`` (default :func:`default_out`); with ``model`` (a saved model folder, or its pretraining run, whose
    program is ``old`` or ``new``) also the per-token cosines. See the module docstring.

    Raises :class:`PipelineError` (or an ``hrr_kernel`` / ``model`` error) naming what is wrong; nothing is
    left under ``out`` on failure.
    """
    import time

    from pipelines.train.runtime import now_iso

    start = time.perf_counter()
    a, b = read_side(old), read_side(new)
    target = Path(out) if out is not None else default_out(a.program_id, b.program_id)
    check_out(target, force, record=RECORD_FILE, what="diff")  # before any work
    mdir, record = _model_record(model, a, b) if model is not None else (None, None)
    m = match(a, b)
    d = diff_edges(a, b, m)
    rel_labels = by_union(
        m.relations, a.relations.column("label").to_pylist(), b.relations.column("label").to_pylist()
    )
    tokens_u = tokens_table(a, b, m, d, rel_labels)
    status = dict(zip(m.tokens.keys, tokens_u.column("status").to_pylist(), strict=True))
    tables = {
        "tokens.parquet": tokens_u.sort_by([("vocabulary", "ascending"), ("code", "ascending")]),
        "edges.parquet": edges_table(a, b, m, d, status),
        "atoms.parquet": atoms_table(a, b, m),
        "relations.parquet": relations_table(a, b, m, d),
        "mappings.parquet": mappings_table(a, b, m),
    }
    counts = diff_counts(a, b, tables)
    vectors = None
    if mdir is not None:
        vectors = vectors_table(tokens_u, m, *composed_vectors(mdir, record, a, b))
        tables[VECTORS_FILE] = vectors
        record["counts"] = vector_counts(vectors)
    files = [*tables, RECORD_FILE]
    diff_record = {
        "kind": "program_diff",
        "old": _side_record(a),
        "new": _side_record(b),
        "model": record,
        "counts": counts,
        "files": files,
        "created_at": now_iso(),
    }
    _write_folder(target, tables, diff_record, force)
    seconds = time.perf_counter() - start
    log.info("diff of %s and %s written to %s in %.1f s", a.program_id, b.program_id, target, seconds)
    return DiffResult(
        target,
        a.program_id,
        b.program_id,
        a.path,
        b.path,
        counts,
        tables["tokens.parquet"],
        vectors,
        record,
        files,
        seconds,
    )


# --- the printed summary ----------------------------------------------------------------------------


def top_changed(tokens: pa.Table, k: int) -> list[dict[str, Any]]:
    """The ``k`` tokens of both programs with the most edges gained plus lost (ties by code)."""
    rows = [r for r in tokens.to_pylist() if r["status"] == "changed"]
    rows.sort(key=lambda r: (-(r["edges_gained"] + r["edges_lost"]), r["vocabulary"], r["code"]))
    return rows[:k]


def _n(x: int) -> str:
    return f"{x:,}"


def _kinds(by_kind: dict[str, int]) -> str:
    return f" ({', '.join(f'{k} {_n(v)}' for k, v in by_kind.items())})" if by_kind else ""


def _token_line(r: dict[str, Any], lead: str = "") -> str:
    return (
        f"    {lead}{r['vocabulary']}:{r['code_dotted']}  +{r['edges_gained']} -{r['edges_lost']}  "
        f"{r['title'] or ''}"
    )


def summary_lines(r: DiffResult, top: int = 10) -> list[str]:
    """What ``hrrbert diff`` prints: the counts, the ``top`` most changed tokens (and, with a model, the
    ``top`` lowest cosines), and where the tables went."""
    c = r.counts
    t, e, a, rel, mp = c["tokens"], c["edges"], c["atoms"], c["relations"], c["mappings"]
    by_rel = ", ".join(
        f"{k} +{_n(v['gained'])}/-{_n(v['lost'])}" for k, v in list(c["edges_by_relation"].items())[:6]
    )
    lines = [
        f"diff of program {r.old_id} (OLD, {r.old_path}) and {r.new_id} (NEW, {r.new_path})",
        f"  tokens: {_n(t['old'])} -> {_n(t['new'])}: {_n(t.get('added', 0))} added, "
        f"{_n(t.get('removed', 0))} removed, {_n(t.get('changed', 0))} changed, "
        f"{_n(t.get('unchanged', 0))} unchanged",
        f"  edges: {_n(e['old'])} -> {_n(e['new'])}: {_n(e['gained'])} gained, {_n(e['lost'])} lost "
        f"({_n(e['gained_on_shared_tokens'])} and {_n(e['lost_on_shared_tokens'])} on tokens in both)",
        f"    by relation: {by_rel or 'none'}",
        f"  atoms: {_n(a['old'])} -> {_n(a['new'])}: "
        f"{_n(a.get('added', 0))} added{_kinds(a['added_by_kind'])}, "
        f"{_n(a.get('removed', 0))} removed{_kinds(a['removed_by_kind'])}, "
        f"{_n(a.get('relabelled', 0))} relabelled",
        f"  relations: {_n(rel['old'])} -> {_n(rel['new'])}: {_n(rel.get('added', 0))} added, "
        f"{_n(rel.get('removed', 0))} removed, {_n(rel.get('relabelled', 0))} relabelled",
        f"  mappings: {_n(mp.get('changed', 0))} codes in both changed ("
        + ", ".join(f"{f} {_n(mp[f])}" for f in MAPPING_FIELDS)
        + f"); {_n(mp.get('added', 0))} codes added, "
        f"{_n(mp.get('removed', 0))} removed",
    ]
    most = top_changed(r.tokens, top)
    if most:
        lines.append(f"  most changed tokens (edges gained/lost), top {len(most)}:")
        lines += [_token_line(x) for x in most]
    if r.vectors is not None and r.model is not None:
        lines += _vector_lines(r, top)
    lines.append(f"  wrote {r.out}: {', '.join(r.files)} ({r.seconds:.1f} s)")
    return lines


def _vector_lines(r: DiffResult, top: int) -> list[str]:
    m, v = r.model, r.model["counts"]
    other = "OLD" if m["trained_on"] == "new" else "NEW"

    def f(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4f}"

    lines = [
        f"  vectors of model {m['path']} (mode {m['mode']}, trained on {m['trained_on'].upper()}; "
        f"{other}'s new atoms and relations set to zero): {_n(v['tokens'])} tokens in both, "
        f"cosine mean {f(v['mean_cosine'])}, "
        f"median {f(v['median_cosine'])}, min {f(v['min_cosine'])}; {_n(v['below_0_99'])} below 0.99, "
        f"{_n(v['below_0_9'])} below 0.9, {_n(v['zero_vector'])} with a zero vector",
        f"  lowest cosine, top {min(top, r.vectors.num_rows)}:",
    ]
    for x in r.vectors.slice(0, top).to_pylist():
        cos = "zero vector" if x["cosine"] is None else f"{x['cosine']:.4f}"
        lines.append(_token_line(x, f"{cos}  "))
    return lines
