"""Models over ICD-code sequences whose token embedding is the HRR kernel.

Public API: :class:`HRRBert` (BERT with ``HRREmbedding`` tokens, a tied MLM head and pooled task
heads), :class:`BertConfig` and its presets, the memory networks (:class:`MemN2N`, :class:`MemNN`), the
visit-level :class:`VisitTransformer`, :class:`Doctor2Vec` (doctor-trial matching), and the package's errors.
"""

from .bert import PRESETS, TASKS, BertConfig, HRRBert, bert_base, bert_small, bert_tiny, preset
from .doctor2vec import Doctor2Vec, Doctor2VecConfig
from .errors import ModelError, ModelWriteError, PretrainedFileError, ProgramMismatchError
from .memory_network import MemN2N, MemN2NConfig, MemNN, MemNNConfig, TokenEmbedding
from .visit_transformer import VisitTransformer, VisitTransformerConfig, group_visits

__all__ = [
    "HRRBert",
    "BertConfig",
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
]
