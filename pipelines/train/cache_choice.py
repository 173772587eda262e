"""Choose a model's code cache (:mod:`model.code_cache`) on validation data, and write the model with it.

``hrrbert mlm-cache MODEL --dataset DS --out DIR`` scores masked-code prediction on the dataset's
``pretrain_val`` patients for every (weight, sharpness) of a small grid, keeps the pair with the lowest
masked-code loss (cross-entropy, a proper score: it rewards putting mass on the right code, not only
ranking it first) and writes the model folder to ``DIR`` with ``mlm_cache`` in its ``config.json`` and
the whole grid in ``cache.json``. Weight 0 is in the grid, so a cache that does not help is not taken.
The positions are masked as validation masks them (the training share, 80/10/10), from a random stream
of their own (:data:`SALT_CACHE`), so the pair is not chosen on the very positions that validation
reports. Everything that ranks masked codes afterwards (:func:`~pipelines.train.mlm.evaluate_mlm`, the
frequency-bin test, the new-code probes of a carry) uses the cache the model carries.

Dimension legend: B sequences, T positions, N codes, M masked positions.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pipelines.data.folders import check_out, folder_written
from pipelines.data.sequences import step_generator
from pipelines.errors import PipelineError

__all__ = [
    "CacheResult",
    "GRID_SHARPNESS",
    "GRID_WEIGHTS",
    "REPORT_FILE",
    "add_cache",
    "cache_grid",
    "choose_cache",
]

log = logging.getLogger(__name__)

GRID_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
GRID_SHARPNESS = (10.0, 20.0, 40.0, 80.0, 160.0)
SALT_CACHE = 23  # the masking stream the cache is chosen on (validation reports SALT_VALIDATION's)
TOPK = (1, 10, 100)
REPORT_FILE = "cache.json"
THRESHOLDS_FILE = "thresholds.json"  # pipelines.train.finetune.THRESHOLDS_FILE


@torch.no_grad()
def cache_grid(
    model,
    seqs,
    tok,
    *,
    weights=GRID_WEIGHTS,
    sharpness=GRID_SHARPNESS,
    batch_size: int = 256,
    seed: int = 0,
    limit: int | None = 1000,
    mask_prob: float = 0.15,
    device: torch.device | None = None,
) -> list[dict[str, Any]]:
    """Masked-code loss and top-1/10/100 accuracy on ``seqs`` for the model alone (weight 0) and for every
    (weight > 0, sharpness) of the grid; one row per pair, in grid order."""
    from model.code_cache import cache_distribution, mix_log_probs, visible_codes

    device = device or model.program.device
    pairs = [(0.0, None)] + [(float(w), float(s)) for s in sharpness for w in weights if w > 0]
    sums = {p: [0.0] * (1 + len(TOPK)) for p in pairs}
    n = len(seqs) if limit is None else min(limit, len(seqs))
    count = 0
    was = model.training
    model.eval()
    special = model.special_tokens()
    for chunk, idx in enumerate(torch.arange(n).split(batch_size)):
        b = seqs.batch(idx)
        ids, chosen, targets = tok.mask(b, mask_prob, step_generator(seed, chunk, 0, salt=SALT_CACHE))
        if not chosen.any():
            continue
        ids, chosen, targets = ids.to(device), chosen.to(device), targets.to(device)
        att = b["attention_mask"].to(device)
        e = model.token_matrix()  # (N, D)
        h = model.encode(ids, b["segment_ids"].to(device), att, token_matrix=e)  # (B, T, D)
        logits = model.mlm(h[chosen], e).float()  # (M, N)
        rows = chosen.nonzero(as_tuple=True)[0]  # (M,)
        visible = visible_codes(ids, att, chosen, special)  # (B, T)
        caches = {s: cache_distribution(e, ids, visible, special, s) for s in {p[1] for p in pairs} - {None}}
        for w, s in pairs:
            if s is None:
                logp = torch.log_softmax(logits, dim=1)
            else:
                cache, has = caches[s]
                logp = mix_log_probs(logits, cache[rows], has[rows], w)  # (M, N)
            true = logp.gather(1, targets[:, None])  # (M, 1)
            rank = (logp > true).sum(1)  # (M,) 0 = first
            acc = sums[(w, s)]
            acc[0] -= float(true.sum())
            for j, k in enumerate(TOPK):
                acc[1 + j] += float((rank < k).sum())
        count += int(targets.numel())
    model.train(was)
    if count == 0:
        raise PipelineError("no masked codes to choose the cache on (the sequences hold no codes)")
    return [
        {
            "weight": w,
            "sharpness": s,
            "loss": acc[0] / count,
            **{f"top{k}": acc[1 + j] / count for j, k in enumerate(TOPK)},
            "masked": count,
        }
        for (w, s), acc in sums.items()
    ]


def choose_cache(grid: list[dict[str, Any]]):
    """The grid row with the lowest loss as a :class:`model.code_cache.CodeCache`, or None when it is the
    model alone (weight 0)."""
    from model.code_cache import CodeCache

    best = min(grid, key=lambda r: r["loss"])
    return None if best["weight"] == 0 else CodeCache(best["weight"], best["sharpness"])


@dataclass
class CacheResult:
    out: Path
    source: Path
    grid: list[dict[str, Any]]
    chosen: dict[str, float] | None
    seconds: float

    def summary_lines(self) -> list[str]:
        alone = self.grid[0]
        lines = [f"{'weight':>6} {'sharp':>5} {'loss':>7} {'top1':>6} {'top10':>6} {'top100':>6}"]
        for r in self.grid:
            sharp = "-" if r["sharpness"] is None else f"{r['sharpness']:g}"
            lines.append(
                f"{r['weight']:>6g} {sharp:>5} {r['loss']:>7.3f} {100 * r['top1']:>6.1f} "
                f"{100 * r['top10']:>6.1f} {100 * r['top100']:>6.1f}"
            )
        if self.chosen is None:
            lines.append(
                f"no cache: the model alone has the lowest loss ({alone['loss']:.3f}); {self.out} "
                "holds the model unchanged"
            )
        else:
            lines.append(
                f"cache weight {self.chosen['weight']:g}, sharpness {self.chosen['sharpness']:g} "
                f"({alone['masked']} masked codes): written to {self.out} ({self.seconds:.0f} s)"
            )
        return lines


def add_cache(
    model_dir: str | Path,
    dataset: str | Path,
    out: str | Path,
    *,
    split: str = "pretrain_val",
    limit: int | None = 1000,
    batch_size: int = 256,
    seed: int = 0,
    force: bool = False,
    program: str | Path | None = None,
) -> CacheResult:
    """Choose the code cache of the model in ``model_dir`` on ``split`` of ``dataset`` and write the model
    with it to ``out`` (see the module docstring); nothing is left under ``out`` on failure. ``program``:
    the folder of the program the model was trained with (default: the copy the model folder carries)."""
    from model import HRRBert
    from pipelines.data.sequences import SPLITS, TokenizedDataset
    from pipelines.train.finetune import model_dir as find_model
    from pipelines.train.mlm import tokens_of
    from pipelines.train.runtime import now_iso, write_json

    if split not in SPLITS:
        raise PipelineError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    start = time.perf_counter()
    source, out = Path(model_dir), Path(out)
    if not source.is_dir():
        raise PipelineError(f"{model_dir}: no such folder (expected a saved model folder)")
    if out.resolve() == source.resolve() or source.resolve() in out.resolve().parents:
        raise PipelineError(f"{out}: is the source model {source} or inside it; choose another --out")
    check_out(out, force, record=REPORT_FILE, what="cached model")
    mdir = find_model(source)
    meta = HRRBert.read_config(mdir)
    if program is not None:
        from hrr_kernel import load_program

        program = load_program(program)
    model = HRRBert.from_pretrained(mdir, program)
    program = model.program
    ds = TokenizedDataset(dataset, program.program_id, program.n_concepts, program.special_id("[PAD]"))
    seqs = ds.sequences(split, max_len=model.config.max_len, max_segments=model.config.max_segments)
    if not len(seqs):
        raise PipelineError(f"{dataset}: split {split!r} holds no patients; choose another --split")
    grid = cache_grid(model, seqs, tok=tokens_of(program), batch_size=batch_size, seed=seed, limit=limit)
    model.mlm_cache = choose_cache(grid)
    chosen = None if model.mlm_cache is None else model.mlm_cache.to_dict()
    extra = {
        k: v
        for k, v in meta.items()
        if k
        not in (
            "kind",
            "model_type",
            "architectures",
            "config",
            "program_id",
            "n_concepts",
            "untrained_tokens",
            "mlm_cache",
        )
    }
    record = {
        "kind": "mlm_cache",
        "model": str(mdir),
        "dataset": str(dataset),
        "split": split,
        "limit": limit,
        "seed": seed,
        "salt": SALT_CACHE,
        "grid": grid,
        "chosen": chosen,
        "created_at": now_iso(),
    }
    with folder_written(out, "cached model", force=force, record=REPORT_FILE) as tmp:
        model.save_pretrained(tmp, extra=extra)
        if (mdir / THRESHOLDS_FILE).is_file():  # a fine-tuned model's thresholds travel with it
            shutil.copy2(mdir / THRESHOLDS_FILE, tmp / THRESHOLDS_FILE)
        write_json(tmp / REPORT_FILE, record)
    seconds = time.perf_counter() - start
    log.info("code cache %s for %s: %s", chosen, mdir, out)
    return CacheResult(out=out, source=mdir, grid=grid, chosen=chosen, seconds=seconds)
