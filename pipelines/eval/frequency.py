"""The frequency-bin MLM test (evaluation (a), paper 3.2.2).

Codes are binned by their log frequency in pretraining (``code_counts.parquet``) into the paper's 7 bins
of width 2 from -14 to 0. For up to ``per_bin`` codes of each bin (a seeded sample) one probe is made:
a patient sequence that holds the code, from the splits MLM never trained on, with that one occurrence
replaced by ``[MASK]``; the probe is a hit at k when the code is among the model's top-k predictions, and
``median_rank`` is the median over the bin's probes of the code's rank among all ``ranked`` concepts (1 =
first; a random ranking puts a code in the top 100 with probability 100 / ``ranked``).
Our datasets' log frequency is ln(count / tokens), about -13 to -3.5, so the top bins stay empty; they
are reported as empty (``probes`` 0, accuracies None) rather than dropped.

Dimension legend: P probes, B batch, T codes, N concepts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch

from pipelines.data.sequences import Sequences, TokenizedDataset

BIN_EDGES = tuple(float(x) for x in range(-14, 1, 2))  # -14, -12, ..., 0: 7 bins of width 2
PROBE_SPLITS = ("pretrain_val", "finetune_train", "finetune_val", "test", "rood")
TOPK = (10, 100)


def bins_of(log_frequency: np.ndarray) -> np.ndarray:
    """Bin index 0..6 of each log frequency (-1 outside [-14, 0]). Shapes: ``(N,)`` -> ``(N,)``."""
    idx = np.digitize(log_frequency, BIN_EDGES) - 1
    idx[(log_frequency < BIN_EDGES[0]) | (log_frequency > BIN_EDGES[-1])] = -1
    return np.minimum(idx, len(BIN_EDGES) - 2)


def _concat(parts: list[Sequences]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(int(p.input_ids.shape[1]) for p in parts)

    def pad(x: torch.Tensor, fill: int) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=fill)

    ids = torch.cat([pad(p.input_ids, 0) for p in parts])  # (P, T)
    seg = torch.cat([pad(p.segment_ids, 0) for p in parts])  # (P, T)
    mask = torch.cat([pad(p.attention_mask, 0).bool() for p in parts])  # (P, T)
    return ids, seg, mask


def make_probes(
    ds: TokenizedDataset, model, count_path, *, per_bin: int = 400, seed: int = 0
) -> dict[str, Any]:
    """Choose the probes: per bin, up to ``per_bin`` codes, each with one (row, position) to mask."""
    t = pq.read_table(count_path, columns=["concept_id", "log_frequency"]).to_pydict()
    logf = np.full(model.n_concepts, np.nan)
    logf[np.asarray(t["concept_id"], dtype=np.int64)] = t["log_frequency"]
    mc = model.config
    parts = [ds.sequences(s, max_len=mc.max_len, max_segments=mc.max_segments) for s in PROBE_SPLITS]
    parts = [p for p in parts if len(p)]
    if not parts:
        return {"bins": [], "ids": None}
    ids, seg, mask = _concat(parts)
    codes = model.program.concept_codes
    special = np.array([c.startswith("[") and c.endswith("]") for c in codes])
    rows, cols = np.nonzero(mask.numpy())
    code = ids.numpy()[rows, cols]
    keep = ~special[code]
    rows, cols, code = rows[keep], cols[keep], code[keep]
    rng = np.random.default_rng([seed, 1])
    perm = rng.permutation(len(code))
    uniq, first = np.unique(code[perm], return_index=True)  # one random occurrence per code
    occ_row, occ_col = rows[perm][first], cols[perm][first]
    b = bins_of(np.nan_to_num(logf[uniq], nan=-np.inf))
    all_bins = bins_of(np.nan_to_num(logf, nan=-np.inf))
    out_bins = []
    for j in range(len(BIN_EDGES) - 1):
        sel = np.flatnonzero(b == j)
        if len(sel) > per_bin:
            sel = np.sort(rng.choice(sel, size=per_bin, replace=False))
        out_bins.append(
            {
                "low": BIN_EDGES[j],
                "high": BIN_EDGES[j + 1],
                "codes_in_bin": int(((all_bins == j) & ~special).sum()),
                "code": uniq[sel],
                "row": occ_row[sel],
                "col": occ_col[sel],
            }
        )
    return {"bins": out_bins, "ids": ids, "seg": seg, "mask": mask}


@torch.no_grad()
def frequency_bin_test(
    model, ds: TokenizedDataset, *, per_bin: int = 400, seed: int = 0, batch_size: int = 128, device=None
) -> list[dict[str, Any]]:
    """Top-10 and top-100 accuracy of one-masked-code probes per log-frequency bin."""
    device = device or model.program.device
    probes = make_probes(ds, model, ds.path / "code_counts.parquet", per_bin=per_bin, seed=seed)
    mask_id = model.program.concept_codes.index("[MASK]")
    was = model.training
    model.eval()
    e = model.token_matrix()  # (N, D), built once
    results = []
    for b in probes["bins"]:
        n = len(b["code"])
        hits = {k: 0 for k in TOPK}
        ranks: list[torch.Tensor] = []
        for s in range(0, n, batch_size):
            r = torch.as_tensor(b["row"][s : s + batch_size])
            c = torch.as_tensor(b["col"][s : s + batch_size])
            x = probes["ids"][r].clone()  # (B, T)
            x[torch.arange(len(r)), c] = mask_id
            att = probes["mask"][r]
            t = max(int(att.sum(1).max()), 1)
            mlm = torch.zeros_like(att)
            mlm[torch.arange(len(r)), c] = True
            h = model.encode(
                x[:, :t].to(device), probes["seg"][r, :t].to(device), att[:, :t].to(device), token_matrix=e
            )  # (B, T, D)
            logits = model.mlm(h[mlm[:, :t].to(device)], e)  # (B, N)
            if getattr(model, "mlm_cache", None) is not None:  # with the code cache: log-probabilities
                logits = model.mlm_log_probs(
                    logits, e, x[:, :t].to(device), att[:, :t].to(device), mlm[:, :t].to(device)
                )
            target = torch.as_tensor(b["code"][s : s + batch_size], device=device)
            ranks.append(1 + (logits > logits.gather(1, target[:, None])).sum(1).cpu())  # (B,) 1 = best
            top = logits.topk(min(max(TOPK), logits.shape[1]), dim=1).indices  # (B, 100)
            hit = top == target[:, None]
            for k in TOPK:
                hits[k] += int(hit[:, :k].any(1).sum())
        results.append(
            {
                "low": b["low"],
                "high": b["high"],
                "codes_in_bin": b["codes_in_bin"],
                "probes": n,
                **{f"top{k}": (hits[k] / n if n else None) for k in TOPK},
                "median_rank": float(torch.cat(ranks).double().median()) if n else None,
                "ranked": int(model.n_concepts),
            }
        )
    model.train(was)
    return results
