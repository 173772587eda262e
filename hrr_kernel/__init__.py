"""hrr_kernel: build HRR concept embeddings from a compiled program, fast, with exact gradients.

Public API: :func:`load_program` (a :class:`Program`; ``Program.special_id("[PAD]")`` gives a special
token's concept id, :data:`SPECIAL_TOKENS` lists them), :func:`compose`, :class:`HRREmbedding`, and the
pure HRR operations :func:`bind`, :func:`unbind`, :func:`inverse`, :func:`project_unitary`,
:func:`bundle`, :func:`similarity`, :func:`cleanup`.
"""

from .composer import compose
from .embedding import MODES, HRREmbedding
from .errors import FormatVersionError, HashMismatchError, HRRKernelError, ProgramError, ShapeError
from .ops import bind, bundle, cleanup, inverse, project_unitary, similarity, unbind
from .program import SPECIAL_TOKENS, Program, load_program

__all__ = [
    "load_program",
    "Program",
    "SPECIAL_TOKENS",
    "compose",
    "HRREmbedding",
    "MODES",
    "bind",
    "unbind",
    "inverse",
    "project_unitary",
    "bundle",
    "similarity",
    "cleanup",
    "HRRKernelError",
    "ProgramError",
    "FormatVersionError",
    "HashMismatchError",
    "ShapeError",
]
