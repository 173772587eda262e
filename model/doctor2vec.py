"""Doctor2Vec (Biswal et al., AAAI 2020): a doctor is the memory of their patients; a trial attends over it.

Everything a forward pass needs is in this file:

- **patient vectors** from the patient's codes, either pooled (masked mean of the code embeddings) or
  visit-level (codes pooled per visit, then the visit Transformer's blocks over visits, masked mean),
  plus age and sex; codes are embedded by any module with ``forward(ids) -> (*, D)`` — a plain
  ``nn.Embedding`` or an ``hrr_kernel.HRREmbedding``;
- the **doctor's memory**: the vectors of (up to ``max_memories``) patients of the doctor's panel;
- the **trial embedding** from its structured fields (target conditions and excluded conditions through
  the same code embedding, age band, sex, disease category) and its text (bag of words);
- **dynamic doctor vector**, a two-level (hierarchical) read as in Doctor2Vec: first each trial reads
  each patient's codes (code-level attention: which of the patient's diagnoses speak to this trial; the
  best match of the patient's codes to each condition code and to each excluded code, with the patient's
  age against the age band and sex against the trial's, gives a soft eligibility in [0, 1]), giving a
  trial-specific patient vector; then the trial reads the doctor's memory of those patients with the
  memory network's soft read (:func:`model.memory_network.memory_read`, ``hops`` times, ``u <- u + o``;
  the best match and the log eligibility are two extra key dimensions), so a different trial sees a
  different doctor. The read's log match mass (the softmax normaliser) and the log of the soft count of
  eligible patients go to the head with it. **Static** (the paper's ablation): the mean of the
  trial-independent patient vectors;
- a **compatibility head**: an MLP on ``[doctor, doctor * trial, mass, count, log n_patients]`` (no
  trial-only features: they cannot rank doctors, only memorise the training trials' base rates), plus
  the log soft count directly -> one logit. ``forward`` also returns the attention over the memory
  (which patients made this doctor fit this trial); static doctors return uniform weights.

Inputs are de-duplicated: a batch carries each distinct patient once (``patient_codes``), each doctor's
memory as row indices into them (``memory``, -1 = empty slot), and each distinct trial once with
``pair_trial`` indices, so the code-level read is computed once per (trial, patient), not per pair.

Dimension legend: B pairs (doctor, trial), U distinct trials, P distinct patients, T codes per patient,
V visits, C codes per visit, M memory slots, K condition codes, X excluded codes, W text words, D dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .common import ConfigDict, check_positive
from .memory_network import memory_read
from .visit_transformer import (
    INIT_STD,
    Block,
    VisitPooling,
    VisitTransformerConfig,
    group_visits,
    masked_mean,
    sinusoidal_positions,
)

__all__ = ["Doctor2Vec", "Doctor2VecConfig", "PATIENT_ENCODERS", "DOCTOR_VECTORS", "SEXES"]

PATIENT_ENCODERS = ("pooled", "visit-transformer")
DOCTOR_VECTORS = ("dynamic", "static")
SEXES = ("any", "F", "M")  # trial sex field -> index; a patient's unknown sex uses index 0
N_CATEGORIES = 23  # ICD chapters 1..22, 0 = unknown
NO_MATCH = -1e4  # match score of "no code matched" (finite: the sigmoid and its gradient stay finite)
LOG_FLOOR = 1e-4  # added to an eligibility before its log (eligibility 0 gives a finite key)
N_HEAD_SCALARS = 3  # log match mass, log soft count, log n_patients: the head's inputs besides 2 D vectors
AGE_SCALE = 100.0  # ages enter as years / AGE_SCALE
PAD = 0  # code id and word id of padding


@dataclass
class Doctor2VecConfig(ConfigDict):
    """Sizes and options of a Doctor2Vec model (saved as ``config.json``)."""

    n_codes: int  # code vocabulary N (program concepts; 0 = padding)
    n_words: int  # trial-text vocabulary W (0 = padding)
    dim: int = 64  # embedding and model dimension D
    patient_encoder: str = "pooled"  # pooled (mean of code vectors) or visit-transformer
    doctor: str = "dynamic"  # dynamic (trial attends over the patients) or static (mean of patients)
    hops: int = 1  # memory reads of a dynamic doctor (u <- u + o after each)
    max_memories: int = 64  # patients per doctor memory M
    max_visits: int = 100  # visits per patient (visit-transformer positions)
    visit_layers: int = 1  # visit-transformer blocks
    visit_heads: int = 2  # visit-transformer heads (dim must be divisible)
    hidden: int = 128  # width of the compatibility MLP
    dropout: float = 0.1  # dropout in the encoders and the head
    code_mode: str = "unstructured"  # how codes are embedded (recorded): unstructured or an HRR mode

    def __post_init__(self) -> None:
        if self.patient_encoder not in PATIENT_ENCODERS:
            raise ValueError(
                f"patient_encoder must be one of {PATIENT_ENCODERS}, got {self.patient_encoder!r}"
            )
        if self.doctor not in DOCTOR_VECTORS:
            raise ValueError(f"doctor must be one of {DOCTOR_VECTORS}, got {self.doctor!r}")
        check_positive(self, ("n_codes", "n_words", "dim", "hops", "max_memories", "max_visits", "hidden"))
        if self.patient_encoder == "visit-transformer" and self.dim % self.visit_heads:
            raise ValueError(f"dim ({self.dim}) must be divisible by visit_heads ({self.visit_heads})")


class Demographics(nn.Module):
    """Age band / age and sex -> ``(*, D)``: a linear map of ages plus a sex embedding."""

    def __init__(self, dim: int, n_ages: int) -> None:
        super().__init__()
        self.age = nn.Linear(2 * n_ages, dim)
        self.sex = nn.Embedding(len(SEXES), dim)
        nn.init.normal_(self.sex.weight, 0.0, INIT_STD)

    def forward(self, age: Tensor, sex: Tensor) -> Tensor:
        """age ``(*, n_ages)`` years (NaN = unknown), sex ``(*)`` index into SEXES -> ``(*, D)``."""
        known = ~torch.isnan(age)  # (*, n_ages)
        a = torch.where(known, age / AGE_SCALE, torch.zeros_like(age))
        return self.age(torch.cat([a, known.to(a.dtype)], -1)) + self.sex(sex)  # (*, D)


class VisitEncoder(nn.Module):
    """Codes grouped into visits, pooled per visit, the visit Transformer's blocks, masked mean
    -> ``(P, D)``."""

    def __init__(self, cfg: Doctor2VecConfig) -> None:
        super().__init__()
        vt = VisitTransformerConfig(
            n_codes=cfg.n_codes,
            dim=cfg.dim,
            n_layers=cfg.visit_layers,
            n_heads=cfg.visit_heads,
            ffn_dim=2 * cfg.dim,
            max_visits=cfg.max_visits,
            dropout=cfg.dropout,
            pad_id=PAD,
        )
        self.pool = VisitPooling(vt)
        self.blocks = nn.ModuleList(Block(vt) for _ in range(cfg.visit_layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.register_buffer("positions", sinusoidal_positions(cfg.max_visits, cfg.dim), persistent=False)
        self.max_visits = cfg.max_visits

    def forward(self, code_vectors: Tensor, codes: Tensor, segments: Tensor) -> Tensor:
        """code_vectors ``(P, T, D)``, codes / segments ``(P, T)`` -> ``(P, D)``."""
        mask = codes != PAD  # (P, T)
        seg = segments.clamp(min=0, max=self.max_visits - 1)
        pos = torch.arange(codes.shape[1], device=codes.device).expand_as(codes)  # (P, T)
        idx, code_mask = group_visits(pos, seg, mask, pad_id=0)  # (P, V, C) positions into T
        e = code_vectors.gather(1, idx.flatten(1).unsqueeze(-1).expand(-1, -1, code_vectors.shape[-1])).view(
            *idx.shape, -1
        )  # (P, V, C, D)
        x = self.pool(e, code_mask)  # (P, V, D)
        visit_mask = code_mask.any(-1)  # (P, V)
        x = x + self.positions[: x.shape[1]].unsqueeze(0)  # (P, V, D)
        for block in self.blocks:
            x = block(x, visit_mask)  # (P, V, D)
        return masked_mean(self.norm(x), visit_mask)  # (P, D)


class Doctor2Vec(nn.Module):
    """Doctor-trial compatibility from a memory of the doctor's patients.

    Args:
        config: sizes and options.
        code_embedding: a module ``forward(ids) -> (*, D)`` shared by patients and trials
            (``nn.Embedding`` or ``HRREmbedding``); ``None``: a plain ``nn.Embedding(n_codes, dim)``.
    """

    def __init__(self, config: Doctor2VecConfig, code_embedding: nn.Module | None = None) -> None:
        super().__init__()
        self.config = cfg = config
        d = cfg.dim
        if code_embedding is None:
            code_embedding = nn.Embedding(cfg.n_codes, d, padding_idx=PAD)
            nn.init.normal_(code_embedding.weight, 0.0, INIT_STD)
        self.code = code_embedding
        self.visits = VisitEncoder(cfg) if cfg.patient_encoder == "visit-transformer" else None
        self.patient_proj = nn.Linear(d, d)
        self.patient_demo = Demographics(d, 1)
        self.patient_norm = nn.LayerNorm(d)
        self.words = nn.Embedding(cfg.n_words, d, padding_idx=PAD)
        nn.init.normal_(self.words.weight, 0.0, INIT_STD)
        self.trial_fields = nn.ModuleDict(
            {"conditions": nn.Linear(d, d), "excluded": nn.Linear(d, d), "text": nn.Linear(d, d)}
        )
        self.trial_demo = Demographics(d, 2)
        self.category = nn.Embedding(N_CATEGORIES, d)
        nn.init.normal_(self.category.weight, 0.0, INIT_STD)
        self.trial_norm = nn.LayerNorm(d)
        self.code_norm = nn.LayerNorm(d)  # code vectors at unit scale whatever the embedding's init
        self.code_key = nn.Linear(d, d, bias=False)  # code-level keys (a trial reads a patient's codes)
        with torch.no_grad():  # start from "a code matches itself": identity key, identity condition map
            self.code_key.weight.copy_(torch.eye(d))
            self.trial_fields["conditions"].weight.copy_(torch.eye(d))
            self.trial_fields["conditions"].bias.zero_()
        self.evidence = nn.Linear(d, d)  # what the code-level read adds to a patient's memory vector
        self.key = nn.Linear(d, d, bias=False)  # patient-level memory keys (read addresses)
        self.value = nn.Linear(d, d, bias=False)  # memory values (what a read returns)
        # criteria-aware read: a patient's eligibility for a trial, softly, from the best match of their codes
        # to the trial's conditions and to its exclusions (per condition code, identity-initialised maps),
        # their age against the age band and their sex against the trial's; it biases the patient-level
        # read and its sum over the memory (a soft count of eligible patients) enters the logit directly
        self.cond_query = nn.Linear(d, d, bias=False)  # condition code -> code-level query
        self.excl_query = nn.Linear(d, d, bias=False)  # excluded code -> code-level query
        with torch.no_grad():
            self.cond_query.weight.copy_(torch.eye(d))
            self.excl_query.weight.copy_(torch.eye(d))
        # match -> probability sigmoid(a s + b): a sharp threshold at s = 10/3 to start with (unit-scale code
        # vectors: a code matching itself scores about 8, a different one about 0 +- 1)
        self.match_scale = nn.Parameter(torch.full((1,), 3.0))
        self.match_bias = nn.Parameter(torch.full((1,), -10.0))
        self.age_slope = nn.Parameter(torch.full((1,), 10.0))  # steepness of the age-band edges (per decade)
        self.read_bias = nn.Parameter(torch.ones(2))  # weights of (best match, log eligibility) in the read
        self.count_weight = nn.Parameter(torch.ones(1))
        self.drop = nn.Dropout(cfg.dropout)
        self.head = nn.Sequential(
            nn.Linear(2 * d + N_HEAD_SCALARS, cfg.hidden),
            nn.GELU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.hidden, 1),
        )
        # the head starts silent: the first ranking is the soft count of eligible patients
        with torch.no_grad():
            self.head[-1].weight.zero_()
            self.head[-1].bias.zero_()

    # --- encoders ----------------------------------------------------------------------------------

    def embed(self, *ids: Tensor) -> list[Tensor]:
        """Embed several id tensors with one lookup of their distinct codes (an HRR matrix is built once).

        Shapes: each ``(*)`` -> ``(*, D)``.
        """
        flat = torch.cat([i.reshape(-1) for i in ids]).long()  # (n,)
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= self.config.n_codes):
            raise ValueError(
                f"code ids must lie in [0, {self.config.n_codes - 1}], "
                f"got [{int(flat.min())}, {int(flat.max())}]"
            )
        uniq, inv = torch.unique(flat, return_inverse=True)  # (U,), (n,)
        vec = self.code_norm(self.code(uniq).to(self.patient_proj.weight.dtype))[inv]  # (n, D)
        d = vec.shape[-1] if vec.dim() == 2 else self.config.dim
        return [v.view(*i.shape, d) for i, v in zip(ids, vec.split([i.numel() for i in ids]), strict=True)]

    def encode_patients(
        self,
        codes: Tensor,
        segments: Tensor | None = None,
        age: Tensor | None = None,
        sex: Tensor | None = None,
        code_vectors: Tensor | None = None,
    ) -> Tensor:
        """Patient vectors.

        Shapes:
            - codes, segments: ``(P, T)`` concept ids (0 = padding) and visit indices
            - age: ``(P,)`` years (NaN = unknown); sex: ``(P,)`` index into SEXES (0 = unknown)
            - code_vectors: ``(P, T, D)`` the embedded codes when the caller looked them up already
            - output: ``(P, D)``
        """
        if codes.dim() != 2:
            raise ValueError(f"patient_codes must be (P, T), got shape {tuple(codes.shape)}")
        mask = codes != PAD  # (P, T)
        empty = (~mask.any(-1)).nonzero().flatten()
        if empty.numel():
            raise ValueError(f"patient rows {empty[:5].tolist()} have no codes; drop such patients")
        e = self.embed(codes)[0] if code_vectors is None else code_vectors  # (P, T, D)
        if self.visits is not None:
            seg = segments if segments is not None else torch.zeros_like(codes)
            pooled = self.visits(e, codes, seg)  # (P, D)
        else:
            pooled = masked_mean(e, mask)  # (P, D)
        p = codes.shape[0]
        age = age if age is not None else torch.full((p,), float("nan"), device=codes.device)
        sex = sex if sex is not None else torch.zeros(p, dtype=torch.long, device=codes.device)
        x = self.patient_proj(self.drop(pooled)) + self.patient_demo(age.unsqueeze(-1).float(), sex.long())
        return self.patient_norm(x)  # (P, D)

    def encode_trials(
        self, batch: dict[str, Tensor], code_vectors: tuple[Tensor, Tensor] | None = None
    ) -> Tensor:
        """Trial vectors from ``conditions (B, K)``, ``excluded (B, X)``, ``age_band (B, 2)``, ``sex (B,)``,
        ``category (B,)`` and ``text (B, W)`` (``code_vectors``: the embedded conditions ``(B, K, D)`` and
        excluded codes ``(B, X, D)`` when looked up already). Output ``(B, D)``."""
        cond, excl, text = batch["conditions"], batch["excluded"], batch["text"]
        if not bool((cond != PAD).any(-1).all()):
            rows = (~(cond != PAD).any(-1)).nonzero().flatten()[:5].tolist()
            raise ValueError(f"trial rows {rows} have no condition codes; skip such trials")
        f = self.trial_fields
        e_cond, e_excl = self.embed(cond, excl) if code_vectors is None else code_vectors
        x = f["conditions"](masked_mean(e_cond, cond != PAD))  # (B, D)
        if excl.shape[1]:
            x = x + f["excluded"](masked_mean(e_excl, excl != PAD))  # (B, D)
        if text.shape[1]:
            x = x + f["text"](masked_mean(self.words(text), text != PAD))  # (B, D)
        x = x + self.trial_demo(batch["age_band"].float(), batch["sex"].long())
        x = x + self.category(batch["category"].long().clamp(0, N_CATEGORIES - 1))
        return self.trial_norm(self.drop(x))  # (B, D)

    # --- doctor and compatibility -----------------------------------------------------------------

    def _best_match(self, queries: Tensor, qmask: Tensor, codes: Tensor, keys: Tensor) -> Tensor:
        """Best (query code, patient code) score per (trial, patient). queries ``(U, K, D)``,
        qmask ``(U, K)``, codes ``(P, T)``, keys ``(P, T, D)`` -> ``(U, P, T)`` best over the K queries
        (-inf at padding)."""
        s = torch.einsum("ptd,ukd->upkt", keys, queries) / math.sqrt(self.config.dim)  # (U, P, K, T)
        s = s.masked_fill(~qmask[:, None, :, None], float("-inf")).amax(2)  # (U, P, T)
        return s.masked_fill((codes == PAD).unsqueeze(0), float("-inf"))

    def code_evidence(
        self, batch: dict[str, Tensor], e_cond: Tensor, e_excl: Tensor, codes: Tensor, code_vectors: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Code-level read: each trial reads each patient's codes (the lower level of the hierarchy).

        Shapes: e_cond ``(U, K, D)``, e_excl ``(U, X, D)`` (embedded condition / excluded codes), codes
        ``(P, T)``, code_vectors ``(P, T, D)`` -> evidence ``(U, P, D)`` (the patient's codes weighted by
        their match to the trial's conditions), best condition match ``(U, P)`` and eligibility ``(U, P)``
        in [0, 1].
        """
        keys = self.code_key(code_vectors)  # (P, T, D)
        s = self._best_match(self.cond_query(e_cond), batch["conditions"] != PAD, codes, keys)  # (U, P, T)
        a = torch.nan_to_num(s.softmax(-1), nan=0.0)  # (U, P, T)
        best = s.amax(-1).clamp(min=NO_MATCH)  # (U, P)
        elig = torch.sigmoid(self.match_scale * best + self.match_bias)  # (U, P) has a condition
        excl = batch["excluded"]
        if excl.shape[1]:
            worst = self._best_match(self.excl_query(e_excl), excl != PAD, codes, keys).amax(-1)  # (U, P)
            hit = torch.sigmoid(self.match_scale * worst.clamp(min=NO_MATCH) + self.match_bias)  # (U, P)
            elig = elig * (1 - hit)  # no excluded condition (trials without exclusions: worst = NO_MATCH)
        return torch.einsum("upt,ptd->upd", a, code_vectors), best, elig * self.criteria_fit(batch)

    def criteria_fit(self, batch: dict[str, Tensor]) -> Tensor:
        """Age band and sex of each trial against each patient's: ``(U, P)`` in [0, 1] (unknown = fits)."""
        band = batch["age_band"].float()  # (U, 2)
        p = batch["patient_codes"].shape[0]
        dev = band.device
        age = batch.get("patient_age")
        age = torch.full((p,), float("nan"), device=dev) if age is None else age.float()  # (P,)
        k = self.age_slope / 10.0  # the slope is per decade; ages are in years
        known = ~torch.isnan(age)  # (P,)
        a = torch.where(known, age, torch.zeros_like(age))[None, :]  # (1, P), no NaN in any gradient path
        lo = torch.sigmoid(k * (a - band[:, :1] + 0.5))  # (U, P)
        hi = torch.sigmoid(k * (band[:, 1:] - a + 0.5))  # (U, P)
        fit = torch.where(known[None, :], lo * hi, torch.ones_like(lo))  # (U, P)
        sex = batch.get("patient_sex")
        if sex is not None:
            ts = batch["sex"].long()[:, None]  # (U, 1), 0 = any
            ps = sex.long()[None, :]  # (1, P), 0 = unknown
            fit = fit * ((ts == 0) | (ps == 0) | (ts == ps)).to(fit.dtype)  # (U, P)
        return fit

    def doctor_vectors(
        self,
        trial: Tensor,
        patients: Tensor,
        mask: Tensor,
        evidence: Tensor | None,
        best: Tensor | None,
        elig: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Doctor vector per pair, the attention over the memory, the log match mass and the log soft count.

        Shapes: trial ``(B, D)``; patients ``(B, M, D)`` (trial-independent vectors); mask ``(B, M)``;
        evidence ``(B, M, D)``, best ``(B, M)`` and eligibility ``(B, M)`` from :meth:`code_evidence`
        (dynamic only) -> ``(B, D)``, ``(B, M)``, ``(B,)``, ``(B,)``.
        """
        n = mask.sum(-1, keepdim=True).clamp(min=1).to(patients.dtype)  # (B, 1)
        if self.config.doctor == "static":
            zero = torch.zeros_like(n.squeeze(-1))
            return masked_mean(patients, mask), mask.to(patients.dtype) / n, zero, zero
        mem = patients + self.evidence(evidence)  # (B, M, D)
        extra = torch.stack([best, torch.log(elig + LOG_FLOOR)], -1)  # (B, M, 2): the criteria as keys
        keys = torch.cat([self.key(mem), extra], -1)  # (B, M, D + 2)
        values = self.value(mem)  # (B, M, D)
        scale = 1.0 / math.sqrt(self.config.dim)
        u, o, att, mass = trial, trial, None, None
        for _ in range(self.config.hops):
            q = torch.cat([u * scale, self.read_bias.expand(u.shape[0], 2)], -1)  # (B, D + 2)
            o, att = memory_read(q, keys, values, mask)  # (B, D), (B, M)
            if mass is None:  # log of the first read's total match mass (the softmax normaliser)
                scores = torch.einsum("bmd,bd->bm", keys, q).masked_fill(~mask, float("-inf"))  # (B, M)
                mass = torch.logsumexp(scores, -1)  # (B,)
            u = u + o  # (B, D)
        return o, att, mass, torch.log1p((elig * mask).sum(-1))

    def forward(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Compatibility logits and attention over each doctor's memory.

        ``batch``: ``patient_codes (P, T)``, optional ``patient_segments (P, T)``, ``patient_age (P,)``,
        ``patient_sex (P,)``; ``memory (B, M)`` row indices into the patients (-1 = empty slot); the trial
        fields of :meth:`encode_trials` for U distinct trials and ``pair_trial (B,)`` indices into them
        (absent: one trial row per pair).

        Shapes:
            - output: logits ``(B,)``, attention ``(B, M)`` (0 at empty slots)
        """
        memory = batch["memory"]
        if memory.dim() != 2:
            raise ValueError(f"memory must be (B, M) patient row indices, got shape {tuple(memory.shape)}")
        if memory.shape[1] > self.config.max_memories:
            raise ValueError(f"{memory.shape[1]} memory slots exceed max_memories {self.config.max_memories}")
        codes = batch["patient_codes"]
        p, b = codes.shape[0], memory.shape[0]
        if memory.numel() and int(memory.max()) >= p:
            raise ValueError(f"memory indices must be < {p} (patients in the batch), got {int(memory.max())}")
        mask = memory >= 0  # (B, M)
        empty = (~mask.any(-1)).nonzero().flatten()
        if empty.numel():
            raise ValueError(
                f"batch rows {empty[:5].tolist()} are doctors with no patients; skip such doctors"
            )
        pair_trial = batch.get("pair_trial")
        n_trials = batch["conditions"].shape[0]
        if pair_trial is None:
            if n_trials != b:
                raise ValueError(f"{n_trials} trial rows for {b} pairs: give pair_trial (B,) indices")
            pair_trial = torch.arange(b, device=memory.device)
        elif pair_trial.shape != (b,) or (
            b and (int(pair_trial.min()) < 0 or int(pair_trial.max()) >= n_trials)
        ):
            raise ValueError(f"pair_trial must be ({b},) indices into {n_trials} trials")
        e_codes, e_cond, e_excl = self.embed(codes, batch["conditions"], batch["excluded"])
        pv = self.encode_patients(
            codes, batch.get("patient_segments"), batch.get("patient_age"), batch.get("patient_sex"), e_codes
        )  # (P, D)
        trials = self.encode_trials(batch, (e_cond, e_excl))  # (U, D)
        slot = memory.clamp(min=0)  # (B, M)
        patients = pv[slot] * mask.unsqueeze(-1).to(pv.dtype)  # (B, M, D)
        evidence = best = elig = None
        if self.config.doctor == "dynamic":
            ev, bt, el = self.code_evidence(batch, e_cond, e_excl, codes, e_codes)  # (U, P, D), (U, P) x 2
            row = pair_trial.unsqueeze(1)  # (B, 1)
            evidence, best, elig = ev[row, slot], bt[row, slot] * mask, el[row, slot] * mask  # (B, M, ...)
        u = trials[pair_trial]  # (B, D)
        doctor, att, mass, count = self.doctor_vectors(u, patients, mask, evidence, best, elig)
        n = torch.log(mask.sum(-1).to(pv.dtype))  # (B,)
        z = torch.cat([doctor, doctor * u, torch.stack([mass, count, n], -1)], -1)  # (B, 2D + 3)
        return self.head(z).squeeze(-1) + self.count_weight * count, att  # (B,), (B, M)

    def loss(self, batch: dict[str, Tensor], pos_weight: float | None = None) -> tuple[Tensor, Tensor]:
        """Binary cross-entropy on ``batch['label']``; returns ``(loss, logits)``."""
        logits, _ = self(batch)
        w = None if pos_weight is None else torch.tensor(pos_weight, device=logits.device)
        return F.binary_cross_entropy_with_logits(logits, batch["label"].float(), pos_weight=w), logits

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
