"""``prepare``: EHR files + a compiled program -> a tokenized dataset (format 1). The Python API under
``hrrbert prepare``.

    prepare(mimic="mimic-iv-2.0/", program="artifacts/programs/snomed/ab12...")

Each source gives one dataset ``<out>/<name>/<dataset_id>/``; identical inputs, program and options
give the same id, and preparing again is a no-op (nothing is read). The sources are those of the reader
registry (:data:`pipelines.data.readers.READERS`), the options a
:class:`~pipelines.data.config.PrepareConfig`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ontology_compiler.api import dotless, safe_component, sha256_file
from pipelines.data.readers import READERS, get_reader, options_text
from pipelines.data.readers.common import ReadResult, input_record, visit_labels
from pipelines.errors import PipelineError

from .config import PrepareConfig
from .dataset import (
    FORMAT_VERSION,
    GENERATOR_VERSION,
    MANIFEST_UNKNOWN_LIMIT,
    make_dataset_id,
    patients_table,
    read_dataset_manifest,
    same_or_raise,
    write_dataset,
)
from .splits import (
    N_SPECIAL,
    SPLITS,
    SplitOptions,
    assign_splits,
    choose_rood,
    code_counts,
    rood_masks,
    unseen_target,
)
from .tokenize import Tokenized, resolve_snomed, tokenize

log = logging.getLogger(__name__)

INT16_MAX = int(np.iinfo(np.int16).max)  # segment_ids are int16 (dataset format 1)


class EmptyDatasetError(PipelineError):
    """No patient would be left in the dataset; nothing is written."""


@dataclass
class PrepareResult:
    """Where a dataset is and what it holds."""

    path: Path
    dataset_id: str
    written: bool  # False when an identical dataset already existed
    manifest: dict = field(repr=False)


def prepare_source(
    kind: str,
    path: str | Path,
    program: str | Path,
    config: PrepareConfig | None = None,
    *,
    label: str | None = None,
    splits: SplitOptions | None = None,
    threads: int | None = None,
    source_options: dict | None = None,
    **given,
) -> PrepareResult:
    """Read one source (a reader's name: ``mimic-iv``, ``eicu``, ``meds``, ``omop``), tokenize it against
    ``program``, split, write.

    The options: ``config``, or its fields as keywords (``given``: ``out``, ``name``, ``max_len``, ...,
    each replacing the config's). ``hold_out``: a Parquet or CSV file with columns ``vocabulary`` and
    ``code`` listing the codes to hold out (the ROOD split) instead of choosing them
    (:func:`pipelines.data.splits.choose_rood`); it is hashed into the dataset id. ``source_options``: the
    reader's own options by name (OMOP: ``codes``, ``schema``, ``vocabulary``; the declaration's
    :class:`~pipelines.data.readers.ReaderOption` s), passed to its reader; all but the folders go into
    the dataset id as ``options.reader`` (a reader without options has no such key).
    """
    from ontology_compiler.api import verify_program

    t0 = time.perf_counter()
    reader = get_reader(kind)
    try:
        ropts = reader.source_options(source_options)
    except ValueError as e:
        raise PipelineError(str(e)) from e
    c = replace(config or PrepareConfig(), **given)
    out, name, hold_out = c.out, c.name, c.hold_out
    max_len, max_visits, unknown = c.max_len, c.max_visits, c.unknown
    _check_lengths(max_len, max_visits)
    path, program = Path(path), Path(program)
    pmanifest = verify_program(program)
    splits = splits or SplitOptions()
    # the dataset's id: the input files' hashes, the program and the options
    root, files = reader.inputs(path, **ropts)
    inputs = [input_record(root, f) for f in files]
    held_record = _hold_out_record(Path(hold_out)) if hold_out is not None else None
    if held_record is not None:  # hashed by content, wherever the file lies
        inputs.append({"path": "<hold_out>", "sha256": held_record["sha256"]})
    options = {"max_len": max_len, "max_visits": max_visits, "unknown": unknown, "splits": splits.to_dict()}
    if reader.options:  # only a reader with options of its own has the key (the other ids stay as they were)
        options["reader"] = reader.id_options(ropts)
    dataset_id = make_dataset_id(pmanifest["program_id"], inputs, options)
    name = safe_component(name or f"{label or kind}-{path.resolve().name}", "name")
    final = Path(out) / name / dataset_id
    if final.exists():
        same_or_raise(final, dataset_id)
        log.info("%s: dataset %s already prepared", final, dataset_id)
        return PrepareResult(final, dataset_id, False, read_dataset_manifest(final))
    # read, tokenize, split
    data = reader.part("read")(path, threads=threads, **ropts)
    t_read = time.perf_counter()
    _refuse_empty(data, path)
    concepts = pq.read_table(program / "concepts.parquet")
    events, snomed_counts = resolve_snomed(data.events, concepts)
    tok = tokenize(events, concepts, max_len=max_len, max_visits=max_visits, unknown=unknown)
    tok.counts.update(snomed_counts)
    _refuse_unknown(tok, path, program)
    # the labels of the sequence's last visit (the one last_visit_start points at)
    labels = visit_labels(
        events, data.visits, pa.table({"subject_id": tok.subject_id, "visit_index": tok.last_visit_index})
    )
    t_tok = time.perf_counter()
    held = _read_hold_out(Path(hold_out), concepts, program) if hold_out is not None else None
    split = _split(tok, labels, concepts.num_rows, splits, held)
    tables = _tables(tok, labels, concepts, split)
    manifest = {
        "format_version": FORMAT_VERSION,
        "dataset_id": dataset_id,
        "name": name,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "generator": GENERATOR_VERSION,
        "program_id": pmanifest["program_id"],
        "program": {"path": str(program), "release": pmanifest.get("release")},
        "source": _source(data.source, label or kind, kind, held_record),
        "options": {
            **options,
            "sizes_used": split.sizes,
            "log_frequency": "ln(count / pretraining code tokens); unseen: ln(0.5 / total)",
        },
        "counts": _counts(data, tok, tables, split, concepts.num_rows, held, held_record),
        "unknown_codes": tok.unknown.slice(0, MANIFEST_UNKNOWN_LIMIT).to_pylist(),
        "unknown_codes_listed": min(tok.unknown.num_rows, MANIFEST_UNKNOWN_LIMIT),
        "rood_codes": tables["rood_codes"].to_pylist(),
        "timings_s": {"read": round(t_read - t0, 2), "tokenize": round(t_tok - t_read, 2)},
    }
    written = write_dataset(final, tables, manifest)
    log.info(
        "%s: %d patients, %d tokens in %.1f s",
        final,
        len(tok.subject_id),
        len(tok.input_ids),
        time.perf_counter() - t0,
    )
    return PrepareResult(final, dataset_id, written, manifest)


def _refuse_empty(data: ReadResult, path: Path) -> None:
    if data.events.num_rows == 0:
        found = ", ".join(f"{k} {v}" for k, v in _nonzero(data.counts).items()) or "nothing"
        raise EmptyDatasetError(
            f"{path}: no patient has a usable diagnosis code, so there is no dataset to write (nothing was "
            f"written); the reader found: {found}"
        )


def _refuse_unknown(tok: Tokenized, path: Path, program: Path) -> None:
    if len(tok.subject_id) == 0:
        top = ", ".join(f"{u['vocabulary']} {u['code']}" for u in tok.unknown.slice(0, 5).to_pylist())
        raise EmptyDatasetError(
            f"{path}: none of the {tok.counts['code_rows']} code rows is a code of program {program} "
            f"(most frequent: {top}), so there is no dataset to write (nothing was written); was the program "
            "compiled for this cohort's ICD versions and codes?"
        )


def _check_lengths(max_len: int, max_visits: int) -> None:
    if not 2 <= max_len <= INT16_MAX or not 1 <= max_visits <= INT16_MAX:
        raise ValueError(
            f"max_len must be in [2, {INT16_MAX}] and max_visits in [1, {INT16_MAX}] "
            "(segment ids are int16), "
            f"got {max_len}, {max_visits}"
        )


@dataclass
class _HoldOut:
    """The codes of a hold-out file, resolved against the program."""

    path: Path
    concept_ids: np.ndarray  # (K,) int32, distinct, sorted
    rows: int  # rows of the file
    unresolved: int  # rows whose (vocabulary, code) is no code of the program


@dataclass
class _Split:
    """The split step's results: the rOOD codes held out, the patients' splits and the code counts."""

    held: np.ndarray  # concept ids of the rOOD codes
    rood_unseen: np.ndarray  # per patient: at least half of its distinct codes are held out
    selection: str  # how the held-out codes were chosen: "hold_out_file", "chosen" or "off"
    unseen_target: int | None  # the rood_unseen patients choose_rood aimed at
    split: np.ndarray  # per patient: index into SPLITS
    disease: np.ndarray  # per patient: in the disease task
    sizes: dict  # the split sizes used
    count: np.ndarray  # per concept: tokens in the pretraining splits
    count_train: np.ndarray
    log_frequency: np.ndarray


def _split(
    tok: Tokenized, labels: pa.Table, n_concepts: int, splits: SplitOptions, hold_out: _HoldOut | None
) -> _Split:
    n = len(tok.subject_id)
    if hold_out is not None:
        held = hold_out.concept_ids
        rood, rood_unseen = rood_masks(tok.pair_patient, tok.pair_concept, n, held)
        selection, target = "hold_out_file", None
    else:
        held, rood, rood_unseen = choose_rood(
            tok.pair_patient, tok.pair_concept, n, n_concepts, splits, n_visits=tok.n_visits
        )
        off = splits.rood_codes <= 0
        selection, target = ("off", None) if off else ("chosen", unseen_target(splits, n))
    given = _given_split(labels, tok.subject_id)
    split, disease, sizes = assign_splits(tok.n_visits, rood, given, splits)
    count, count_train, logf = code_counts(tok.offsets, tok.input_ids, split, n_concepts)
    return _Split(held, rood_unseen, selection, target, split, disease, sizes, count, count_train, logf)


HOLD_OUT_COLUMNS = ("vocabulary", "code")


def _hold_out_record(path: Path) -> dict:
    """The hold-out file's manifest record (its sha256 goes into the dataset id)."""
    if not path.is_file():
        raise PipelineError(
            f"{path}: hold-out file not found (expected a Parquet or CSV file with columns vocabulary, code)"
        )
    return {
        "role": "hold_out",
        "path": str(path.resolve()),
        "sha256": sha256_file(path),
        "bytes": path.stat().st_size,
    }


def _read_hold_out(path: Path, concepts: pa.Table, program: Path) -> _HoldOut:
    """The program's concept ids of the codes listed in ``path`` (Parquet, else CSV; columns ``vocabulary``
    and ``code``, dotted or dotless). Codes the program does not know are counted and logged; none known
    is an error."""
    expected = (
        "a Parquet or CSV file with columns vocabulary (ICD10CM or ICD9CM) and code (e.g. E119 or E11.9)"
    )
    try:
        if path.suffix.lower() == ".parquet":
            table = pq.read_table(path)
        else:
            from pyarrow import csv

            types = dict.fromkeys(HOLD_OUT_COLUMNS, pa.string())  # keep ICD-9 leading zeros
            table = csv.read_csv(path, convert_options=csv.ConvertOptions(column_types=types))
    except (pa.ArrowException, OSError) as e:
        raise PipelineError(f"{path}: cannot read the hold-out file ({e}); expected {expected}") from e
    missing = [c for c in HOLD_OUT_COLUMNS if c not in table.column_names]
    if missing:
        raise PipelineError(
            f"{path}: hold-out file lacks column(s) {', '.join(missing)} "
            f"(has {', '.join(table.column_names)}); "
            f"expected {expected}"
        )
    voc = pc.utf8_upper(pc.replace_substring_regex(table["vocabulary"].cast(pa.string()), r"[\s_-]", ""))
    code = dotless(table["code"].cast(pa.string()))
    known = zip(concepts["vocabulary"].to_pylist(), concepts["code"].to_pylist(), strict=True)
    keys = dict(zip(known, concepts["concept_id"].to_pylist(), strict=True))
    listed = list(zip(voc.to_pylist(), code.to_pylist(), strict=True))
    found = [keys.get(k) for k in listed]
    found = [i if i is not None and i >= N_SPECIAL else None for i in found]  # never a special token
    bad = [f"{v} {c}" for (v, c), i in zip(listed, found, strict=True) if i is None]
    ids = np.unique(np.array([i for i in found if i is not None], dtype=np.int32))
    if len(ids) == 0:
        raise PipelineError(
            f"{path}: none of the {table.num_rows} codes to hold out is a code of program {program}"
            + (f" (e.g. {'; '.join(bad[:5])})" if bad else "")
            + f"; expected {expected}"
        )
    if bad:
        log.warning(
            "%s: %d of %d codes to hold out are not codes of program %s (e.g. %s); they are ignored",
            path,
            len(bad),
            table.num_rows,
            program,
            "; ".join(bad[:5]),
        )
    return _HoldOut(path, ids, table.num_rows, len(bad))


def _source(source: dict, kind: str, reader: str, hold_out: dict | None) -> dict:
    """The manifest's ``source``: the reader's, with the hold-out file among the inputs."""
    out = {**source, "kind": kind, "reader": reader}
    if hold_out is not None:
        out["inputs"] = [*out.get("inputs", []), hold_out]
    return out


def _tables(tok: Tokenized, labels: pa.Table, concepts: pa.Table, s: _Split) -> dict[str, pa.Table]:
    """The dataset's four tables (``docs/dataset-format.md``)."""
    return {
        "patients": patients_table(tok, labels, s.split, s.disease, s.rood_unseen),
        "code_counts": pa.table(
            {
                "concept_id": concepts["concept_id"],
                "count": pa.array(s.count),
                "count_train": pa.array(s.count_train),
                "log_frequency": pa.array(s.log_frequency),
            }
        ),
        "rood_codes": _rood_table(s.held, concepts, tok.pair_concept),
        "unknown_codes": tok.unknown,
    }


def _counts(
    data: ReadResult,
    tok: Tokenized,
    tables: dict[str, pa.Table],
    s: _Split,
    n_concepts: int,
    hold_out: _HoldOut | None,
    hold_out_record: dict | None,
) -> dict:
    """The manifest's ``counts``: patients kept and dropped, codes, and what the reader counted."""
    seen = s.count > 0
    logf = s.log_frequency
    return {
        "patients": {
            "in_source": data.counts.get("patients_in_source"),
            "with_codes": int(pc.count_distinct(data.visits["subject_id"]).as_py()),
            "kept": len(tok.subject_id),
            "dropped": {
                "no_diagnoses": data.counts.get("dropped_no_diagnoses", 0),
                "no_known_codes": tok.counts["patients_no_known_codes"],
            },
            "by_split": {name: int((s.split == i).sum()) for i, name in enumerate(SPLITS)},
            "rood_unseen": int(s.rood_unseen.sum()),
            "mortality_6m": int(np.asarray(tables["patients"]["mortality_6m"]).sum()),
        },
        "codes": {
            **tok.counts,
            "program_concepts": n_concepts,
            "concepts_seen_in_pretraining": int(seen.sum()),
            "rood_codes": int(len(s.held)),
            "log_frequency_min": float(logf[seen].min()) if seen.any() else None,
            "log_frequency_max": float(logf[seen].max()) if seen.any() else None,
            "tokens": int(len(tok.input_ids)),
        },
        "rood": {
            "selection": s.selection,
            "held_out_codes": int(len(s.held)),
            "held_out_codes_in_cohort": int(np.isin(s.held, tok.pair_concept).sum()),
            "patients": int((s.split == SPLITS.index("rood")).sum()),
            "unseen_patients": int(s.rood_unseen.sum()),
            "unseen_target": s.unseen_target,
            "hold_out_file": hold_out_record["path"] if hold_out_record else None,
            "hold_out_sha256": hold_out_record["sha256"] if hold_out_record else None,
            "hold_out_rows": hold_out.rows if hold_out else None,
            "hold_out_unresolved": hold_out.unresolved if hold_out else None,
        },
        "reader": data.counts,
    }


def _given_split(labels: pa.Table, subject_id: np.ndarray) -> np.ndarray | None:
    g = labels["given_split"]
    if g.null_count == len(g):
        return None
    pos = np.searchsorted(labels["subject_id"].to_numpy(), subject_id)
    return np.array(g.take(pa.array(pos)).to_pylist(), dtype=object)


def _rood_table(held: np.ndarray, concepts: pa.Table, pair_concept: np.ndarray) -> pa.Table:
    per_code = np.bincount(pair_concept, minlength=concepts.num_rows)
    rows = concepts.take(pa.array(held.astype(np.int64)))
    return pa.table(
        {
            "concept_id": pa.array(held, pa.int32()),
            "vocabulary": rows["vocabulary"],
            "code": rows["code"],
            "title": rows["title"],
            "patients": pa.array(per_code[held].astype(np.int64)),
        }
    )


def prepare(
    *,
    program: str | Path | None = None,
    config: PrepareConfig | None = None,
    seed: int = 0,
    splits: SplitOptions | None = None,
    threads: int | None = None,
    **given: str | Path | None,
) -> list[PrepareResult]:
    """Prepare one dataset per source given (the demo's datasets:
    :func:`pipelines.demo.prepare.prepare_demo`).

    ``given``: a source folder per reader option (``mimic=``, ``eicu=``, ``meds=``, ``omop=``:
    :data:`~pipelines.data.readers.READERS`, prepared in that order; None: not given), the readers' own
    options (``omop_codes=``, ``omop_schema=``, ``omop_vocabulary=``; None: the default) and the fields of
    :class:`~pipelines.data.config.PrepareConfig` that replace ``config``'s (``out=``, ``max_len=``, ...).
    """
    sources = []
    for r in READERS.values():
        path = given.pop(r.param, None)
        opts = {o.name: given.pop(r.option_param(o)) for o in r.options if r.option_param(o) in given}
        chosen = [r.option_flag(o) for o in r.options if opts.get(o.name) not in (None, o.default)]
        if path is None and chosen:
            raise PipelineError(f"{', '.join(chosen)} given without {r.option}")
        if path is not None:
            sources.append((r.name, path, opts))
    config = replace(config or PrepareConfig(), **given)
    if not sources:
        raise PipelineError(f"nothing to prepare: give {options_text()} (or --demo)")
    if program is None:
        raise PipelineError("--program is required (a compiled program folder, see compile-ontology)")
    if config.name is not None and len(sources) > 1:
        raise PipelineError("--name names one dataset; give one source at a time with --name")
    splits = splits or SplitOptions(seed=seed)
    return [
        prepare_source(k, p, program, config, splits=splits, threads=threads, source_options=o)
        for k, p, o in sources
    ]


def _nonzero(counts: dict) -> dict:
    """The non-zero numbers of ``counts`` (nested dicts flattened as ``outer.inner``; lists and text
    left out)."""
    out = {}
    for k, v in counts.items():
        if isinstance(v, dict):
            out.update({f"{k}.{k2}": v2 for k2, v2 in _nonzero(v).items()})
        elif isinstance(v, int | float) and not isinstance(v, bool) and v:
            out[k] = v
    return out


# counts the first lines of the summary show; every other non-zero count follows them
_SHOWN_CODES = ("code_rows", "tokens", "concepts_seen_in_pretraining", "program_concepts",
                "log_frequency_min", "log_frequency_max", "unknown_code_rows", "unknown_code_share",
                "unknown_codes_distinct")  # fmt: skip


def describe(results: list[PrepareResult]) -> str:
    """What ``hrrbert prepare`` prints: per dataset its folder, patients, splits, codes and unknown codes,
    then every other count that is not zero and each finding of the reader with its examples."""
    blocks = []
    for r in results:
        c = r.manifest["counts"]
        p, codes = c["patients"], c["codes"]
        reader = dict(c.get("reader") or {})
        examples = reader.pop("examples", {}) or {}
        lf = (codes["log_frequency_min"], codes["log_frequency_max"])
        lines = [
            f"dataset   {r.path}{'' if r.written else ' (already prepared)'}",
            f"patients  {p['kept']} kept of {p['in_source']}; dropped {p['dropped']}",
            f"splits    {', '.join(f'{k} {v}' for k, v in p['by_split'].items())}",
            f"codes     {codes['tokens']} tokens from {codes.get('code_rows', 0)} code rows, "
            f"{codes['concepts_seen_in_pretraining']} of {codes['program_concepts']} "
            "concepts seen in pretraining"
            + (f", log frequency {lf[0]:.2f} to {lf[1]:.2f}" if None not in lf else ""),
            f"unknown   {codes['unknown_code_rows']} code rows ({100 * codes['unknown_code_share']:.2f} %), "
            f"{codes['unknown_codes_distinct']} distinct codes not in the program",
        ]
        if c.get("rood"):
            lines.append(_describe_rood(c["rood"]))
        other = _nonzero({k: v for k, v in codes.items() if k not in _SHOWN_CODES})
        other |= _nonzero({k: p.get(k) for k in ("rood_unseen", "mortality_6m")})
        if other:
            lines.append(f"counts    {', '.join(f'{k} {v}' for k, v in other.items())}")
        read = {k: v for k, v in _nonzero(reader).items() if k not in examples}
        if read:
            lines.append(f"read      {', '.join(f'{k} {v}' for k, v in read.items())}")
        for key, ex in examples.items():
            lines.append(f"warning   {key} {reader.get(key)}: e.g. {'; '.join(ex)}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _describe_rood(r: dict) -> str:
    """The summary's ``rood`` line: the held-out codes, where they came from, the patients they hold out."""
    if r["selection"] == "off":
        return "rood      off (no code held out)"
    where = (
        f"from {r['hold_out_file']} "
        f"({r['hold_out_unresolved']} of {r['hold_out_rows']} rows not in the program)"
        if r["selection"] == "hold_out_file"
        else f"chosen (target {r['unseen_target']} unseen patients)"
    )
    return (
        f"rood      {r['held_out_codes']} held-out codes {where}, "
        f"{r['held_out_codes_in_cohort']} in the cohort; "
        f"{r['patients']} patients, {r['unseen_patients']} of them with mostly held-out codes (rood_unseen)"
    )
