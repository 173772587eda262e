"""What makes a saved HRRBERT folder shareable on its own: its program, its vocabulary and a model card.

A saved folder (:meth:`model.HRRBert.save_pretrained`) holds, beside ``config.json`` and
``model.safetensors``:

- ``program/``: a copy of the HRR program the weights were trained against (``manifest.json`` and the
  Parquet files it lists, hashes unchanged, so ``hrr_kernel.load_program`` verifies it as it verifies the
  original). Files are hard-linked when the program is on the same file system, copied otherwise.
  ``graph=False`` leaves out ``graph/*`` (the resolved ontology; not needed to build embeddings): the
  manifest still lists those files, so ``load_program`` reads the copy but ``verify_program`` does not.
- ``vocab.txt``: one token per line, line ``i`` = embedding row (token id) ``i``: ``VOCABULARY:code``
  with the dotted code (``ICD10CM:E11.9``), or the bare token for specials (``[PAD]``).
- ``README.md``: the model card (:func:`write_model_card`): YAML front matter for the Hub, then data,
  program id and release, configuration, metrics of the run, how to load it, intended use, limitations.

Nothing here imports ``transformers``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .common import CACHE_KEY, CONFIG_FILE, UNTRAINED_KEY
from .errors import ModelWriteError, PretrainedFileError

__all__ = [
    "PROGRAM_DIR",
    "VOCAB_FILE",
    "CARD_FILE",
    "copy_program",
    "write_vocab",
    "read_vocab",
    "write_model_card",
]

log = logging.getLogger(__name__)

PROGRAM_DIR = "program"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"
HF_MODULE = "hrrbert_hf"  # the folder's module that transformers imports under trust_remote_code
# config.json's auto_map: the Auto classes find hrrbert's classes through the folder's module, so a
# folder loads with trust_remote_code=True and without `import model.hf`
AUTO_MAP = {
    "AutoConfig": f"{HF_MODULE}.HRRBertConfig",
    "AutoModel": f"{HF_MODULE}.HRRBertModel",
    "AutoModelForMaskedLM": f"{HF_MODULE}.HRRBertForMaskedLM",
    "AutoModelForSequenceClassification": f"{HF_MODULE}.HRRBertForSequenceClassification",
}
_HF_MODULE_TEXT = (
    '"""hrrbert\'s Hugging Face classes, for transformers\' trust_remote_code=True (auto_map in config.json\n'
    "and tokenizer_config.json). They come from the installed hrrbert (pip install 'hrrbert[hf]'): this\n"
    'file only imports them."""\n\n'
    "from model.hf import HRRBertConfig, HRRBertForMaskedLM, HRRBertForSequenceClassification, HRRBertModel\n"
    "from model.hf_tokenizer import HRRBertTokenizer\n"
)
CARD_FILE = "README.md"
MANIFEST = "manifest.json"
# the tables hrr_kernel.load_program reads (the rest of a program, graph/*, is the resolved ontology)
MODEL_TABLES = ("atoms.parquet", "relations.parquet", "concepts.parquet", "edges.parquet", "slices.parquet")


# --- the program copy ------------------------------------------------------------------------------


def _manifest(folder: Path) -> dict[str, Any] | None:
    try:
        m = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def _listed(manifest: dict[str, Any], graph: bool) -> list[str]:
    """The program's files to copy (relative paths), ``manifest.json`` first."""
    files = [str(f["path"]) for f in manifest.get("files", []) if isinstance(f, dict) and "path" in f]
    if not graph:
        files = [f for f in files if f in MODEL_TABLES]
    return [MANIFEST, *files]


def _same_program(target: Path, manifest: dict[str, Any], files: list[str], src: Path) -> bool:
    """``target`` already holds this program (same id, every file present with the source's size)."""
    there = _manifest(target)
    if there is None or there.get("program_id") != manifest.get("program_id"):
        return False
    return all(
        (target / f).is_file() and (target / f).stat().st_size == (src / f).stat().st_size
        for f in files
        if (src / f).is_file()
    )


def copy_program(source: str | Path, target: str | Path, *, graph: bool = True) -> bool:
    """Copy the program folder ``source`` to ``target`` (hard links where possible), replacing whatever
    ``target`` held unless it is already this program. Returns False (and logs a warning) when ``source``
    is not a program folder any more, True otherwise.

    The copy is built in a temporary folder beside ``target`` and renamed into place, so ``target`` is
    either the old content or the whole new program.

    Raises:
        ModelWriteError: a file could not be written (the temporary folder is removed).
    """
    src, dst = Path(source), Path(target)
    manifest = _manifest(src)
    if manifest is None:
        log.warning(
            "%s: no program manifest there any more; the model folder will not carry its program", src
        )
        return False
    files = _listed(manifest, graph)
    missing = [f for f in files if f in (MANIFEST, *MODEL_TABLES) and not (src / f).is_file()]
    missing += [f for f in MODEL_TABLES if f not in files]
    if missing:
        log.warning(
            "%s: program files %s are missing; the model folder will not carry its program", src, missing
        )
        return False
    if dst.exists() and (dst.resolve() == src.resolve() or _same_program(dst, manifest, files, src)):
        return True
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        for rel in files:
            s, d = src / rel, tmp / rel
            if not s.is_file():  # a graph file an earlier copy left out
                continue
            d.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(s, d)
            except OSError:
                shutil.copyfile(s, d)
        if dst.exists():
            os.replace(dst, old)
        os.replace(tmp, dst)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not dst.exists():
            os.replace(old, dst)
        raise ModelWriteError(
            f"{dst}: could not copy the program from {src} ({type(e).__name__}: {e})"
        ) from e
    finally:
        shutil.rmtree(old, ignore_errors=True)
    return True


# --- the vocabulary --------------------------------------------------------------------------------


def _token(vocabulary: str | None, code: str, dotted: str | None) -> str:
    text = dotted or code
    tok = text if not vocabulary or vocabulary == "SPECIAL" else f"{vocabulary}:{text}"
    return tok.replace("\n", " ").replace("\r", " ")


def vocab_tokens(program_folder: str | Path | None, fallback_codes: list[str]) -> list[str]:
    """Tokens in row order from ``concepts.parquet`` of ``program_folder``; ``fallback_codes`` (the
    program's bare codes) when that table cannot be read."""
    if program_folder is not None:
        try:
            import pyarrow.parquet as pq

            t = pq.read_table(Path(program_folder) / "concepts.parquet")
            cols = set(t.column_names)
            ids = t.column("concept_id").to_pylist()
            code = t.column("code").to_pylist()
            voc = t.column("vocabulary").to_pylist() if "vocabulary" in cols else [None] * len(ids)
            dot = t.column("code_dotted").to_pylist() if "code_dotted" in cols else [None] * len(ids)
            if sorted(ids) == list(range(len(fallback_codes))):
                out = [""] * len(ids)
                for i, v, c, d in zip(ids, voc, code, dot, strict=True):
                    out[i] = _token(v, c, d)
                return out
        except (OSError, KeyError, ValueError, ImportError) as e:
            log.warning("%s: could not read the concepts for the vocabulary (%s)", program_folder, e)
    return [_token(None, c, None) for c in fallback_codes]


def write_vocab(path: str | Path, tokens: list[str]) -> Path:
    """Write ``vocab.txt`` (one token per line, line ``i`` = token id ``i``)."""
    p = Path(path)
    try:
        p.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    except OSError as e:
        raise ModelWriteError(f"{p}: could not write the vocabulary ({e})") from e
    return p


def read_vocab(folder: str | Path) -> list[str]:
    """The tokens of a saved model folder's ``vocab.txt``, index = token id (embedding row)."""
    p = Path(folder) / VOCAB_FILE
    if not p.is_file():
        raise PretrainedFileError(p, "missing; not a self-contained HRRBERT folder")
    return p.read_text(encoding="utf-8").splitlines()


# --- the model card --------------------------------------------------------------------------------

_CONFIG_DOC = {
    "dim": "hidden size (also the HRR dimension)",
    "n_layers": "Transformer layers",
    "n_heads": "attention heads",
    "ffn_dim": "feed-forward size",
    "max_len": "codes per sequence ([CLS] included)",
    "max_segments": "visit segments",
    "dropout": "dropout",
    "attn_dropout": "attention dropout",
    "layer_norm_eps": "LayerNorm epsilon",
    "init_std": "initialisation std",
    "mode": "token embedding (HRREmbedding mode)",
    "normalize": "unit-norm HRR rows",
    "freq_resolution": "bins per unit of log frequency (mode freq)",
    "pooling": "what the task heads read ([CLS]; plus the mean state; plus the history's ICD chapters read "
    "from the code vectors by unbinding)",
    "hrr_width": "width of the HRR composition, projected to dim (empty: dim)",
}
_RUN_KEYS = ("run_id", "dataset_id", "step", "task", "trial", "seed", "best_epoch")


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out += _flatten(v, key + ".")
        elif isinstance(v, list | tuple) and v and all(isinstance(x, Mapping) for x in v):
            for i, x in enumerate(v):
                out += _flatten(x, f"{key}[{i}].")
        else:
            out.append((key, v))
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list | tuple):
        return ", ".join(_fmt(x) for x in v)
    return str(v).replace("|", "\\|").replace("\n", " ")


def _yaml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def _program_section(folder: Path, meta: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    manifest = _manifest(folder / PROGRAM_DIR)
    pid = meta.get("program_id", "?")
    if manifest is None:
        return [
            f"- program id: `{pid}`",
            "- the folder does not carry its program: load it with "
            "`HRRBert.from_pretrained(folder, program)` "
            f"and the program `{pid}`",
        ], {}
    rel = manifest.get("release") if isinstance(manifest.get("release"), dict) else {}
    rows = {str(f.get("path")): f.get("rows") for f in manifest.get("files", []) if isinstance(f, dict)}
    lines = [
        f"- program id: `{manifest.get('program_id', pid)}` (format {manifest.get('format_version', '?')}, "
        f"compiler {manifest.get('compiler_version', '?')}), in `{PROGRAM_DIR}/`",
        f"- release: {rel.get('name', '?')}"
        + (f", {rel['type']}" if rel.get("type") else "")
        + (f", dated {rel['date']}" if rel.get("date") else "")
        + (f", as of {rel['as_of']}" if rel.get("as_of") else "")
        + (f", namespaces {', '.join(map(str, rel['namespaces']))}" if rel.get("namespaces") else ""),
    ]
    sizes = [f"{rows[f]} {f.removesuffix('.parquet')}" for f in MODEL_TABLES if rows.get(f) is not None]
    if sizes:
        lines.append(f"- size: {', '.join(sizes)}")
    cov = manifest.get("coverage") if isinstance(manifest.get("coverage"), dict) else {}
    if isinstance(cov.get("codes_by_vocabulary"), dict):
        lines.append(
            "- tokens by vocabulary: "
            + ", ".join(f"{k} {v}" for k, v in sorted(cov["codes_by_vocabulary"].items()))
        )
    if rel.get("note"):
        lines.append(f"- licensing: {rel['note']}")
    return lines, rel


def write_model_card(
    folder: str | Path,
    metrics: Mapping[str, Any] | None = None,
    *,
    license: str = "other",
    data: str | None = None,
    intended_use: str | None = None,
    limitations: list[str] | None = None,
    tags: list[str] | None = None,
) -> Path:
    """Write ``README.md`` (the model card) into a saved model folder and return its path.

    Args:
        folder: a folder written by :meth:`model.HRRBert.save_pretrained` (its ``config.json`` is read,
            and ``program/manifest.json`` when present).
        metrics: the run's metrics (nested dicts are flattened to dotted names), e.g. ``{"val": {"loss":
            2.1}, "test": {"auroc": 0.71}}``; None: the card says none were recorded.
        license: the Hub license id of the weights (default ``other``: the weights derive from the
            training data and the ontology release, whose terms the user knows).
        data: a sentence on the training data, printed under "Data".
        intended_use, limitations: replace the default paragraph / add bullet points.
        tags: extra Hub tags.
    """
    d = Path(folder)
    cfg_path = d / CONFIG_FILE
    try:
        meta = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PretrainedFileError(cfg_path, f"cannot read the model config for the card ({e})") from e
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    program_lines, rel = _program_section(d, meta)
    demo = "demo" in str(rel.get("name", "")).lower() or "demo" in str(rel.get("note", "")).lower()
    out = [
        *_front_matter(meta, config, license, tags, demo),
        *_data_section(meta, config, data),
        "## Program",
        "",
        *program_lines,
        "",
        *_configuration_section(meta, config),
        *_metrics_section(metrics),
        *_usage_section(),
        *_use_and_limits(intended_use, limitations, demo, rel),
    ]
    p = d / CARD_FILE
    try:
        p.write_text("\n".join(out), encoding="utf-8")
    except OSError as e:
        raise ModelWriteError(f"{p}: could not write the model card ({e})") from e
    return p


def _front_matter(meta: dict, config: dict, license: str, tags: list[str] | None, demo: bool) -> list[str]:
    """The YAML front matter the Hub reads (library, license, tags)."""
    task = meta.get("task")
    all_tags = ["hrrbert", "hrr", "holographic-reduced-representations", "icd", "ehr", "medical"]
    all_tags += ["fill-mask"] if task is None else ["text-classification", str(task)]
    all_tags += [str(config["mode"])] if config.get("mode") else []
    all_tags += ["demo"] if demo else []
    all_tags += [t for t in tags or [] if t not in all_tags]
    return [
        "---",
        "library_name: hrrbert",
        f"license: {license}",
        "tags:",
        *[f"- {_yaml_str(t)}" for t in all_tags],
        "---",
        "",
    ]


def _data_section(meta: dict, config: dict, data: str | None) -> list[str]:
    """The title, what the model is, and the run it came from."""
    task = meta.get("task")
    kind = "fine-tuned on " + f"`{task}`" if task else "pretrained with masked-code modelling"
    out = [
        f"# HRRBERT ({config.get('mode', '?')}, {kind})",
        "",
        "A BERT over ICD-code sequences whose token embeddings are generated from an ontology by circular "
        "convolution (holographic reduced representations): each code's vector is composed from learned "
        "vectors of the SNOMED CT concepts, description words and relations that the HRR program links it "
        "to. Built with hrrbert.",
        "",
        "## Data",
        "",
    ]
    if data:
        out += [data, ""]
    run = [(k, meta[k]) for k in _RUN_KEYS if k in meta]
    out += [f"- {k.replace('_', ' ')}: `{_fmt(v)}`" for k, v in run] or ["- no run information was recorded"]
    return [*out, ""]


def _configuration_section(meta: dict, config: dict) -> list[str]:
    arch = (meta.get("architectures") or ["HRRBertForMaskedLM"])[0]
    out = ["## Configuration", "", "| field | value | meaning |", "|---|---|---|"]
    out += [f"| `{k}` | {_fmt(v)} | {_CONFIG_DOC.get(k, '')} |" for k, v in config.items()]
    out += [f"| vocabulary | {meta.get('n_concepts', '?')} | tokens (rows of `{VOCAB_FILE}`) |"]
    if isinstance(meta.get(UNTRAINED_KEY), list):
        out += [
            f"| untrained tokens | {len(meta[UNTRAINED_KEY])} | tokens no training data held; what only they "
            "use was set to the mean of the trained parameters of its kind "
            "(`untrained_tokens` in `config.json`) |"
        ]
    cache = meta.get(CACHE_KEY)
    if isinstance(cache, dict):
        out += [
            f"| code cache | weight {_fmt(cache.get('weight'))}, "
            f"sharpness {_fmt(cache.get('sharpness'))} | masked-code "
            "prediction mixes in the sequence's visible codes and the codes like them (`mlm_cache` in "
            "`config.json`, model/code_cache.py); it does not touch the encoder or the task heads |"
        ]
    return [*out, f"| architecture | {arch} | the `transformers` class this folder loads as by default |", ""]


def _metrics_section(metrics: Mapping[str, Any] | None) -> list[str]:
    flat = _flatten(metrics or {})
    if not flat:
        return ["## Metrics", "", "No metrics were recorded with this folder.", ""]
    return [
        "## Metrics",
        "",
        "| metric | value |",
        "|---|---|",
        *[f"| {k} | {_fmt(v)} |" for k, v in flat],
        "",
    ]


def _usage_section() -> list[str]:
    return [
        "## How to use",
        "",
        "```python",
        "import torch",
        "import model.hf  # registers the hrrbert model type with transformers' Auto classes",
        "from model import read_vocab",
        "from transformers import AutoModelForMaskedLM",
        "",
        'folder = "path/to/this/folder"',
        "m = AutoModelForMaskedLM.from_pretrained(folder)  # the program is read from the folder",
        "vocab = {t: i for i, t in enumerate(read_vocab(folder))}",
        'ids = torch.tensor([[vocab[t] for t in ["[CLS]", "ICD10CM:E11.9", "[MASK]"]]])',
        "logits = m(input_ids=ids).logits  # (1, 3, vocabulary)",
        "```",
        "",
        "Without `transformers`: `model.HRRBert.from_pretrained(folder)` (the program is read from "
        f"`{PROGRAM_DIR}/`).",
        "",
    ]


def _use_and_limits(
    intended_use: str | None, limitations: list[str] | None, demo: bool, rel: dict
) -> list[str]:
    out = [
        "## Intended use",
        "",
        intended_use
        or (
            "Research on representation learning for coded EHR data: masked-code prediction, code "
            "embeddings and fine-tuning on sequence-level tasks over ICD-9-CM / ICD-10-CM codes of the "
            "program's vocabulary. Not for clinical decision making."
        ),
        "",
        "## Limitations",
        "",
        "- Inputs are sequences of the program's tokens only; a code outside `vocab.txt` has no embedding, "
        "and the weights fit only this program (its id is checked on load).",
        "- Predictions reflect the training cohort's coding practice, population and time; they are not "
        "calibrated for another hospital without validation.",
        "- The ontology structure is only as good as the release and the ICD maps the program was compiled "
        "from; codes mapped by fallback or GEM chains carry less structure.",
    ]
    if demo:
        out.append(
            "- Trained on the demo release and synthetic patients: a demonstration of the method, not a "
            "model of real patients."
        )
    if rel.get("note"):
        out.append(
            f"- The program carries ontology content under its own terms: {str(rel['note']).rstrip('.')}."
        )
    return [*out, *[f"- {x}" for x in limitations or []], ""]


def write_hf_files(folder: str | Path, *, max_len: int, max_segments: int) -> None:
    """The files ``AutoTokenizer`` and ``trust_remote_code`` read: ``tokenizer_config.json`` (the
    tokenizer class, its ``auto_map``, the model's length and segment limits) and the module ``hrrbert_hf.py``
    that ``auto_map`` names."""
    d = Path(folder)
    cfg = {
        "tokenizer_class": "HRRBertTokenizer",
        "auto_map": {"AutoTokenizer": [f"{HF_MODULE}.HRRBertTokenizer", None]},
        "model_max_length": int(max_len),
        "max_segments": int(max_segments),
        "truncation_side": "left",
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    (d / TOKENIZER_CONFIG).write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    (d / f"{HF_MODULE}.py").write_text(_HF_MODULE_TEXT, encoding="utf-8")
