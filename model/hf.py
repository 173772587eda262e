"""Hugging Face ``transformers`` classes for HRRBERT (``pip install 'hrrbert[hf]'``).

Importing this module registers the model type ``hrrbert`` with the Auto classes, so that after one
``import model.hf``::

    AutoConfig.from_pretrained(folder)                          # HRRBertConfig
    AutoModel.from_pretrained(folder)                           # HRRBertModel
    AutoModelForMaskedLM.from_pretrained(folder)                # HRRBertForMaskedLM
    AutoModelForSequenceClassification.from_pretrained(folder)  # HRRBertForSequenceClassification

load a folder written by :meth:`model.HRRBert.save_pretrained` (or by ``save_pretrained`` of these
classes, which write the same folder): ``config.json`` (the HRRBERT config, which is also this
:class:`HRRBertConfig`), ``model.safetensors``, the program copy ``program/`` and ``vocab.txt``. The
program is read from the folder (or the Hub repository) and verified against its hashes; pass
``program=`` (a loaded :class:`hrr_kernel.Program` or a program folder) to use another copy of the same
program, e.g. one already on a GPU.

Every class holds one :class:`model.HRRBert` as ``self.hrrbert`` (the base-model prefix), whose token
embedding is the HRR kernel (``hrr_kernel.HRREmbedding``): the weights are those of the saved folder, key
for key, and the forward passes are ``HRRBert``'s. The program's tensors live on one device and the
weights are put there: for a GPU pass ``program=load_program(folder / "program", device="cuda")`` (or
``device_map="cuda"``, which needs ``accelerate``); ``.to(device)`` moves the weights but not the program.

Inputs: ``input_ids`` (token ids = rows of ``vocab.txt``), ``attention_mask`` (default: not ``[PAD]``)
and the visit segments as ``token_type_ids`` (or ``segment_ids``; default 0). Outputs are the usual
``transformers`` output classes.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PretrainedConfig,  # PreTrainedConfig in transformers 5; this name works in 4 and 5
    PreTrainedModel,
)
from transformers.modeling_outputs import BaseModelOutputWithPooling, MaskedLMOutput, SequenceClassifierOutput

from hrr_kernel import Program, load_program

from .bert import MODEL_KIND, TASKS, HRRBert, HRRBertSettings
from .card import PROGRAM_DIR, write_model_card
from .code_cache import CodeCache
from .common import CACHE_KEY
from .errors import PretrainedFileError
from .hf_tokenizer import HRRBertTokenizer

log = logging.getLogger(__name__)

__all__ = [
    "HRRBertConfig",
    "HRRBertPreTrainedModel",
    "HRRBertModel",
    "HRRBertForMaskedLM",
    "HRRBertForSequenceClassification",
]

# the usual transformers names, read-only views of HRRBertConfig.config / n_concepts
_DERIVED = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "vocab_size",
)
# chapter labels of the multi-label task head (ICD-10 chapters 1..22)
_LABELS = {"mortality": ["mortality"], "chapters": [f"chapter_{i}" for i in range(1, TASKS["chapters"] + 1)]}


@functools.cache
def _base_keys() -> frozenset[str]:
    """The keys of a bare ``PretrainedConfig().to_dict()`` (transformers' own)."""
    return frozenset(PretrainedConfig().to_dict())


def _bert_field(key: str) -> property:
    """A read-only property giving the BERT config's integer field ``key`` under a transformers name."""
    return property(lambda self: int(self.config[key]), doc=f"the BERT config's ``{key}``")


class HRRBertConfig(PretrainedConfig):
    """The HRRBERT ``config.json`` as a ``transformers`` config.

    Its keys are those :meth:`model.HRRBert.save_pretrained` writes: ``kind``, ``config`` (the
    :class:`model.HRRBertSettings` fields), ``program_id``, ``n_concepts`` and the run's extras (``task``,
    ``run_id``, ...), so ``HRRBert.read_config`` and ``AutoConfig`` read one file. The usual names
    (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``,
    ``max_position_embeddings``, ``vocab_size``) are read-only views of ``config``.
    """

    model_type = "hrrbert"

    def __init__(
        self,
        kind: str = MODEL_KIND,
        config: dict[str, Any] | HRRBertSettings | None = None,
        program_id: str | None = None,
        n_concepts: int | None = None,
        task: str | None = None,
        **kwargs: Any,
    ) -> None:
        if kind != MODEL_KIND:
            raise ValueError(f"not an HRRBERT config: kind is {kind!r}, expected {MODEL_KIND!r}")
        if config is None:
            config = HRRBertSettings()
        bert = (
            config if isinstance(config, HRRBertSettings) else HRRBertSettings.from_dict(config)
        )  # bad keys: ValueError
        if task is not None and task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASKS)}")
        self.kind = kind
        self.config = bert.to_dict()
        self.program_id = program_id
        self.n_concepts = n_concepts
        self.task = task
        for derived in _DERIVED:  # views of ``config``, never stored twice
            kwargs.pop(derived, None)
        super().__init__(**kwargs)

    @classmethod
    def from_bert_config(cls, bert_config: HRRBertSettings, program: Program, **kwargs: Any) -> HRRBertConfig:
        """A config for a new model of ``bert_config``'s sizes over ``program``'s vocabulary."""
        return cls(
            config=bert_config.to_dict(),
            program_id=program.program_id,
            n_concepts=program.n_concepts,
            **kwargs,
        )

    @property
    def bert_config(self) -> HRRBertSettings:
        return HRRBertSettings.from_dict(self.config)

    # transformers' names, read-only views of the BERT config
    hidden_size = _bert_field("dim")
    num_hidden_layers = _bert_field("n_layers")
    num_attention_heads = _bert_field("n_heads")
    intermediate_size = _bert_field("ffn_dim")
    max_position_embeddings = _bert_field("max_len")

    @property
    def vocab_size(self) -> int | None:
        return self.n_concepts

    def extras(self) -> dict[str, Any]:
        """The keys ``config.json`` carries beside the HRRBERT ones (run id, dataset id, task, ...)."""
        own = {"kind", "config", "program_id", "n_concepts", "model_type", "architectures"}
        base = _base_keys()
        out = {k: v for k, v in self.to_dict().items() if k not in base and k not in own and k[:1] != "_"}
        if self.task is None:
            out.pop("task", None)
        return out

    def to_diff_dict(self) -> dict[str, Any]:
        # HRRBert.read_config needs these keys even where they equal the defaults
        keys = ("kind", "config", "program_id", "n_concepts")
        return {**super().to_diff_dict(), **{k: getattr(self, k) for k in keys}}


def _resolve_program(
    name_or_path: str | os.PathLike, program: Program | str | os.PathLike | None, kwargs: dict[str, Any]
) -> Program:
    """The program to build the model over: ``program`` (loaded when a path), else the copy in the model
    folder or Hub repository ``name_or_path`` (``program/``), on the single device of ``device_map``."""
    if isinstance(program, Program):
        return program
    device_map = kwargs.get("device_map")
    device = device_map if isinstance(device_map, str | torch.device) and device_map != "auto" else "cpu"
    if isinstance(device, str) and device.isdigit():
        device = f"cuda:{device}"
    if program is not None:
        return load_program(program, device=device)
    from transformers.utils import cached_file

    sub = kwargs.get("subfolder") or ""
    hub = {
        k: kwargs[k]
        for k in ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only")
        if k in kwargs
    }

    def fetch(rel: str) -> str | None:
        return cached_file(
            name_or_path,
            f"{PROGRAM_DIR}/{rel}",
            subfolder=sub,
            _raise_exceptions_for_missing_entries=False,
            **hub,
        )

    manifest = fetch("manifest.json")
    if manifest is None:
        raise PretrainedFileError(
            Path(str(name_or_path), sub, PROGRAM_DIR),
            "missing; this model folder does not carry its program: pass program= (the program it was "
            "trained with)",
        )
    listed = json.loads(Path(manifest).read_text(encoding="utf-8")).get("files", [])
    for entry in listed:  # a Hub repository: fetch each file into the same snapshot folder
        fetch(str(entry["path"]))
    return load_program(Path(manifest).parent, device=device)


class HRRBertPreTrainedModel(PreTrainedModel):
    """Base of the HRRBERT ``transformers`` classes: one :class:`model.HRRBert` as ``self.hrrbert``.

    Args:
        config: an :class:`HRRBertConfig` (its ``program_id`` must be the program's).
        program: the :class:`hrr_kernel.Program` (or a program folder); default: the ``program/`` copy
            of the folder the config was loaded from (``config.name_or_path``).
        log_frequency: ``(N,)`` log code frequencies for a new model of mode ``freq`` (a loaded model
            takes its frequency encoding from the weights).
    """

    config_class = HRRBertConfig
    base_model_prefix = "hrrbert"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False

    def __init__(
        self,
        config: HRRBertConfig,
        program: Program | str | os.PathLike | None = None,
        log_frequency: Tensor | None = None,
    ) -> None:
        super().__init__(config)
        if program is None:
            if not config.name_or_path:
                raise ValueError(
                    "no program: pass program= (a loaded hrr_kernel.Program or a program folder) or load "
                    "the model with from_pretrained(folder)"
                )
            program = _resolve_program(config.name_or_path, None, {})
        elif not isinstance(program, Program):
            program = load_program(program)
        if config.program_id is not None and config.program_id != program.program_id:
            from .errors import ProgramMismatchError

            raise ProgramMismatchError(
                path=config.name_or_path, expected=config.program_id, found=program.program_id
            )
        bert = config.bert_config
        # built outright on the program's device (transformers initialises models on the meta device; the
        # HRR program's index tensors must be real, and HRRBert initialises its own weights)
        with torch.device(program.device):
            if log_frequency is None and bert.spec.frequency:  # the frequency encoding comes with the weights
                log_frequency = torch.zeros(program.n_concepts)
            self.hrrbert = HRRBert(bert, program, log_frequency=log_frequency)
        config.program_id, config.n_concepts = program.program_id, program.n_concepts
        # the code cache chosen after pretraining (model.code_cache), as HRRBert.from_pretrained reads it
        cache = getattr(config, CACHE_KEY, None)
        if cache:
            self.hrrbert.mlm_cache = CodeCache.from_dict(cache)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """Nothing: :class:`model.HRRBert` initialises its weights, and loading replaces them."""

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | os.PathLike,
        *model_args: Any,
        program: Program | str | os.PathLike | None = None,
        **kwargs: Any,
    ):
        """``transformers``' ``from_pretrained`` with the program of the folder (or ``program=``)."""
        _check_dtype(kwargs)
        program = _resolve_program(pretrained_model_name_or_path, program, kwargs)
        if issubclass(cls, HRRBertForSequenceClassification):
            # the Auto classes move ``task`` into the config they pass
            task = kwargs.get("task") or getattr(kwargs.get("config"), "task", None)
            _warn_new_head(pretrained_model_name_or_path, task)
        model = super().from_pretrained(pretrained_model_name_or_path, *model_args, program=program, **kwargs)
        return model if kwargs.get("device_map") is not None else model.to(program.device)

    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        *,
        is_main_process: bool = True,
        push_to_hub: bool = False,
        metrics: dict[str, Any] | None = None,
        graph: bool = True,
        card: bool = True,
        **kwargs: Any,
    ) -> None:
        """Write the self-contained HRRBERT folder (:meth:`model.HRRBert.save_pretrained`: config, weights
        without the ``hrrbert.`` prefix, program copy, vocabulary) and a model card with ``metrics``.
        ``transformers``' serialisation options (``state_dict``, ``max_shard_size``, ...) are ignored:
        the folder is always one safetensors file of the current weights."""
        if push_to_hub:
            raise ValueError(
                "save the folder, then upload it "
                "(model.push_to_hub(repo_id) or huggingface_hub.upload_folder)"
            )
        if not is_main_process:
            return
        d = Path(save_directory)
        if d.is_file():
            raise ValueError(f"{d}: is a file; save_pretrained needs a folder")
        self.hrrbert.save_pretrained(d, self.config.extras(), graph=graph, card=False)
        if card:
            write_model_card(d, metrics)

    @property
    def program(self) -> Program:
        return self.hrrbert.program

    def get_input_embeddings(self) -> nn.Module:
        return self.hrrbert.embeddings.token

    def resize_token_embeddings(self, *args: Any, **kwargs: Any):
        """Refused with the way to do it: the vocabulary is the program's tokens, and a token's vector is
        composed from the program's edges, so new codes come with a new program (``hrrbert carry``)."""
        raise NotImplementedError(
            "HRRBERT's vocabulary is its program's tokens: to add codes, compile a program that has them "
            "and carry the model to it (`hrrbert carry MODEL --program NEW_PROGRAM --out NEW_MODEL`), which "
            "keeps every trained atom and relation and composes the new codes from them"
        )

    def set_input_embeddings(self, value: nn.Module) -> None:
        raise NotImplementedError(
            "HRRBERT's token embedding is generated from its program; it cannot be replaced"
        )

    def _inputs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        segment_ids: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        if segment_ids is None:
            segment_ids = token_type_ids
        if segment_ids is None:
            segment_ids = torch.zeros_like(input_ids)
        return input_ids, segment_ids, attention_mask

    def _mask_id(self) -> int:
        return self.program.special_id("[MASK]")

    def _states(
        self, input_ids, attention_mask, token_type_ids, segment_ids, token_matrix, kwargs: dict
    ) -> tuple[Tensor, tuple[Tensor, ...] | None, tuple[Tensor, ...] | None]:
        """The final states ``(B, T, D)`` and, when ``output_hidden_states`` / ``output_attentions`` (the
        call's, else the config's) ask for them, what :meth:`model.HRRBert.encode` collects: the input
        embeddings and every layer's states, and every layer's attention probabilities."""
        hid, att = (kwargs.get(k) for k in ("output_hidden_states", "output_attentions"))
        hid = self.config.output_hidden_states if hid is None else hid
        att = self.config.output_attentions if att is None else att
        states: list[Tensor] | None = [] if hid else None
        probs: list[Tensor] | None = [] if att else None
        ids, seg, mask = self._inputs(input_ids, attention_mask, token_type_ids, segment_ids)
        h = self.hrrbert.encode(
            ids, seg, mask, token_matrix=token_matrix, hidden_states=states, attentions=probs
        )
        return h, (tuple(states) if hid else None), (tuple(probs) if att else None)


def _check_dtype(kwargs: dict[str, Any]) -> None:
    """``dtype`` / ``torch_dtype``: float32 (or ``auto``); any other is refused, not ignored."""
    for key in ("dtype", "torch_dtype"):
        v = kwargs.get(key)
        if v is None or v == "auto" or v == torch.float32 or v == "float32":
            continue
        raise ValueError(
            f"{key}={v}: HRRBERT's HRR composition runs its FFTs in float32 (torch's CPU FFT has no bfloat16 "
            "or float16), so the weights stay float32; for bf16 compute on CUDA load in float32 and run the "
            "model under torch.autocast('cuda', dtype=torch.bfloat16), as `hrrbert pretrain --bf16` does"
        )


def _warn_new_head(folder: str | os.PathLike, task: str | None) -> None:
    """Warn when the task head a classifier will use was never trained: a pretrained (masked-code) folder,
    or a folder fine-tuned on another task than ``task``."""
    p = Path(folder) / "config.json"
    try:
        saved = json.loads(p.read_text(encoding="utf-8")).get("task") if p.is_file() else None
    except (OSError, ValueError):
        return
    wanted = task or saved or "mortality"
    if saved != wanted:
        what = "a pretrained model (no fine-tuned head)" if saved is None else f"fine-tuned on {saved!r}"
        log.warning(
            "%s is %s: the %r head of HRRBertForSequenceClassification is newly initialised; fine-tune it "
            "before using its outputs",
            folder,
            what,
            wanted,
        )


def _result(output, return_dict: bool | None, config: HRRBertConfig):
    use = config.return_dict if return_dict is None else return_dict
    return output if use else output.to_tuple()


class HRRBertModel(HRRBertPreTrainedModel):
    """The encoder: ``last_hidden_state`` ``(B, T, D)`` and ``pooler_output`` ``(B, D)`` (the tanh pooler the
    task heads read, on [CLS] or on [CLS] plus the mean state: the model's ``pooling``; with pooling
    cls+mean+roles the role readout's logits are added by the classification head, not part of it)."""

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        segment_ids: Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ):
        h, hs, at = self._states(input_ids, attention_mask, token_type_ids, segment_ids, None, kwargs)
        pooled = torch.tanh(self.hrrbert.heads.pool(self.hrrbert.pool_states(h, attention_mask)))  # (B, D)
        out = BaseModelOutputWithPooling(
            last_hidden_state=h, pooler_output=pooled, hidden_states=hs, attentions=at
        )
        return _result(out, return_dict, self.config)


class HRRBertForMaskedLM(HRRBertPreTrainedModel):
    """Masked-code modelling: ``logits`` ``(B, T, N)`` over the vocabulary at every position (the decoder
    is tied to the HRR embedding matrix); ``labels`` ``(B, T)`` with -100 at unscored positions gives
    ``loss``."""

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        segment_ids: Tensor | None = None,
        labels: Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ):
        e = self.hrrbert.token_matrix()  # (N, D), for the lookup and the decoder
        h, hs, at = self._states(
            input_ids, attention_mask, token_type_ids, segment_ids, e, kwargs
        )  # (B, T, D)
        logits = self.hrrbert.mlm(h, e)  # (B, T, N)
        bert = self.hrrbert
        if bert.mlm_cache is not None and not self.training:
            # at the [MASK] positions: the code cache's log-probabilities (a softmax of them is them), as
            # HRRBert's own masked prediction; everywhere else the plain logits
            att = attention_mask if attention_mask is not None else input_ids != bert.pad_id
            masked = (input_ids == self._mask_id()) & att.bool()  # (B, T)
            if masked.any():
                mixed = bert.mlm_log_probs(logits[masked], e, input_ids, att, masked)  # (M, N)
                logits = logits.clone()
                logits[masked] = mixed.to(logits.dtype)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(), ignore_index=-100
            )
        out = MaskedLMOutput(loss=loss, logits=logits, hidden_states=hs, attentions=at)
        return _result(out, return_dict, self.config)


class HRRBertForSequenceClassification(HRRBertPreTrainedModel):
    """A pooled task head: ``config.task`` (``mortality``: one logit; ``chapters``: 22, multi-label; default
    ``mortality``). ``labels`` ``(B,)`` or ``(B, L)`` of 0/1 give a binary cross-entropy ``loss``."""

    def __init__(self, config: HRRBertConfig, *args: Any, **kwargs: Any) -> None:
        if config.task is None:
            config.task = "mortality"
        config.id2label = dict(enumerate(_LABELS[config.task]))
        config.label2id = {v: k for k, v in config.id2label.items()}
        config.problem_type = "multi_label_classification"
        super().__init__(config, *args, **kwargs)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        segment_ids: Tensor | None = None,
        labels: Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ):
        ids, seg, att = self._inputs(input_ids, attention_mask, token_type_ids, segment_ids)
        h, hs, at = self._states(input_ids, attention_mask, token_type_ids, segment_ids, None, kwargs)
        logits = self.hrrbert.heads(self.hrrbert.pool_states(h, att), self.config.task)  # (B, L), as HRRBert
        if self.hrrbert.roles is not None:  # pooling cls+mean+roles: the role readout's logits too
            logits = logits + self.hrrbert.role_logits(ids, seg, att, self.config.task)
        loss = None
        if labels is not None:
            loss = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype).view_as(logits))
        out = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=hs, attentions=at)
        return _result(out, return_dict, self.config)


AutoConfig.register(HRRBertConfig.model_type, HRRBertConfig, exist_ok=True)
AutoTokenizer.register(HRRBertConfig, slow_tokenizer_class=HRRBertTokenizer, exist_ok=True)
AutoModel.register(HRRBertConfig, HRRBertModel, exist_ok=True)
AutoModelForMaskedLM.register(HRRBertConfig, HRRBertForMaskedLM, exist_ok=True)
AutoModelForSequenceClassification.register(HRRBertConfig, HRRBertForSequenceClassification, exist_ok=True)
