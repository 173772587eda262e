"""hrr_kernel: build HRR concept embeddings from a compiled program, fast, with exact gradients.

Public API: :func:`load_program`, :func:`compose`, :class:`HRREmbedding`, and the pure HRR operations
:func:`bind`, :func:`unbind`, :func:`inverse`, :func:`project_unitary`, :func:`bundle`,
:func:`similarity`, :func:`cleanup`.
"""

from .composer import compose
from .embedding import MODES, HRREmbedding
from .errors import FormatVersionError, HashMismatchError, HRRKernelError, ProgramError, ShapeError
from .ops import bind, bundle, cleanup, inverse, project_unitary, similarity, unbind
from .program import Program, load_program

__all__ = [
    "load_program",
    "Program",
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
