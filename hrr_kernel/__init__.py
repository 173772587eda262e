"""hrr_kernel: build HRR concept embeddings from a compiled program, fast, with exact gradients.

Public API: :func:`load_program` (a :class:`Program`, from a program folder or the newest program of a release
folder, :func:`resolve_program`; ``Program.special_id("[PAD]")`` gives a special token's concept id,
:data:`SPECIAL_TOKENS` lists them; ``Program.row("ICD10CM", "E11.9")`` / ``Program.rows(...)`` look codes up
by vocabulary, ``Program.code(row)`` gives a row's :class:`ConceptCode`, an unknown code raises
:class:`UnknownCodeError`), :func:`compose`, :class:`HRREmbedding` in one of the embedding modes of
:data:`MODES` (each an :class:`EmbeddingMode` spec, :func:`mode_spec`, :mod:`hrr_kernel.modes`), and the pure
HRR operations :func:`bind`, :func:`unbind`, :func:`inverse`, :func:`project_unitary`, :func:`bundle`,
:func:`similarity`, :func:`cleanup`; to follow a model to a new release, :func:`carry_parameters` (trained
atoms and relations matched by key, new ones set by an initialisation rule), :func:`token_sources` and
:func:`token_provenance`; after training, :func:`settle_untrained` (atoms and relations no trained token uses
set to the mean of the trained ones of their kind, :func:`trained_parts`); to take vectors apart
(:mod:`hrr_kernel.unbinding`), :func:`unbind_relations`, :func:`unbind_pairs`, :func:`explain_vector`,
:func:`relation_range` (each relation's cleanup memory), :func:`unbinding_recall` (an
:class:`UnbindingRecall`), :func:`compose_query` and :func:`hrr_vectors`.
"""

from .carry import (
    INIT_RULES,
    PROVENANCE,
    Carried,
    carry_parameters,
    match_keys,
    token_provenance,
    token_sources,
)
from .composer import compose
from .embedding import HRREmbedding
from .errors import FormatVersionError, HashMismatchError, HRRKernelError, ProgramError, ShapeError
from .modes import MODES, EmbeddingMode, hrr_mode_names, mode_spec
from .ops import bind, bundle, cleanup, inverse, project_unitary, similarity, unbind
from .program import (
    SPECIAL_TOKENS,
    ConceptCode,
    Program,
    UnknownCodeError,
    load_program,
    normalize_code,
    resolve_program,
)
from .unbinding import (
    UnbindingRecall,
    compose_query,
    explain_vector,
    hrr_vectors,
    relation_range,
    unbind_pairs,
    unbind_relations,
    unbinding_recall,
)
from .untrained import SETTLED_KINDS, settle_untrained, trained_parts

__all__ = [
    "load_program",
    "resolve_program",
    "Program",
    "ConceptCode",
    "normalize_code",
    "SPECIAL_TOKENS",
    "compose",
    "HRREmbedding",
    "MODES",
    "EmbeddingMode",
    "mode_spec",
    "hrr_mode_names",
    "bind",
    "unbind",
    "inverse",
    "project_unitary",
    "bundle",
    "similarity",
    "cleanup",
    "unbind_relations",
    "unbind_pairs",
    "explain_vector",
    "relation_range",
    "unbinding_recall",
    "UnbindingRecall",
    "compose_query",
    "hrr_vectors",
    "carry_parameters",
    "settle_untrained",
    "trained_parts",
    "SETTLED_KINDS",
    "Carried",
    "match_keys",
    "token_sources",
    "token_provenance",
    "INIT_RULES",
    "PROVENANCE",
    "HRRKernelError",
    "ProgramError",
    "FormatVersionError",
    "HashMismatchError",
    "UnknownCodeError",
    "ShapeError",
]
