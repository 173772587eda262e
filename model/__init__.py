"""Models over ICD-code sequences whose token embedding is the HRR kernel.

Public API: :class:`HRRBert` (BERT with ``HRREmbedding`` tokens, a tied MLM head and pooled task
heads), :class:`HRRBertSettings` and its presets, the memory networks (:class:`MemN2N`, :class:`MemNN`), the
visit-level :class:`VisitTransformer`, :class:`Doctor2Vec` (doctor-trial matching), :func:`carry_model`
(carry a trained HRRBert over to a new program, :mod:`model.carry`), and the package's errors.

A saved :class:`HRRBert` folder is self-contained (``program/``, ``vocab.txt``, a model card ``README.md``;
:mod:`model.card`: :func:`write_model_card`, :func:`read_vocab`). The Hugging Face ``transformers`` classes
(``pip install 'hrrbert[hf]'``) are in :mod:`model.hf`: ``HRRBertConfig``, ``HRRBertModel``,
``HRRBertForMaskedLM``, ``HRRBertForSequenceClassification``; ``import model.hf`` registers them with the
Auto classes. They are also reachable as ``model.HRRBertModel`` etc., imported on first use (importing
``model`` never imports ``transformers``).
"""

from .bert import PRESETS, TASKS, HRRBert, HRRBertSettings, bert_base, bert_small, bert_tiny, preset
from .card import read_vocab, write_model_card
from .carry import carry_model
from .doctor2vec import Doctor2Vec, Doctor2VecConfig
from .errors import ModelError, ModelWriteError, PretrainedFileError, ProgramMismatchError
from .memory_network import MemN2N, MemN2NConfig, MemNN, MemNNConfig, TokenEmbedding
from .visit_transformer import VisitTransformer, VisitTransformerConfig, group_visits

__all__ = [
    "HRRBert",
    "HRRBertSettings",
    "PRESETS",
    "TASKS",
    "preset",
    "bert_base",
    "bert_small",
    "bert_tiny",
    "ModelError",
    "ProgramMismatchError",
    "PretrainedFileError",
    "ModelWriteError",
    "MemN2N",
    "MemN2NConfig",
    "MemNN",
    "MemNNConfig",
    "TokenEmbedding",
    "VisitTransformer",
    "VisitTransformerConfig",
    "group_visits",
    "Doctor2Vec",
    "Doctor2VecConfig",
    "read_vocab",
    "write_model_card",
    "carry_model",
]

# model.hf needs transformers (the hf extra): its names are imported on first use only
_HF_NAMES = (
    "HRRBertConfig",
    "HRRBertPreTrainedModel",
    "HRRBertModel",
    "HRRBertForMaskedLM",
    "HRRBertForSequenceClassification",
)


def __getattr__(name: str):
    if name in _HF_NAMES:
        from . import hf

        return getattr(hf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
