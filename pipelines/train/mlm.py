"""The masked-code-modelling pieces of pretraining: special tokens, one optimizer step, validation.

The training softmax is exact over the vocabulary (``mlm_softmax`` ``full``) or sampled (``sampled``;
``auto`` picks it above :data:`SAMPLED_FROM` concepts): each step scores its masked codes against the
candidates :func:`sample_candidates` draws, the batch's own targets plus ``mlm_negatives`` concepts drawn
with replacement from a proposal proportional to ``(count + 1) ** PROPOSAL_POWER`` (count: the code's
occurrences in ``pretrain_train``; the square root and the +1 give a rare or unseen code a real chance to
be a negative), and subtracts from each candidate's logit the log of its probability of being a
candidate at all (the logQ correction of sampled softmax: Bengio and Senecal 2008; Jean et al. 2015), so
that the expected gradient approaches the full softmax's. Only the candidates' and the batch's rows are
composed (:meth:`model.HRRBert.forward` with ``candidates``), so the step costs the same at 25k and at
350k concepts. Validation always uses the full softmax.

Dimension legend: B batch, T codes, N concepts, M masked positions, K candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from hrr_kernel import SPECIAL_TOKENS, ProgramError
from pipelines.data.sequences import (
    SALT_DROPOUT,
    SALT_VALIDATION,
    Sequences,
    step_generator,
    step_seed,
)
from pipelines.errors import PipelineError

from .loop import StepOutput
from .runtime import DistContext

SAMPLED_FROM = 50_000  # mlm_softmax auto: the sampled softmax for programs of more concepts than this
PROPOSAL_POWER = 0.5  # negatives drawn in proportion to (count + 1) ** this


@dataclass
class Sampler:
    """What the sampled softmax draws from (:func:`sampler_of`)."""

    proposal: Tensor  # (N,) float64: probability of each concept per negative draw (0: never drawn)
    unigram: Tensor  # (N,) float64: each concept's share of the training codes (what a masked target is)
    negatives: int  # draws per step, with replacement


@dataclass
class Tokens:
    """The special ids masking needs (derived from the program)."""

    mask_id: int
    special: Tensor  # (S,)
    candidates: Tensor  # (C,) ids a random replacement draws from
    scored: Tensor | None = None  # (N,) bool on the model's device: codes the softmax trains on (None: all)
    sampler: Sampler | None = None  # the sampled softmax's proposal (None: the full softmax)

    def mask(self, batch: dict[str, Tensor], prob: float, generator: torch.Generator):
        """:func:`mask_tokens` of a batch (``input_ids``, ``attention_mask``) with these tokens."""
        return mask_tokens(
            batch["input_ids"],
            batch["attention_mask"],
            mask_id=self.mask_id,
            special=self.special,
            candidates=self.candidates,
            prob=prob,
            generator=generator,
        )


def tokens_of(program, train: Sequences | None = None) -> Tokens:
    """The special tokens of ``program`` (never masked) and the codes a random replacement draws from.

    With ``train`` (vocabulary ``train``), the training softmax scores only the codes that occur in those
    sequences, and a random replacement draws only from them: a code pretraining never sees then gets no
    gradient at all (its row, or in HRR modes its composition, keeps what initialisation and the shared
    atoms give it) instead of being pushed down as a negative at every step.
    """
    try:
        spec = sorted(program.special_id(t) for t in SPECIAL_TOKENS)
    except ProgramError as e:
        raise PipelineError(f"program {program.program_id} lacks a special token ({e}); recompile it") from e
    special = torch.tensor(spec, dtype=torch.int64)
    if train is None:
        cand = torch.tensor(sorted(set(range(program.n_concepts)) - set(spec)), dtype=torch.int64)
        return Tokens(program.special_id("[MASK]"), special, cand)
    scored = train.tokens(program.n_concepts)
    scored[special] = False
    if not scored.any():
        raise PipelineError("the pretraining sequences hold no codes; nothing for the MLM softmax to score")
    return Tokens(program.special_id("[MASK]"), special, torch.nonzero(scored).flatten(), scored)


def sampler_of(tok: Tokens, train: Sequences, n_concepts: int, negatives: int) -> Sampler:
    """The sampled softmax's proposal over the codes ``tok`` scores (every non-special code, or
    ``tok.scored``), by their counts in ``train``."""
    codes = train.input_ids[train.attention_mask.bool()].long()
    counts = torch.bincount(codes, minlength=n_concepts).to(torch.float64)  # (N,)
    counts[tok.special] = 0.0
    allowed = torch.ones(n_concepts, dtype=torch.bool) if tok.scored is None else tok.scored.cpu()
    allowed[tok.special] = False
    weight = (counts + 1.0).pow(PROPOSAL_POWER) * allowed  # (N,)
    total = counts.sum()
    if total <= 0:
        raise PipelineError("the pretraining sequences hold no codes; nothing for the MLM softmax to score")
    return Sampler(weight / weight.sum(), counts / total, int(negatives))


def sample_candidates(targets: Tensor, sampler: Sampler, generator: torch.Generator):
    """The candidates of one sampled-softmax step: the ``targets`` (each masked code) and
    ``sampler.negatives`` draws from the proposal, as a sorted set, with each target's place in it and
    each candidate's log probability of being a candidate (its logQ correction): a concept is left out
    only if no draw and no masked position picks it, ``1 - (1 - p)^S (1 - f)^M`` (``p`` its proposal
    probability, ``f`` its unigram share, ``S`` draws, ``M`` targets).

    Shapes: targets ``(M,)`` -> candidates ``(K,)``, target index ``(M,)`` into candidates, log_q ``(K,)``.
    """
    drawn = torch.multinomial(sampler.proposal, sampler.negatives, replacement=True, generator=generator)
    targets = targets.long().cpu()
    cand = torch.unique(torch.cat([targets, drawn]))  # (K,) sorted
    where = torch.searchsorted(cand, targets)  # (M,)
    p, f = sampler.proposal[cand], sampler.unigram[cand]  # (K,)
    log_missed = sampler.negatives * torch.log1p(-p) + targets.numel() * torch.log1p(-f)  # (K,)
    log_q = torch.log(-torch.expm1(log_missed))  # (K,) log(1 - missed)
    return cand, where, log_q.to(torch.float32)


def mask_tokens(
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    mask_id: int,
    special: Tensor,
    candidates: Tensor,
    prob: float,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, Tensor]:
    """BERT masking: choose ``prob`` of the real, non-special codes; of those 80 % become ``[MASK]``,
    10 % a random code, 10 % stay. Special tokens ([CLS], [PAD], ...) are never chosen.

    Shapes:
        - input_ids, attention_mask: ``(B, T)``; special ``(S,)`` ids never masked; candidates ``(C,)``
          ids drawn for random replacement
        - output: masked ids ``(B, T)``, chosen ``(B, T)`` bool, targets ``(M,)`` (original ids, row-major)
    """
    maskable = attention_mask.bool() & ~torch.isin(input_ids, special)  # (B, T)
    u = torch.rand(input_ids.shape, generator=generator)  # (B, T)
    chosen = (u < prob) & maskable  # (B, T)
    action = torch.rand(input_ids.shape, generator=generator)  # (B, T)
    rand_tok = candidates[torch.randint(len(candidates), input_ids.shape, generator=generator)]  # (B, T)
    out = torch.where(chosen & (action < 0.8), torch.full_like(input_ids, mask_id), input_ids)
    out = torch.where(chosen & (action >= 0.8) & (action < 0.9), rand_tok, out)  # (B, T)
    return out, chosen, input_ids[chosen]


@torch.no_grad()
def evaluate_mlm(
    model,
    seqs: Sequences,
    tok: Tokens,
    *,
    topk: tuple[int, ...],
    batch_size: int,
    seed: int,
    ctx: DistContext,
    device: torch.device,
    bf16: bool = False,
    limit: int | None = None,
    mask_prob: float = 0.15,
) -> dict[str, float]:
    """MLM loss, top-1 and top-k accuracy on ``seqs`` with a fixed masking of ``mask_prob`` of the codes
    (the training share; sharded over ranks). A model with a code cache (``mlm_cache``) is scored with it."""
    was = model.training
    model.eval()
    n = len(seqs) if limit is None else min(limit, len(seqs))
    idx_all = torch.arange(ctx.rank, n, ctx.world_size)
    ks = sorted({k for k in topk if k > 1})
    sums = [0.0, 0.0] + [0.0] * len(ks) + [0.0]  # loss, top1, top-k..., count
    for chunk, idx in enumerate(idx_all.split(batch_size)):
        b = seqs.batch(idx)
        ids, chosen, targets = tok.mask(
            b, mask_prob, step_generator(seed, chunk, ctx.rank, salt=SALT_VALIDATION)
        )
        if not chosen.any():
            continue
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and device.type == "cuda"):
            args = (ids.to(device), b["segment_ids"].to(device), b["attention_mask"].to(device))
            if getattr(model, "mlm_cache", None) is None:
                logits = model(*args, mlm_mask=chosen.to(device)).float()  # (M, N)
            else:  # log-probabilities with the code cache (model.code_cache); cross-entropy reads them alike
                logits = model.masked_log_probs(*args, chosen.to(device))  # (M, N)
        targets = targets.to(device)
        sums[0] += float(F.cross_entropy(logits, targets, reduction="sum"))
        sums[1] += float((logits.argmax(1) == targets).sum())
        if ks:
            top = logits.topk(min(max(ks), logits.shape[1]), dim=1).indices  # (M, k)
            hit = top == targets[:, None]  # (M, k)
            for j, k in enumerate(ks):
                sums[2 + j] += float(hit[:, :k].any(1).sum())
        sums[-1] += float(targets.numel())
    sums = ctx.all_sum(sums, device)
    model.train(was)
    m = max(sums[-1], 1.0)
    out = {"val_loss": sums[0] / m, "val_mlm_acc": sums[1] / m, "val_masked": int(sums[-1])}
    out.update({f"val_top{k}": sums[2 + j] / m for j, k in enumerate(ks)})
    return out


def mlm_step(net, batch, tok: Tokens, cfg, step: int, ctx: DistContext, device) -> StepOutput:
    """The MLM loss of one training batch (mean over its masked codes), with masking and dropout seeded
    from (seed, step, rank) so that a resumed run repeats them."""
    g = step_generator(cfg.seed, step, ctx.rank)
    ids, chosen, targets = tok.mask(batch, cfg.mask_prob, g)
    torch.manual_seed(step_seed(cfg.seed, step, ctx.rank, salt=SALT_DROPOUT))  # dropout RNG
    n = int(targets.numel())
    extra = {}
    if tok.sampler is not None:  # sampled softmax: the candidates' rows only, logQ-corrected
        cand, where, log_q = sample_candidates(targets, tok.sampler, g)
        extra["candidates"] = cand.to(device)
    logits = net(
        ids.to(device),
        batch["segment_ids"].to(device),
        batch["attention_mask"].to(device),
        mlm_mask=chosen.to(device),
        **extra,
    ).float()  # (M, K) sampled, else (M, N)
    if tok.sampler is not None:  # the targets as places among the candidates
        logits, targets = logits - log_q.to(device), where
    elif tok.scored is not None:  # codes outside the training vocabulary: no logit, hence no gradient
        logits = logits.masked_fill(~tok.scored, float("-inf"))
    loss_sum = F.cross_entropy(logits, targets.to(device), reduction="sum")
    return StepOutput(loss_sum / max(n, 1), float(n), int(batch["input_ids"].shape[0]))
