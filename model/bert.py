"""HRRBERT: a post-LayerNorm BERT over ICD-code sequences whose token embedding is ``HRREmbedding``.

Everything a forward pass needs is in this file (HF ``modeling_bert.py`` / nanoGPT style): the config,
the embeddings (token = HRR, plus learnable position and visit-segment embeddings), the encoder, the MLM
head tied to the generated embedding matrix, and pooled heads for the binary (mortality) and multi-label
(22 ICD-10 chapters) tasks. The embedding matrix is built once per MLM forward and used both for the
input lookup and for the decoder; a classification forward composes only the rows the batch needs.

Dimension legend: B batch, T codes per sequence, D model dim, H heads, K = D // H head dim,
F feed-forward dim, N concepts (vocabulary = program concepts), M masked positions in a batch,
L task labels (1 for mortality, 22 for chapters).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hrr_kernel import MODES, EmbeddingMode, HRREmbedding, Program, mode_spec

from .code_cache import CodeCache, cache_distribution, mix_log_probs, visible_codes
from .common import (
    CACHE_KEY,
    CONFIG_FILE,
    UNTRAINED_KEY,
    WEIGHTS_FILE,
    ConfigDict,
    check_positive,
    save_folder,
    shape_mismatch,
    weight_shapes,
)
from .errors import PretrainedFileError, ProgramMismatchError
from .roles import RoleReadout

__all__ = [
    "HRRBertSettings",
    "HRRBert",
    "PRESETS",
    "preset",
    "bert_base",
    "bert_small",
    "bert_mini",
    "bert_tiny",
    "TASKS",
    "POOLINGS",
]

MODEL_KIND = "hrrbert"
# task name -> number of outputs of its pooled head (binary: one logit; multi-label: one per ICD-10 chapter)
TASKS: dict[str, int] = {"mortality": 1, "chapters": 22}
ROLE_POOLING = "cls+mean+roles"  # the pooling whose heads also read the role readout (model.roles)
POOLINGS = ("cls", "cls+mean", ROLE_POOLING)  # HRRBertSettings.pooling: the task heads' input
PAD_CODE = "[PAD]"  # the program's padding token (hrr_kernel.SPECIAL_TOKENS[0])


@dataclass
class HRRBertSettings(ConfigDict):
    """Sizes and options of an HRRBERT (saved as ``config.json``)."""

    dim: int = 768  # hidden size D (also the HRR embedding dimension)
    n_layers: int = 12  # Transformer layers
    n_heads: int = 12  # attention heads H (D must be divisible by H)
    ffn_dim: int = 3072  # feed-forward inner size F
    max_len: int = 128  # codes per sequence, [CLS] included (position embeddings)
    max_segments: int = 100  # visit-segment embeddings (visits per sequence)
    dropout: float = 0.1  # dropout on embeddings, residual branches and the pooled heads
    attn_dropout: float = 0.1  # dropout on attention probabilities
    layer_norm_eps: float = 1e-12  # LayerNorm epsilon (BERT's)
    init_std: float = 0.02  # std of the N(0, std) initialisation of every weight matrix
    mode: str = "base"  # token embedding: a name of hrr_kernel.MODES (its spec: hrr_kernel/modes.py)
    normalize: bool = False  # scale each HRR concept vector to unit L2 norm
    freq_resolution: float = 10.0  # bins per unit of log frequency (mode freq)
    # MLM logits from the HRR half spectra (HRREmbedding.decode), inputs by row; None: where it is one
    # matmul (mode base); add, cat and freq would add a second decoder matmul for their table
    spectral_decoder: bool | None = None
    spectral_atoms: bool = False  # atoms and relations stored as half spectra (HRREmbedding spectral_atoms)
    # the width H of the HRR composition, mapped to dim by a learned projection (HRREmbedding hrr_width;
    # base and freq); None: composed at dim
    hrr_width: int | None = None
    # what the task heads' pooler reads: cls (BERT's [CLS] state) or cls+mean ([CLS] plus the mean of the
    # real positions' states, so the heads see how much of the history each kind of code fills);
    # cls+mean+roles adds the history's counts of each code's ICD chapter read from its composition by
    # unbinding (model.roles.RoleReadout; composing modes only)
    pooling: str = "cls"

    @property
    def spec(self) -> EmbeddingMode:
        """The embedding mode's spec (:data:`hrr_kernel.MODES`)."""
        return mode_spec(self.mode)

    @property
    def uses_spectral_decoder(self) -> bool:
        """Whether MLM logits are computed in the spectral domain (``spectral_decoder``, resolved: by
        default where the mode's spec says the decoder is one matmul)."""
        spec = self.spec
        if not spec.composes:
            return False
        return spec.spectral_decoder if self.spectral_decoder is None else bool(self.spectral_decoder)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {tuple(MODES)}, got {self.mode!r}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        self.spec.check_width(self.hrr_width)  # a ShapeError, which is a ValueError
        if self.pooling == ROLE_POOLING and not self.spec.composes:
            raise ValueError(
                f"pooling {ROLE_POOLING} reads each code's composition by unbinding; mode {self.mode!r} "
                "composes nothing"
            )
        if self.dim % self.n_heads:
            raise ValueError(f"dim ({self.dim}) must be divisible by n_heads ({self.n_heads})")
        check_positive(self, ("dim", "n_layers", "n_heads", "ffn_dim", "max_len", "max_segments"))


def bert_base(**overrides: Any) -> HRRBertSettings:
    """The paper's BERT-base: 12 layers, 768 wide, 12 heads, 3072 feed-forward."""
    return replace(HRRBertSettings(), **overrides)


def bert_small(**overrides: Any) -> HRRBertSettings:
    """A CPU-sized model: 4 layers, 256 wide, 4 heads, 1024 feed-forward."""
    return replace(HRRBertSettings(dim=256, n_layers=4, n_heads=4, ffn_dim=1024), **overrides)


def bert_tiny(**overrides: Any) -> HRRBertSettings:
    """A test-sized model: 2 layers, 64 wide, 2 heads, 256 feed-forward."""
    return replace(HRRBertSettings(dim=64, n_layers=2, n_heads=2, ffn_dim=256), **overrides)


def bert_mini(**overrides: Any) -> HRRBertSettings:
    """The demo's model: 2 layers, 128 wide, 2 heads, 512 feed-forward (HRR vectors of 128 dimensions)."""
    return replace(HRRBertSettings(dim=128, n_layers=2, n_heads=2, ffn_dim=512), **overrides)


PRESETS = {"tiny": bert_tiny, "mini": bert_mini, "small": bert_small, "bert-base": bert_base}


def preset(name: str, **overrides: Any) -> HRRBertSettings:
    """A preset config by name (``tiny``, ``small``, ``bert-base``) with field overrides."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name](**overrides)


# the largest sizes a saved config.json may claim (a bert-base is 768 wide, 12 layers, 3072 feed-forward,
# 512 positions); a larger claim is refused before anything is allocated (HRRBert.from_pretrained)
SIZE_BOUNDS = {
    "dim": 1 << 16,
    "n_layers": 1024,
    "n_heads": 1 << 16,
    "ffn_dim": 1 << 20,
    "max_len": 1 << 20,
    "max_segments": 1 << 20,
}


def _check_sizes(
    config: HRRBertSettings, shapes: dict[str, tuple[int, ...]], cfg_path: Path, weights: Path
) -> None:
    """Refuse a config whose sizes are beyond :data:`SIZE_BOUNDS` or disagree with the shapes the weights'
    header declares (:class:`PretrainedFileError` naming ``config.json``), before any tensor is made."""
    for name, bound in SIZE_BOUNDS.items():
        value = getattr(config, name)
        if value > bound:
            raise PretrainedFileError(
                cfg_path, f"config {name!r} is {value}, beyond the largest supported size {bound}"
            )
    layers = {int(k.split(".")[1]) for k in shapes if k.startswith("layers.") and k.split(".")[1].isdigit()}
    if shapes and len(layers) != config.n_layers:
        raise PretrainedFileError(
            cfg_path, f"config 'n_layers' is {config.n_layers} but {weights.name} holds {len(layers)} layers"
        )
    c = config
    expected = {
        "embeddings.position.weight": ((c.max_len, c.dim), "max_len, dim"),
        "embeddings.segment.weight": ((c.max_segments, c.dim), "max_segments, dim"),
        **{f"layers.{i}.ffn_in.weight": ((c.ffn_dim, c.dim), "ffn_dim, dim") for i in range(c.n_layers)},
    }
    for key, (shape, names) in expected.items():
        if key in shapes and tuple(shapes[key]) != shape:
            raise PretrainedFileError(
                cfg_path,
                f"config sizes ({names}) = {list(shape)} do not match {weights.name}, whose {key} has shape "
                f"{list(shapes[key])}",
            )


def _check_finite(state: dict[str, Tensor], weights: Path) -> None:
    """Refuse weights holding NaN or infinity (a training that diverged, or a damaged file): every score
    made from them would be NaN. :class:`PretrainedFileError` naming the file and the first such tensor."""
    for name in sorted(state):
        t = state[name]
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise PretrainedFileError(
                weights,
                f"tensor {name} holds {bad} of {t.numel()} values that are NaN or infinite; expected finite "
                "weights (did the training diverge? retrain, or load an earlier checkpoint's model)",
            )


class Embeddings(nn.Module):
    """Token (HRR) + position + visit-segment embeddings, then LayerNorm and dropout."""

    def __init__(self, config: HRRBertSettings, program: Program, log_frequency: Tensor | None) -> None:
        super().__init__()
        self.token = HRREmbedding(
            program,
            config.dim,
            config.mode,
            normalize=config.normalize,
            log_frequency=log_frequency,
            freq_resolution=config.freq_resolution,
            spectral_atoms=config.spectral_atoms,
            hrr_width=config.hrr_width,
        )
        self.position = nn.Embedding(config.max_len, config.dim)
        self.segment = nn.Embedding(config.max_segments, config.dim)
        self.norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)

    def forward(
        self,
        input_ids: Tensor,
        segment_ids: Tensor,
        token_matrix: Tensor | None,
        tokens: Tensor | None = None,
    ) -> Tensor:
        t = input_ids.shape[1]
        if tokens is not None:
            tok = tokens  # (B, T, D), given by the caller
        elif token_matrix is None:
            tok = self.token(input_ids)  # (B, T, D), composing only the rows present
        else:
            tok = F.embedding(input_ids, token_matrix)  # (B, T, D)
        pos = self.position.weight[:t]  # (T, D)
        x = tok + pos.unsqueeze(0) + self.segment(segment_ids)  # (B, T, D)
        return self.drop(self.norm(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention (fused QKV, ``scaled_dot_product_attention``)."""

    def __init__(self, config: HRRBertSettings) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.out = nn.Linear(config.dim, config.dim)
        self.attn_dropout = config.attn_dropout

    def _heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v split into heads: 3 x ``(B, H, T, K)``."""
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)  # 3 x (B, T, D)
        return tuple(z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))

    def probabilities(self, x: Tensor, attn_mask: Tensor) -> Tensor:
        """The attention probabilities ``(B, H, T, T)`` that :meth:`forward` weighs the values by."""
        q, k, _ = self._heads(x)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5  # (B, H, T, T)
        return torch.softmax(scores.masked_fill(~attn_mask, float("-inf")), dim=-1)

    def forward(self, x: Tensor, attn_mask: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self._heads(x)  # (B, H, T, K)
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)  # (B, H, T, K)
        y = y.transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.out(y)


class Layer(nn.Module):
    """A post-LayerNorm Transformer layer: ``x = LN(x + attn(x)); x = LN(x + ffn(x))``."""

    def __init__(self, config: HRRBertSettings) -> None:
        super().__init__()
        self.attn = SelfAttention(config)
        self.norm1 = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.ffn_in = nn.Linear(config.dim, config.ffn_dim)
        self.ffn_out = nn.Linear(config.ffn_dim, config.dim)
        self.norm2 = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, attn_mask: Tensor) -> Tensor:
        x = self.norm1(x + self.drop(self.attn(x, attn_mask)))  # (B, T, D)
        h = self.ffn_out(F.gelu(self.ffn_in(x)))  # (B, T, F) -> (B, T, D)
        return self.norm2(x + self.drop(h))  # (B, T, D)


class MLMHead(nn.Module):
    """Transform (dense, GELU, LayerNorm) then a decoder tied to the token embedding matrix, plus a bias."""

    def __init__(self, config: HRRBertSettings, n_concepts: int) -> None:
        super().__init__()
        self.dense = nn.Linear(config.dim, config.dim)
        self.norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(n_concepts))

    def forward(self, h: Tensor, token_matrix: Tensor) -> Tensor:
        h = self.norm(F.gelu(self.dense(h)))  # (M, D)
        return h @ token_matrix.to(h.dtype).t() + self.bias  # (M, N)

    def score(self, h: Tensor, rows: Tensor, ids: Tensor) -> Tensor:
        """The logits of :meth:`forward` for the concepts ``ids`` only, given their embedding ``rows``
        (the sampled-softmax decoder). Shapes: h ``(M, D)``, rows ``(K, D)``, ids ``(K,)`` -> ``(M, K)``."""
        h = self.norm(F.gelu(self.dense(h)))  # (M, D)
        return h @ rows.to(h.dtype).t() + self.bias.index_select(0, ids)  # (M, K)

    def decode(self, h: Tensor, token: HRREmbedding, spectrum: Tensor | None = None) -> Tensor:
        """The same logits as :meth:`forward` with the token embedding's matrix, computed by
        :meth:`hrr_kernel.HRREmbedding.decode` (the HRR part in the spectral domain). ``(M, D) -> (M, N)``."""
        h = self.norm(F.gelu(self.dense(h)))  # (M, D)
        return token.decode(h, spectrum) + self.bias  # (M, N)


class PooledHead(nn.Module):
    """BERT pooler (dense + tanh) on what ``HRRBert.pool_states`` gives, dropout, then one linear layer per
    task."""

    def __init__(self, config: HRRBertSettings) -> None:
        super().__init__()
        self.pool = nn.Linear(config.dim, config.dim)
        self.drop = nn.Dropout(config.dropout)
        self.tasks = nn.ModuleDict({name: nn.Linear(config.dim, n) for name, n in TASKS.items()})

    def forward(self, cls: Tensor, task: str) -> Tensor:
        pooled = self.drop(torch.tanh(self.pool(cls)))  # (B, D)
        return self.tasks[task](pooled)  # (B, L)


class HRRBert(nn.Module):
    """BERT with an ``HRREmbedding`` token embedding, a tied MLM head and pooled task heads.

    Args:
        config: sizes and the embedding mode.
        program: a loaded HRR program (:func:`hrr_kernel.load_program`); the vocabulary is its concepts.
        log_frequency: ``(N,)`` log code frequencies, required for mode ``freq``.

    ``forward`` does either MLM (``mlm_mask`` given: logits at the masked positions) or a task
    (``task`` given: pooled logits), so one ``DistributedDataParallel`` wrapper serves both.
    """

    def __init__(
        self, config: HRRBertSettings, program: Program, log_frequency: Tensor | None = None
    ) -> None:
        super().__init__()
        self.config = config
        self.program = program
        self.n_concepts = program.n_concepts
        # programs without a [PAD] concept (the synthetic ones of tests and benchmarks) pad with concept 0
        self.pad_id = program.special_id(PAD_CODE) if PAD_CODE in program.concept_codes else 0
        if log_frequency is not None:
            log_frequency = log_frequency.to(program.device)
        self.embeddings = Embeddings(config, program, log_frequency)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.n_layers))
        self.mlm = MLMHead(config, program.n_concepts)
        self.heads = PooledHead(config)
        # the history's ICD chapters read from the code vectors (pooling cls+mean+roles), None otherwise
        self.roles = RoleReadout(program, TASKS) if config.pooling == ROLE_POOLING else None
        # sorted ids of the tokens no training of this model has seen (None: not recorded); see
        # :meth:`settle_untrained`, saved in ``config.json``
        self.untrained_tokens: list[int] | None = None
        # the code cache of masked-code prediction (None: the model's softmax alone); see model.code_cache
        self.mlm_cache: CodeCache | None = None
        self._special: Tensor | None = None
        self._init_weights()
        self.to(program.device)

    def _init_weights(self) -> None:
        std = self.config.init_std
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, std)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, std)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if self.roles is not None:
            self.roles.reset_parameters()

    @property
    def program_id(self) -> str:
        return self.program.program_id

    def token_matrix(self) -> Tensor:
        """The full token embedding matrix, built once per step. Shapes: output ``(N, D)``."""
        token = self.embeddings.token
        with torch.autocast(self.program.device.type, enabled=False):
            return token.matrix()

    def special_tokens(self) -> Tensor:
        """Which tokens are the program's special ones (``[PAD]``, ``[MASK]``, ...). Shapes: ``(N,)`` bool."""
        if self._special is None:
            special = [v == "SPECIAL" for v in self.program.concept_vocabularies]
            self._special = torch.tensor(special or [False] * self.n_concepts, dtype=torch.bool)
        return self._special.to(self.program.device)

    def mlm_log_probs(
        self,
        logits: Tensor,
        token_matrix: Tensor,
        input_ids: Tensor,
        attention_mask: Tensor,
        predicted: Tensor,
    ) -> Tensor:
        """Log-probabilities of the codes at the ``predicted`` positions: with the code cache when the model
        has one (:attr:`mlm_cache`, see :mod:`model.code_cache`), else the log-softmax of ``logits``.

        Shapes: logits ``(M, N)`` at ``predicted``'s positions in row-major order; token_matrix ``(N, D)``;
        input_ids (as the model read them), attention_mask, predicted ``(B, T)`` -> ``(M, N)``.
        """
        if self.mlm_cache is None:
            return torch.log_softmax(logits.float(), dim=1)
        special = self.special_tokens()
        visible = visible_codes(input_ids, attention_mask, predicted, special)  # (B, T)
        cache, has = cache_distribution(token_matrix, input_ids, visible, special, self.mlm_cache.sharpness)
        rows = predicted.bool().nonzero(as_tuple=True)[0]  # (M,) row of each predicted position
        return mix_log_probs(logits, cache[rows], has[rows], self.mlm_cache.weight)

    def masked_log_probs(
        self, input_ids: Tensor, segment_ids: Tensor, attention_mask: Tensor, mlm_mask: Tensor
    ) -> Tensor:
        """Log-probabilities of the codes at the masked positions, with the code cache when the model has
        one (:meth:`mlm_log_probs`). Shapes: inputs ``(B, T)`` -> ``(M, N)`` (row-major, as ``forward``)."""
        e = self.token_matrix()  # (N, D)
        h = self.encode(input_ids, segment_ids, attention_mask, token_matrix=e)  # (B, T, D)
        logits = self.mlm(h[mlm_mask.bool()], e)  # (M, N)
        return self.mlm_log_probs(logits, e, input_ids, attention_mask, mlm_mask)

    def _check_inputs(self, input_ids: Tensor, segment_ids: Tensor, attention_mask: Tensor | None) -> None:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
        if segment_ids.shape != input_ids.shape:
            raise ValueError(
                f"segment_ids shape {tuple(segment_ids.shape)} != input_ids shape {tuple(input_ids.shape)}"
            )
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask shape {tuple(attention_mask.shape)} != "
                f"input_ids shape {tuple(input_ids.shape)}"
            )
        if input_ids.shape[1] > self.config.max_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_len {self.config.max_len}")

    def encode(
        self,
        input_ids: Tensor,
        segment_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_matrix: Tensor | None = None,
        tokens: Tensor | None = None,
        *,
        hidden_states: list[Tensor] | None = None,
        attentions: list[Tensor] | None = None,
    ) -> Tensor:
        """Contextual code representations (``tokens``: the token embeddings ``(B, T, D)``, already built).
        ``hidden_states`` / ``attentions``, when given, collect the input embeddings and each layer's output
        (L + 1 of ``(B, T, D)``) / each layer's attention probabilities (L of ``(B, H, T, T)``).

        Shapes:
            - input_ids, segment_ids, attention_mask (True/1 = real code): ``(B, T)``
            - token_matrix: ``(N, D)`` or None (then only the rows present are composed)
            - output: ``(B, T, D)``
        """
        self._check_inputs(input_ids, segment_ids, attention_mask)
        if attention_mask is None:
            attention_mask = input_ids != self.pad_id
        x = self.embeddings(input_ids.long(), segment_ids.long(), token_matrix, tokens)  # (B, T, D)
        attn_mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        if hidden_states is not None:
            hidden_states.append(x)
        for layer in self.layers:
            if attentions is not None:
                attentions.append(layer.attn.probabilities(x, attn_mask))
            x = layer(x, attn_mask)  # (B, T, D)
            if hidden_states is not None:
                hidden_states.append(x)
        return x

    def forward(
        self,
        input_ids: Tensor,
        segment_ids: Tensor,
        attention_mask: Tensor | None = None,
        *,
        mlm_mask: Tensor | None = None,
        task: str | None = None,
        candidates: Tensor | None = None,
    ) -> Tensor:
        """MLM logits at the masked positions, or pooled task logits. With ``candidates`` (MLM only), the
        logits of those concepts alone, composing only the rows of the batch's codes and the candidates
        (the sampled softmax of pretraining, :func:`pipelines.train.mlm.sample_candidates`): a step whose
        cost does not grow with the vocabulary.

        Shapes:
            - input_ids, segment_ids, attention_mask, mlm_mask: ``(B, T)``; candidates ``(K,)`` concept ids
            - output: ``(M, N)`` with ``mlm_mask`` (M = ``mlm_mask.sum()``, row-major order), ``(M, K)``
              with ``candidates`` too, else ``(B, L)``
        """
        if (mlm_mask is None) == (task is None):
            raise ValueError("give exactly one of mlm_mask (MLM) or task (classification)")
        if task is not None:
            if task not in TASKS:
                raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASKS)}")
            return self.task_logits(input_ids, segment_ids, attention_mask, task)  # (B, L)
        if mlm_mask.shape != input_ids.shape:
            raise ValueError(
                f"mlm_mask shape {tuple(mlm_mask.shape)} != input_ids shape {tuple(input_ids.shape)}"
            )
        if candidates is not None:
            return self._candidate_logits(input_ids, segment_ids, attention_mask, mlm_mask, candidates)
        if self.config.uses_spectral_decoder:
            # no full signal-domain matrix: the batch's rows are composed for the input, the tied decoder
            # reads the half spectra (equal logits up to float rounding)
            token = self.embeddings.token
            with torch.autocast(self.program.device.type, enabled=False):
                spec = token.spectrum()  # (N, 2F): one composition for the inputs and the decoder
                uniq, inv = torch.unique(input_ids.long().reshape(-1), return_inverse=True)
                tokens = F.embedding(inv, token.rows_from_spectrum(uniq, spec)).view(*input_ids.shape, -1)
            h = self.encode(input_ids, segment_ids, attention_mask, tokens=tokens)  # (B, T, D)
            return self.mlm.decode(h[mlm_mask.bool()], token, spec)  # (M, N)
        e = self.token_matrix()  # (N, D), used for the lookup and the decoder
        h = self.encode(input_ids, segment_ids, attention_mask, token_matrix=e)  # (B, T, D)
        return self.mlm(h[mlm_mask.bool()], e)  # (M, D) -> (M, N)

    def _candidate_logits(
        self,
        input_ids: Tensor,
        segment_ids: Tensor,
        attention_mask: Tensor | None,
        mlm_mask: Tensor,
        cand: Tensor,
    ) -> Tensor:
        """:meth:`forward` with ``candidates``: one batch-row composition serves the inputs and the decoder.
        Shapes: ``(B, T)`` inputs, cand ``(K,)`` -> ``(M, K)``."""
        if cand.dim() != 1:
            raise ValueError(f"candidates must be 1-D concept ids, got shape {tuple(cand.shape)}")
        flat = input_ids.long().reshape(-1)  # (B*T,)
        uniq, inv = torch.unique(torch.cat([flat, cand.long()]), return_inverse=True)  # (U,), (B*T + K,)
        rows = self.embeddings.token.rows(uniq)  # (U, D): only these are composed
        tokens = F.embedding(inv[: flat.numel()], rows).view(*input_ids.shape, -1)  # (B, T, D)
        h = self.encode(input_ids, segment_ids, attention_mask, tokens=tokens)  # (B, T, D)
        cand_rows = F.embedding(inv[flat.numel() :], rows)  # (K, D)
        return self.mlm.score(h[mlm_mask.bool()], cand_rows, cand.long())  # (M, K)

    def task_logits(
        self, input_ids: Tensor, segment_ids: Tensor, attention_mask: Tensor | None, task: str
    ) -> Tensor:
        """The task heads' logits ``(B, L)``: the pooled head on :meth:`pool_states`, plus, with pooling
        cls+mean+roles, the role readout's (the batch's rows composed once for both)."""
        if self.roles is None:
            h = self.encode(input_ids, segment_ids, attention_mask)  # (B, T, D)
            return self.heads(self.pool_states(h, attention_mask), task)  # (B, L)
        token = self.embeddings.token
        uniq, inv = torch.unique(input_ids.long().reshape(-1), return_inverse=True)  # (U,), (B*T,)
        c = token.compose_rows(uniq)  # (U, H)
        tokens = F.embedding(inv, token.spec.finish(token, c, uniq)).view(*input_ids.shape, -1)  # (B, T, D)
        h = self.encode(input_ids, segment_ids, attention_mask, tokens=tokens)  # (B, T, D)
        logits = self.heads(self.pool_states(h, attention_mask), task)  # (B, L)
        return logits + self.role_logits(input_ids, segment_ids, attention_mask, task, (uniq, inv, c))

    def role_logits(
        self,
        input_ids: Tensor,
        segment_ids: Tensor,
        attention_mask: Tensor | None,
        task: str,
        composed: tuple[Tensor, Tensor, Tensor] | None = None,
    ) -> Tensor:
        """The role readout's logits ``(B, L)`` (pooling cls+mean+roles): each code's soft ICD chapter by
        unbinding its composition, counted over the history (:mod:`model.roles`). ``composed``: the batch's
        distinct ids, each position's index into them and their compositions ``(U, H)``, when the caller
        already has them."""
        if self.roles is None:
            raise ValueError(f"pooling {self.config.pooling!r} has no role readout (pooling {ROLE_POOLING})")
        token = self.embeddings.token
        if composed is None:
            uniq, inv = torch.unique(input_ids.long().reshape(-1), return_inverse=True)
            composed = (uniq, inv, token.compose_rows(uniq))
        uniq, inv, c = composed
        if attention_mask is None:
            attention_mask = input_ids != self.pad_id
        keep = attention_mask.bool() & ~self.special_tokens()[input_ids.long()]  # (B, T)
        soft = self.roles.soft_roles(
            token.spec.hrr_space(token, c, uniq), token.atom_vectors(), token.relation_vectors()
        )  # (U, K)
        feats = self.roles.features(
            soft, inv.view(input_ids.shape), input_ids.long(), segment_ids.long(), keep
        )
        return self.roles(feats, task)

    def set_pooling(self, pooling: str) -> None:
        """Make the task heads read ``pooling`` (fine-tuning's choice): the config records it, and the role
        readout is added (freshly initialised: no effect until trained) or dropped."""
        self.config = replace(self.config, pooling=pooling)  # checked by HRRBertSettings
        if pooling != ROLE_POOLING:
            self.roles = None
        elif self.roles is None:
            dtype = self.heads.pool.weight.dtype
            self.roles = RoleReadout(self.program, TASKS).to(device=self.program.device, dtype=dtype)

    def pool_states(self, h: Tensor, attention_mask: Tensor | None) -> Tensor:
        """What the task heads' pooler reads, ``(B, T, D)`` -> ``(B, D)``: the [CLS] state (``pooling``
        cls), or the [CLS] state plus the mean of the states at real positions (``attention_mask`` 1; all
        positions when it is None), [CLS] included (cls+mean, and cls+mean+roles, whose role readout adds its
        own logits: :meth:`task_logits`). Padding never changes it."""
        cls = h[:, 0]  # (B, D)
        if self.config.pooling == "cls":
            return cls
        if attention_mask is None:
            return cls + h.mean(1)
        m = attention_mask.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
        return cls + (h * m).sum(1) / m.sum(1).clamp_min(1.0)

    # --- persistence -------------------------------------------------------------------------------

    def save_pretrained(
        self,
        directory: str | Path,
        extra: dict[str, Any] | None = None,
        *,
        carry_program: bool = True,
        graph: bool = True,
        card: bool = True,
    ) -> Path:
        """Write a self-contained model folder: ``config.json`` and ``model.safetensors`` (no pickle), both
        recording the program id, plus (``carry_program``) a copy of the program in ``program/`` and
        ``vocab.txt``, and (``card``) a model card ``README.md`` (see :mod:`model.card`).

        ``config.json`` is also a Hugging Face config (``model_type`` ``hrrbert``, ``architectures``), read
        by ``model.hf``; ``extra`` adds keys to it (run id, task, ...). ``graph=False`` copies only the
        program tables the model needs (not ``graph/*``). A program folder that no longer exists is
        skipped with a warning (the folder then loads only with the program given).
        """
        from .card import (
            AUTO_MAP,
            PROGRAM_DIR,
            VOCAB_FILE,
            copy_program,
            vocab_tokens,
            write_hf_files,
            write_model_card,
            write_vocab,
        )

        extra = dict(extra or {})
        arch = "HRRBertForSequenceClassification" if extra.get("task") else "HRRBertForMaskedLM"
        meta = {
            "kind": MODEL_KIND,
            "model_type": MODEL_KIND,
            "architectures": [arch],
            "auto_map": AUTO_MAP,
            "config": asdict(self.config),
            "program_id": self.program_id,
            "n_concepts": self.n_concepts,
            **({UNTRAINED_KEY: self.untrained_tokens} if self.untrained_tokens is not None else {}),
            **({CACHE_KEY: self.mlm_cache.to_dict()} if self.mlm_cache is not None else {}),
            **extra,
        }
        d = Path(directory)
        if carry_program:
            d.mkdir(parents=True, exist_ok=True)
            carried = copy_program(self.program.path, d / PROGRAM_DIR, graph=graph)
            tokens = vocab_tokens(d / PROGRAM_DIR if carried else None, list(self.program.concept_codes))
            write_vocab(d / VOCAB_FILE, tokens)
            write_hf_files(d, max_len=self.config.max_len, max_segments=self.config.max_segments)
        save_folder(d, self, meta, {"program_id": self.program_id, "kind": MODEL_KIND, "format": "pt"})
        if card:
            write_model_card(d)
        return d

    @classmethod
    def read_config(cls, directory: str | Path) -> dict[str, Any]:
        """The saved ``config.json`` of a model folder (kind, config, program_id, ...)."""
        p = Path(directory) / CONFIG_FILE
        if not p.is_file():
            raise PretrainedFileError(
                p, "missing; not a saved HRRBERT folder (expected config.json + model.safetensors)"
            )
        try:
            meta = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise PretrainedFileError(p, f"not valid JSON ({e})") from e
        if not isinstance(meta, dict) or meta.get("kind") != MODEL_KIND or "config" not in meta:
            raise PretrainedFileError(
                p, f"not an HRRBERT config (expected kind {MODEL_KIND!r} and a 'config')"
            )
        return meta

    @classmethod
    def from_pretrained(
        cls, directory: str | Path, program: Program | None = None, *, device: str | torch.device = "cpu"
    ) -> HRRBert:
        """Load a model saved by :meth:`save_pretrained` against ``program`` (whose id must match); without
        ``program``, the copy the folder carries (``program/``, loaded on ``device``)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        d = Path(directory)
        meta = cls.read_config(d)
        if program is None:
            program = cls.folder_program(d, device=device)
        if meta.get("program_id") != program.program_id:
            raise ProgramMismatchError(
                path=d / CONFIG_FILE, expected=meta.get("program_id"), found=program.program_id
            )
        try:
            config = HRRBertSettings.from_dict(meta["config"])
        except (TypeError, ValueError) as e:
            raise PretrainedFileError(d / CONFIG_FILE, f"invalid config: {e}") from e
        w = d / WEIGHTS_FILE
        if not w.is_file():
            raise PretrainedFileError(w, "missing")
        shapes = weight_shapes(w)  # the header only: sizes are checked before anything is allocated
        _check_sizes(config, shapes, d / CONFIG_FILE, w)
        try:
            state = load_file(str(w), device=str(program.device))
        except (SafetensorError, OSError, ValueError) as e:
            raise PretrainedFileError(w, f"unreadable or corrupt safetensors file ({e})") from e
        _check_finite(state, w)
        placeholder = torch.zeros(program.n_concepts) if config.spec.frequency else None
        model = cls(config, program, log_frequency=placeholder)
        differs = shape_mismatch({k: tuple(v.shape) for k, v in model.state_dict().items()}, shapes)
        if differs:
            raise PretrainedFileError(w, f"weights do not fit config.json ({differs})")
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            raise PretrainedFileError(w, f"weights do not fit the config: {e}") from e
        untrained = meta.get(UNTRAINED_KEY)
        if untrained is not None:
            if not isinstance(untrained, list) or not all(
                isinstance(i, int) and 0 <= i < program.n_concepts for i in untrained
            ):
                raise PretrainedFileError(
                    d / CONFIG_FILE,
                    f"{UNTRAINED_KEY!r} must be a list of token ids in [0, {program.n_concepts})",
                )
            model.untrained_tokens = untrained
        if meta.get(CACHE_KEY) is not None:
            try:
                model.mlm_cache = CodeCache.from_dict(meta[CACHE_KEY])
            except ValueError as e:
                raise PretrainedFileError(d / CONFIG_FILE, f"{CACHE_KEY!r}: {e}") from e
        return model

    def settle_untrained(self, trained: Tensor) -> dict[str, int]:
        """After training: reset what no training reached, and record which tokens those were.

        ``trained`` marks the tokens this training's data held; a token the model's earlier record
        (``untrained_tokens``, e.g. from pretraining) does not list counts as trained too. Without a record,
        ``trained`` alone counts: call it so only on a model whose whole training ``trained`` covers (the
        end of pretraining); fine-tuning a model without a record leaves it unsettled. The rule:
        atoms and relations that only untrained tokens use become the mean of the trained ones of their
        kind (:func:`hrr_kernel.settle_untrained`); an untrained token's table row follows the mode's
        ``untrained_fill`` (:mod:`hrr_kernel.modes`): ``mean``, the mean of the trained codes' rows
        (special tokens left out; ``unstructured``, ``cat``), or ``zero``, the token being its
        composition alone (``add``); :mod:`model.carry` gives a
        new release's new tokens the same (its ``[UNK]`` row is that mean when no data held ``[UNK]``);
        None leaves it as it is (``gram``, ``ancestors``: the code keeps its own vector's initial draw, as
        GRAM does; only its ancestors' atoms are settled, counted as trained where a trained token's
        ancestor edge holds them). The MLM bias is left alone. Returns the counts.

        Shapes:
            - trained: ``(N,)`` bool
        """
        from hrr_kernel import SPECIAL_TOKENS, settle_untrained

        if trained.dtype != torch.bool or trained.shape != (self.n_concepts,):
            raise ValueError(
                f"trained must be a ({self.n_concepts},) bool tensor, "
                f"got {trained.dtype} {tuple(trained.shape)}"
            )
        trained = trained.cpu().clone()
        if self.untrained_tokens is not None:
            before = torch.ones(self.n_concepts, dtype=torch.bool)
            before[torch.tensor(self.untrained_tokens, dtype=torch.long)] = False
            trained |= before
        tok = self.embeddings.token
        out = {
            "tokens_untrained": int((~trained).sum()),
            "atoms_settled": 0,
            "relations_settled": 0,
            "rows_settled": 0,
        }
        if tok.spec.has_atoms:
            atoms = tok.atoms_spectrum if tok.spectral_atoms else tok.atoms
            relations = tok.relations_spectrum if tok.spectral_atoms else tok.relations  # None: gram
            edges = tok.spec.row_edges(self.program)  # None: every edge reaches the row
            counts = settle_untrained(self.program, atoms, relations, trained, edges)
            out.update(atoms_settled=counts["atoms_settled"], relations_settled=counts["relations_settled"])
        if tok.table is not None and tok.spec.untrained_fill is not None:
            todo = ~trained
            if todo.any():
                special = torch.tensor([c in SPECIAL_TOKENS for c in self.program.concept_codes])
                known = trained & ~special
                dev = tok.table.device
                zero = tok.spec.untrained_fill == "zero"
                if zero or known.any():  # no trained code to take a mean of: left as it is
                    with torch.no_grad():
                        fill = 0 if zero else tok.table[known.to(dev)].mean(0)
                        tok.table[todo.to(dev)] = fill
                    out["rows_settled"] = int(todo.sum())
        self.untrained_tokens = torch.nonzero(~trained).flatten().tolist()
        return out

    @staticmethod
    def folder_program(directory: str | Path, device: str | torch.device = "cpu") -> Program:
        """The program a saved model folder carries (``program/``), loaded and verified on ``device``."""
        from hrr_kernel import load_program

        from .card import PROGRAM_DIR

        p = Path(directory) / PROGRAM_DIR
        if not (p / "manifest.json").is_file():
            raise PretrainedFileError(
                p,
                "missing: this model folder does not carry its program; give the program it was trained "
                f"with (program_id in {CONFIG_FILE}) as --program PROGRAM, or copy that program folder here",
            )
        return load_program(p, device=device)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
