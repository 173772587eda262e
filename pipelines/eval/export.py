"""Export code embeddings (``hrrbert export-embeddings``): Parquet, and TensorBoard projector files.

The source is a saved model (an ``HRRBert`` folder, or the pretraining run holding it in ``model/``)
or a program. A model exports its input token embeddings (``HRRBert.token_matrix()``: the HRR
composition of its learnt atoms and relations, plus the frequency encoding or free table of its mode).
A program has no learnt vectors; it exports the **untrained** ``base`` HRR composition: atom and
relation vectors drawn N(0, 0.02) from a CPU generator seeded with ``seed`` (the same seed gives the
same vectors on any device), composed by circular convolution and scaled to unit length. Random
vectors are nearly orthogonal, so two codes are as close as the (relation, atom) pairs they share: the
picture is the ontology's, before any training.

A model needs its program: ``program`` when given, else the ``program/`` copy in the model folder (or
in the run folder). Rows: every code of the program but the special tokens (``vocabularies`` selects
vocabularies; name ``SPECIAL`` to include the special tokens). With a tokenized ``dataset`` (made with
the same program) each code gets its pretraining ``count`` and ``log_frequency`` from
``code_counts.parquet``; without one both are null.

The export folder (``out``) holds:

* ``embeddings.parquet``: one row per code: ``concept_id``, ``vocabulary``, ``code`` (dotless, the
  join key), ``code_dotted``, ``title``, ``chapter``, ``count``, ``log_frequency``, ``vector_group`` (the
  ``concept_id`` of the first code whose vector is bit-for-bit the same: codes with the same edges, e.g.
  several codes mapped to one concept, share a vector, and a neighbour list should skip its query's own
  group rather than list ties), ``vector`` (``fixed_size_list<float>[D]``); Parquet metadata
  ``program_id``, ``source_kind``, ``mode``;
* ``export.json``: what was exported, from what, how;
* with ``projector``, the TensorBoard projector files: ``vectors.tsv`` (one row per code, D tab-separated
  floats, no header), ``metadata.tsv`` (a header, then one row per code in the same order: ``code``
  (dotted), ``vocabulary``, ``title``, ``chapter``, ``frequency`` (the count), ``log_frequency``,
  ``vector_group``; empty
  when unknown; a backslash, tab, newline or carriage return in a value is written ``\\\\``, ``\\t``,
  ``\\n``, ``\\r``) and ``projector_config.pbtxt`` pointing at both
  (``tensorboard --logdir OUT``, Projector tab; or load the two TSVs at projector.tensorflow.org).

* with ``word2vec``, ``vectors.word2vec.txt``: the word2vec text format (a line ``<rows> <D>``, then per
  code its key ``VOCABULARY/dotted code``, e.g. ``ICD10CM/E11.9``, and D floats, space-separated), which
  gensim reads with ``KeyedVectors.load_word2vec_format(path, binary=False)`` (``vectors.tsv`` has no
  keys: it is the projector's, read with ``metadata.tsv``).

It is written into a temporary folder beside ``out`` and renamed into place. An existing ``out`` is
refused unless it is an empty folder, or ``force`` is given and it holds an earlier export (its
``export.json``); anything else is never replaced.

Light on import (torch and pyarrow are imported inside the functions), so the CLI can read
:class:`ExportConfig`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipelines.data.folders import check_out, folder_written
from pipelines.errors import InputFileError, PipelineError

__all__ = [
    "ExportConfig",
    "ExportResult",
    "export_embeddings",
    "summary_lines",
    "escape_tsv",
    "EMBEDDINGS_FILE",
    "PROJECTOR_FILES",
]

log = logging.getLogger(__name__)

EMBEDDINGS_FILE = "embeddings.parquet"
RECORD_FILE = "export.json"
VECTORS_FILE = "vectors.tsv"
METADATA_FILE = "metadata.tsv"
PROJECTOR_CONFIG = "projector_config.pbtxt"
PROJECTOR_FILES = (VECTORS_FILE, METADATA_FILE, PROJECTOR_CONFIG)
WORD2VEC_FILE = "vectors.word2vec.txt"  # gensim's KeyedVectors.load_word2vec_format(path, binary=False)
METADATA_COLUMNS = ("code", "vocabulary", "title", "chapter", "frequency", "log_frequency", "vector_group")
PROGRAM_DIM = 256  # default dimension of a program's untrained composition
# the largest --dim of a program's export (a bert-base is 768 wide): beyond it the atom and concept
# tables would take gigabytes; refused before anything is allocated
MAX_PROGRAM_DIM = 1 << 16
INIT_STD = 0.02  # the atoms' and relations' N(0, std) (hrr_kernel's HRREmbedding initialisation)
SPECIAL = "SPECIAL"
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


@dataclass
class ExportConfig:
    """Options of an embedding export (saved in ``export.json``)."""

    source: str  # a saved model folder (or its pretraining run), or a program or release folder
    out: str  # the export folder to create
    program: str | None = field(
        default=None,
        metadata={"help": "the model's program (default: the program/ copy in the model folder)"},
    )
    dataset: str | None = field(
        default=None,
        metadata={"help": "tokenized dataset whose code_counts.parquet gives count and log_frequency"},
    )
    projector: bool = field(
        default=False,
        metadata={"help": "also write the TensorBoard projector files (vectors and metadata TSV)"},
    )
    word2vec: bool = field(
        default=False,
        metadata={
            "help": "also write vectors.word2vec.txt, keyed VOCABULARY/CODE (gensim: "
            "KeyedVectors.load_word2vec_format(path, binary=False))"
        },
    )
    vocabularies: tuple[str, ...] = field(
        default=(), metadata={"help": "export only these vocabularies (default: all but SPECIAL)"}
    )
    dim: int | None = field(
        default=None,
        metadata={"help": "program input: dimension of the untrained base composition (default 256)"},
    )
    seed: int = field(
        default=0, metadata={"help": "program input: seed of the untrained atom and relation vectors"}
    )
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda"})


@dataclass
class ExportResult:
    """What :func:`export_embeddings` wrote."""

    out: Path
    source_kind: str  # "model" or "program"
    program_id: str
    program_path: Path
    model: Path | None
    mode: str  # the model's embedding mode, or "base (untrained)"
    dim: int
    rows: int
    vocabularies: dict[str, int]  # vocabulary -> rows exported
    dataset_id: str | None
    files: list[str] = field(default_factory=list)
    duplicate_rows: int = 0  # rows whose vector exactly equals an earlier row's (same vector_group)
    vector_groups: int = 0  # distinct vectors


def escape_tsv(value: object) -> str:
    """A metadata value for a TSV cell: None -> ``""``; backslash, tab, newline, CR escaped as ``\\\\``,
    ``\\t``, ``\\n``, ``\\r`` (the projector splits rows on newlines and cells on tabs, with no quoting)."""
    return "" if value is None else str(value).translate(_ESCAPES)


def _is_model(src: Path) -> bool:
    return (src / "config.json").is_file() or (src / "model" / "config.json").is_file()


def _model_program(src: Path, mdir: Path, program: str | None, meta: dict[str, Any]) -> Path:
    """The program folder of a model: ``program``, else the model's (or its run's) ``program/`` copy."""
    if program is not None:
        return Path(program)
    for cand in (mdir / "program", src / "program"):
        if cand.is_dir():
            log.info("using the program copy %s of the model", cand)
            return cand
    raise PipelineError(
        f"{mdir}: the model was trained with program {meta.get('program_id')!r} and carries no "
        "program/ copy; pass --program with that program's folder"
    )


def _vocabulary_rows(program, wanted: tuple[str, ...]) -> list[int]:
    """The rows to export, in concept-id order: ``wanted`` vocabularies, else all but ``SPECIAL``."""
    have = program.vocabularies
    if wanted:
        by_upper = {v.upper(): v for v in have}
        unknown = [v for v in wanted if v.strip().upper() not in by_upper]
        if unknown:
            raise PipelineError(
                f"program {program.program_id} has no vocabulary {unknown}; its vocabularies are {have}"
            )
        keep = {by_upper[v.strip().upper()] for v in wanted}
    else:
        keep = {v for v in have if v != SPECIAL}
    rows = [i for i, v in enumerate(program.concept_vocabularies) if v in keep]
    if not rows:
        raise PipelineError(f"program {program.program_id} has no codes in {sorted(keep)} to export")
    return rows


def _frequencies(dataset: Path, program) -> tuple[str, list[int | None], list[float | None]]:
    """``(dataset_id, count, log_frequency)`` per concept (None where ``code_counts.parquet`` has no row)."""
    import pyarrow.parquet as pq

    from pipelines.data.dataset import read_dataset_manifest
    from pipelines.data.sequences import CODE_COUNTS_FILE

    manifest = read_dataset_manifest(dataset)
    if manifest.get("program_id") != program.program_id:
        raise PipelineError(
            f"{dataset}: dataset was tokenized against program {manifest.get('program_id')!r}, but the "
            f"embeddings are of program {program.program_id!r}; pass a dataset prepared with that program"
        )
    path = dataset / CODE_COUNTS_FILE
    if not path.is_file():
        raise InputFileError(path, "missing; the export reads code frequencies from it")
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:
        raise InputFileError(path, f"not a readable Parquet file ({e})") from e
    missing = [c for c in ("concept_id", "count", "log_frequency") if c not in table.column_names]
    if missing:
        raise InputFileError(
            path, f"missing column(s) {missing}", expected="concept_id, count, log_frequency"
        )
    count: list[int | None] = [None] * program.n_concepts
    logf: list[float | None] = [None] * program.n_concepts
    for cid, n, lf in zip(
        *(table.column(c).to_pylist() for c in ("concept_id", "count", "log_frequency")), strict=True
    ):
        if cid is None or not 0 <= cid < program.n_concepts:
            raise InputFileError(
                path, f"concept_id {cid} out of range", expected=f"[0, {program.n_concepts - 1}]"
            )
        count[cid], logf[cid] = n, lf
    return str(manifest.get("dataset_id", "")), count, logf


def _model_vectors(cfg: ExportConfig, src: Path, device):
    """``(program, model folder, mode, (N, D) float32 numpy)`` of a saved model."""
    import torch

    from hrr_kernel import load_program
    from model import HRRBert
    from pipelines.train.finetune import model_dir

    if cfg.dim is not None:
        raise PipelineError(f"--dim is for a program; the model {src} has its own dimension")
    mdir = model_dir(src)
    meta = HRRBert.read_config(mdir)
    program = load_program(_model_program(src, mdir, cfg.program, meta), device=device)
    model = HRRBert.from_pretrained(mdir, program)  # checks the program id
    model.eval()
    with torch.no_grad():
        matrix = model.token_matrix().detach().float().cpu().numpy()
    return program, mdir, model.config.mode, matrix


def _program_vectors(cfg: ExportConfig, src: Path, device):
    """``(program, None, mode, (N, D) float32 numpy)``: the untrained, seeded, unit-length base
    composition."""
    import torch

    from hrr_kernel import HRREmbedding, load_program

    if cfg.program is not None:
        raise PipelineError(f"{src} is a program; --program is for a model's program")
    dim = PROGRAM_DIM if cfg.dim is None else cfg.dim
    if not 1 <= dim <= MAX_PROGRAM_DIM:
        raise PipelineError(f"--dim must be between 1 and {MAX_PROGRAM_DIM}, got {dim}")
    program = load_program(src, device=device)
    with torch.random.fork_rng(devices=[]):
        emb = HRREmbedding(program, dim, "base", normalize=True)
    g = torch.Generator().manual_seed(cfg.seed)
    with torch.no_grad():
        for p in (emb.atoms, emb.relations):
            p.copy_(torch.randn(tuple(p.shape), generator=g, dtype=p.dtype) * INIT_STD)
        emb.eval()
        matrix = emb.matrix().detach().float().cpu().numpy()
    return program, None, f"base (untrained, seed {cfg.seed})", matrix


def _embeddings_table(program, rows: list[int], matrix, count, logf, meta: dict[str, str]):
    import numpy as np
    import pyarrow as pa

    vec = np.ascontiguousarray(matrix[rows], dtype=np.float32)  # (n, D)
    d = vec.shape[1]
    table = pa.table(
        {
            "concept_id": pa.array(rows, pa.int32()),
            "vocabulary": pa.array([program.concept_vocabularies[i] for i in rows], pa.string()),
            "code": pa.array([program.concept_codes[i] for i in rows], pa.string()),
            "code_dotted": pa.array([program.concept_codes_dotted[i] for i in rows], pa.string()),
            "title": pa.array([program.concept_titles[i] for i in rows], pa.string()),
            "chapter": pa.array([program.concept_chapters[i] for i in rows], pa.int8()),
            "count": pa.array([count[i] for i in rows], pa.int64()),
            "log_frequency": pa.array([logf[i] for i in rows], pa.float64()),
            "vector_group": pa.array(_vector_groups(vec, rows), pa.int32()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), d),
        }
    )
    return table.replace_schema_metadata(meta), vec


def _vector_groups(vec, rows: list[int]) -> list[int]:
    """(n,) per row the ``concept_id`` of the first row whose vector is bit-for-bit the same (itself when
    none before it is)."""
    import numpy as np

    if not len(rows):
        return []
    keys = np.ascontiguousarray(vec).view(np.dtype((np.void, vec.dtype.itemsize * vec.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return np.asarray(rows, np.int64)[first[inverse.ravel()]].tolist()


def _w2v_keys(table) -> list[str]:
    """Each row's word2vec key ``VOCABULARY/dotted code`` (the dotless code where there is no dotted one);
    an error naming the first one that holds whitespace or repeats an earlier one (the format separates
    fields by spaces and keys a row by it)."""
    cols = [table.column(k).to_pylist() for k in ("vocabulary", "code_dotted", "code")]
    keys = [f"{v}/{d or c}" for v, d, c in zip(*cols, strict=True)]
    seen: set[str] = set()
    for key in keys:
        if any(ch.isspace() for ch in key) or key in seen:
            why = "holds whitespace" if key not in seen else "is not unique"
            raise PipelineError(
                f"program {table.schema.metadata[b'program_id'].decode()}: the word2vec key {key!r} {why}; "
                "export without --word2vec and read embeddings.parquet instead"
            )
        seen.add(key)
    return keys


def _write_word2vec(path: Path, keys: list[str], vec) -> None:
    """The word2vec text format: a line ``<rows> <D>``, then per row its key and D floats, space-separated
    (``repr`` of each float32, so it reads back exactly)."""
    import numpy as np

    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"{vec.shape[0]} {vec.shape[1]}\n")
        for key, row in zip(keys, np.asarray(vec, np.float32), strict=True):
            f.write(key + " " + " ".join(map(repr, row.tolist())) + "\n")


def _write_projector(tmp: Path, table, vec, name: str) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    cols = pa.table({str(j): pa.array(vec[:, j]) for j in range(vec.shape[1])})
    pacsv.write_csv(
        cols,
        tmp / VECTORS_FILE,
        write_options=pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none"),
    )
    values = [
        table.column(c).to_pylist()
        for c in ("code_dotted", "vocabulary", "title", "chapter", "count", "log_frequency", "vector_group")
    ]
    with open(tmp / METADATA_FILE, "w", encoding="utf-8", newline="\n") as f:
        f.write("\t".join(METADATA_COLUMNS) + "\n")
        for row in zip(*values, strict=True):
            f.write("\t".join(escape_tsv(v) for v in row) + "\n")
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    (tmp / PROJECTOR_CONFIG).write_text(
        "embeddings {\n"
        f'  tensor_name: "{quoted}"\n'
        f'  tensor_path: "{VECTORS_FILE}"\n'
        f'  metadata_path: "{METADATA_FILE}"\n'
        f"  tensor_shape: {vec.shape[0]}\n"
        f"  tensor_shape: {vec.shape[1]}\n"
        "}\n",
        encoding="utf-8",
    )


def export_embeddings(
    config: ExportConfig | None = None, *, force: bool = False, **options: Any
) -> ExportResult:
    """Export the code vectors of a model or a program (see the module docstring) into ``out``.

    Call with an :class:`ExportConfig` or its fields as keywords. Raises :class:`PipelineError` (or an
    ``hrr_kernel`` / ``model`` error) with the path and what is wrong; nothing is left under ``out`` on
    failure.
    """
    import pyarrow.parquet as pq

    from pipelines.train.runtime import config_from, now_iso, resolve_device, write_json

    cfg = config_from(ExportConfig, config, options, "export")
    src, out = Path(cfg.source), Path(cfg.out)
    check_out(out, force, record=RECORD_FILE, what="export", option="OUT")  # before any work
    if not src.is_dir():
        raise PipelineError(f"{src}: no such folder (expected a saved model or a program)")
    dataset = Path(cfg.dataset) if cfg.dataset is not None else None
    if dataset is not None and not dataset.is_dir():
        raise PipelineError(f"{dataset}: no such dataset folder")
    device = resolve_device(cfg.device)
    kind = "model" if _is_model(src) else "program"
    vectors = _model_vectors if kind == "model" else _program_vectors
    program, mdir, mode, matrix = vectors(cfg, src, device)

    rows = _vocabulary_rows(program, tuple(cfg.vocabularies))
    dataset_id, count, logf = None, [None] * program.n_concepts, [None] * program.n_concepts
    if dataset is not None:
        dataset_id, count, logf = _frequencies(dataset, program)
    meta = {"program_id": program.program_id, "source_kind": kind, "mode": mode}
    table, vec = _embeddings_table(program, rows, matrix, count, logf, meta)
    keys = _w2v_keys(table) if cfg.word2vec else None  # checked before anything is written
    groups = len(set(table.column("vector_group").to_pylist()))
    per_vocab: dict[str, int] = {}
    for v in table.column("vocabulary").to_pylist():
        per_vocab[v] = per_vocab.get(v, 0) + 1
    result = ExportResult(
        out=out,
        source_kind=kind,
        program_id=program.program_id,
        program_path=program.path,
        model=mdir,
        mode=mode,
        dim=int(vec.shape[1]),
        rows=len(rows),
        vocabularies=per_vocab,
        dataset_id=dataset_id,
        files=[
            EMBEDDINGS_FILE,
            RECORD_FILE,
            *(PROJECTOR_FILES if cfg.projector else ()),
            *((WORD2VEC_FILE,) if cfg.word2vec else ()),
        ],
        duplicate_rows=len(rows) - groups,
        vector_groups=groups,
    )

    with folder_written(out, "export", force=force, record=RECORD_FILE, option="OUT") as tmp:
        pq.write_table(table, tmp / EMBEDDINGS_FILE, compression="zstd")
        if cfg.projector:
            name = f"model {mdir} ({mode})" if mdir is not None else f"program {program.program_id}, {mode}"
            _write_projector(tmp, table, vec, name)
        if keys is not None:
            _write_word2vec(tmp / WORD2VEC_FILE, keys, vec)
        record = {
            "kind": "embedding_export",
            **{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(result).items()},
            "config": asdict(cfg),
            "created_at": now_iso(),
        }
        write_json(tmp / RECORD_FILE, record)
    log.info("exported %d code vectors of program %s to %s", len(rows), program.program_id, out)
    return result


def summary_lines(r: ExportResult) -> list[str]:
    """What the command prints."""
    src = f"model {r.model} (mode {r.mode})" if r.model is not None else f"the {r.mode} composition"
    vocab = ", ".join(f"{v} {n}" for v, n in sorted(r.vocabularies.items()))
    lines = [
        f"exported {r.rows} code vectors ({vocab}) of {r.dim} dimensions from {src}",
        f"  program {r.program_id} ({r.program_path})",
        f"  frequencies: {'dataset ' + r.dataset_id if r.dataset_id is not None else 'none (no --dataset)'}",
        f"  wrote {r.out}: {', '.join(r.files)}",
    ]
    if r.duplicate_rows:
        lines.append(
            f"  {r.duplicate_rows} of {r.rows} vectors exactly equal an earlier code's ({r.vector_groups} "
            "distinct; codes with the same edges, e.g. ones mapped to one concept): column vector_group "
            "marks them, so a neighbour list can skip its query's own group instead of listing ties"
        )
    if PROJECTOR_CONFIG in r.files:
        lines.append(
            f"  TensorBoard: tensorboard --logdir {r.out} (Projector tab); or load {VECTORS_FILE} "
            f"and {METADATA_FILE} at https://projector.tensorflow.org"
        )
    return lines
