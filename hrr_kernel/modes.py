"""Embedding modes, each declared once: :class:`EmbeddingMode` specs registered in :data:`MODES`.

A mode says what one embedding row is made of, and every module that treats modes differently asks the
spec instead of comparing the mode's name: :class:`~hrr_kernel.HRREmbedding` (its parameters, how a
row is finished, the tied decoder's extra part), the explain and unbinding code (which vector holds the
HRR part, what lies beside it), the settling of untrained rows after training, the rule for a new token
when a model is carried to a new program, and the one-line notes the CLI and reports print.

A row ``E[i]`` is built from up to three parts, each a field of the spec, or from a code's ancestors:

- ``hrr``: the share of D composed from atoms and relations (``C[i] = Σ r_j ⊛ a_k``): ``all`` (H = D),
  ``half`` (H = D // 2, the first half of the row) or ``none``;
- ``table``: a free learnable per-token table ``W``: ``none``, ``full`` (D wide; added to ``C``, or the
  whole row when nothing is composed) or ``rest`` (D - H wide, concatenated after ``C``);
- ``frequency``: the fixed unit-norm sinusoidal encoding of the token's binned log frequency, added;
- ``ancestry``: instead of a composition, the row mixes the token's own free vector ``W[i]`` with free
  vectors ``a_j`` of its ancestors (D-wide atoms: its SNOMED concepts, their is-a parents, its ICD
  hierarchy nodes), as GRAM does (:mod:`hrr_kernel.ancestry`).

========================= ======== ====== ========== ========== =========================================
mode                      hrr      table  frequency  ancestry   row
========================= ======== ====== ========== ========== =========================================
``unstructured``          none     full   no         no         ``W`` (the control)
``base``                  all      none   no         no         ``C``
``freq``                  all      none   yes        no         ``C + PE(bin(log f))``
``add``                   all      full   no         no         ``C + W``
``cat``                   half     rest   no         no         ``[C, W]``
``gram``                  none     full   no         yes        ``α_ii W[i] + Σ_j α_ij a_j``, attention α
``ancestors``             none     full   no         yes        the mean of ``W[i]`` and the ``a_j``
========================= ======== ====== ========== ========== =========================================

A code no training saw has: in ``unstructured`` and ``cat``, the trained codes' mean row (its table part);
in ``add``, its composition alone; in ``base`` and ``freq``, its composition (with, in ``freq``, the lowest
frequency bin); in every composing mode, untrained atoms settled to their kind's mean. In ``gram`` and
``ancestors`` it keeps its own vector's initial draw (``untrained_fill`` None: GRAM as published) mixed with
its ancestors' trained vectors (ancestors no trained code reaches settled to their kind's mean); a new code
of a carried model gets a zero own vector, so it is its ancestors' mix.

**Add a mode**: write one :class:`EmbeddingMode` below and add it to :data:`MODES`; give it a test in
``tests/hrr_kernel/test_modes.py``. A mode whose rows come from something other than these parts (e.g.
an attention-weighted mix of free vectors of a code and its ancestors, GRAM: :mod:`hrr_kernel.ancestry`)
subclasses :class:`EmbeddingMode` and overrides :meth:`EmbeddingMode.init_parameters`,
:meth:`EmbeddingMode.build` and :meth:`EmbeddingMode.decode_extra` (and :meth:`EmbeddingMode.row_edges`
where not every edge reaches the row); everything else (decoder choice, settling, carrying, explain)
follows from its fields.

Dimension legend: N concepts, U selected rows, M decoded states, D dimension, H HRR part dimension.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import ShapeError

__all__ = ["EmbeddingMode", "MODES", "mode_spec", "hrr_mode_names"]

HRR_SHARES = ("all", "half", "none")
TABLES = ("none", "full", "rest")
ROW_FILLS = (None, "mean", "zero")  # an untrained token's table row: left alone, trained rows' mean, zero
NEW_ROWS = (None, "[UNK]", "zero")  # a new token's row of the per-token tensor in a carried model


@dataclass(frozen=True)
class EmbeddingMode:
    """One embedding configuration: its parts, the rules that depend on them, and its notes."""

    name: str
    note: str  # one line: what a row is
    hrr: str = "all"  # share of the row composed from atoms and relations: all, half, none
    table: str = "none"  # the free per-token table: none, full (D wide), rest (D - H wide, concatenated)
    frequency: bool = False  # adds the fixed encoding of the token's log frequency (needs log_frequency)
    spectral_decoder: bool = (
        False  # the tied decoder's default domain (HRRBertSettings.spectral_decoder None)
    )
    untrained_fill: str | None = None  # after training, an untrained token's table row: mean, zero, None
    new_row: str | None = None  # a carried model's new token's per-token row: "[UNK]" (its row), "zero"
    new_row_note: str = ""  # that rule in words (the carry report names it)
    explain_note: str = ""  # what explain unbinds, and what lies beside it (explain's drift)
    # the row mixes the token's own free vector (the table) with free vectors of its ancestors (the atoms,
    # D wide); nothing is composed, and the subclass builds the row (hrr_kernel.ancestry)
    ancestry: bool = False

    def __post_init__(self) -> None:
        if self.hrr not in HRR_SHARES or self.table not in TABLES:
            raise ValueError(f"mode {self.name!r}: hrr must be one of {HRR_SHARES}, table one of {TABLES}")
        if self.hrr == "none" and (self.table != "full" or self.frequency):
            raise ValueError(f"mode {self.name!r}: a mode that composes nothing is a full table alone")
        if self.frequency and self.table != "none":
            raise ValueError(f"mode {self.name!r}: one per-token tensor, a table or the frequency encoding")
        if (self.table == "rest") != (self.hrr == "half"):
            raise ValueError(f"mode {self.name!r}: a table of the rest of the row goes with an HRR half")
        if self.untrained_fill not in ROW_FILLS or self.new_row not in NEW_ROWS:
            raise ValueError(f"mode {self.name!r}: untrained_fill in {ROW_FILLS}, new_row in {NEW_ROWS}")
        if (self.new_row is None) != (self.per_token_tensor is None):
            raise ValueError(f"mode {self.name!r}: new_row is the rule of its per-token tensor")
        if self.ancestry and (self.hrr != "none" or type(self).build is EmbeddingMode.build):
            raise ValueError(
                f"mode {self.name!r}: an ancestry mode composes nothing (hrr none, its own vectors a full "
                "table) and builds its rows itself (a subclass's build)"
            )

    # --- parts ------------------------------------------------------------------------------------------

    @property
    def composes(self) -> bool:
        """Whether rows hold an HRR composition (atoms and relations to train, unbind, carry)."""
        return self.hrr != "none"

    @property
    def has_atoms(self) -> bool:
        """Whether the embedding has atom vectors (composed, or free vectors of ancestors) to train, settle
        and carry."""
        return self.composes or self.ancestry

    @property
    def row_is_table(self) -> bool:
        """Whether a row is the table's row itself (nothing built: the control)."""
        return not self.composes and not self.ancestry

    @property
    def table_added(self) -> bool:
        """Whether the table is added to the composition (so it is part of the HRR-space vector)."""
        return self.composes and self.table == "full"

    @property
    def per_token_tensor(self) -> str | None:
        """The embedding's per-token tensor beside the atoms (``table``, ``freq_encoding`` or None)."""
        return "table" if self.table != "none" else ("freq_encoding" if self.frequency else None)

    @property
    def min_dim(self) -> int:
        return 2 if self.hrr == "half" else 1

    def hrr_dim(self, dim: int) -> int:
        """H, the composed part's width, for embedding dimension D."""
        return {"all": dim, "half": dim // 2, "none": 0}[self.hrr]

    def atom_dim(self, dim: int) -> int:
        """The atom vectors' width for embedding dimension D: H where they are composed, D where they are
        free vectors of ancestors, 0 without atoms."""
        return self.hrr_dim(dim) if self.composes else (dim if self.ancestry else 0)

    def row_edges(self, program) -> Tensor | None:
        """Which edges bring their atom into the token's row, ``(E,)`` bool; None: all of them (a
        composition binds every edge). Settling counts an atom as trained when such an edge of a trained
        token holds it."""
        return None

    def table_dim(self, dim: int) -> int:
        """The free table's width for embedding dimension D (0: no table)."""
        return {"none": 0, "full": dim, "rest": dim - dim // 2}[self.table]

    def check_width(self, width) -> None:
        """A composition wider than the row (``HRREmbedding`` ``hrr_width``) is mapped to it by a learned
        projection: only where the whole row is the composition, plus at most a fixed encoding."""
        if width is None:
            return
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise ShapeError(f"hrr_width must be a positive int or None, got {width!r}")
        if self.hrr != "all" or self.table != "none":
            raise ShapeError(
                f"hrr_width composes wider than the row and projects: mode {self.name!r} is not a whole-row "
                "composition (only modes with hrr all and no table, e.g. base and freq)"
            )

    def check_dim(self, dim) -> None:
        if not isinstance(dim, int) or dim < self.min_dim:
            raise ShapeError(f"dim must be an int >= {self.min_dim} for mode {self.name!r}, got {dim!r}")

    # --- rows -------------------------------------------------------------------------------------------

    def init_parameters(self, emb, program, dim: int, dtype: torch.dtype) -> None:
        """Mode-specific parameters beyond atoms, relations and the table (none for these modes)."""

    def build(self, emb, rows: Tensor | None) -> Tensor:
        """Embedding rows (all when ``rows`` is None). Shapes: rows ``(U,)`` -> ``(U, D)``."""
        if not self.composes:
            return emb.table if rows is None else F.embedding(rows, emb.table, sparse=emb.sparse_grads)
        return self.finish(emb, emb.compose_rows(rows), rows)

    def finish(self, emb, c: Tensor, rows: Tensor | None) -> Tensor:
        """Rows from their composed part ``c``: normalised when the embedding asks, then the frequency
        encoding or the table added or concatenated. Shapes: c ``(U, H)`` -> ``(U, D)``."""
        if emb.normalize:
            c = F.normalize(c, dim=1, eps=1e-12)
        if emb.projection is not None:  # a composition wider than the row: E = C P
            c = c @ emb.projection
        if self.frequency:
            c = c + (emb.freq_encoding if rows is None else emb.freq_encoding[rows])
        if self.table == "none":
            return c
        w = emb.table if rows is None else F.embedding(rows, emb.table, sparse=emb.sparse_grads)  # (U, D|D-H)
        return c + w if self.table == "full" else torch.cat([c, w], dim=1)

    def decode_extra(self, emb, h: Tensor) -> Tensor | None:
        """The tied decoder's scores from the parts beside the composition (None: nothing beside it).

        Shapes: h ``(M, D)`` -> ``(M, N)``.
        """
        out = None
        if self.frequency:
            out = h @ emb.freq_encoding.to(h.dtype).t()
        if self.table != "none":
            hdim = self.hrr_dim(emb.dim)
            hw = h[:, hdim:] if self.table == "rest" else h  # (M, D - H) or (M, D)
            t = hw @ emb.table.to(h.dtype).t()
            out = t if out is None else out + t
        return out

    # --- explain, settle, carry ------------------------------------------------------------------------

    def hrr_space(self, emb, c: Tensor, rows: Tensor | None) -> Tensor:
        """The vectors to unbind from the composition ``c``: ``c`` itself, plus the table where it is added.

        Shapes: c ``(U, H)`` -> ``(U, H)``.
        """
        if self.table_added:
            c = c + (emb.table if rows is None else emb.table[rows]).detach()
        return c

    def beside(self, emb) -> Tensor | None:
        """The per-token tensor beside the composition (table or frequency encoding), for explain's drift."""
        name = self.per_token_tensor if self.composes else None
        return None if name is None else getattr(emb, name)

    def drift(self, c: Tensor, w: Tensor | None) -> tuple[float, float]:
        """(cosine of the embedding row with its composition, the share ``|W|² / (|C|² + |W|²)`` of what
        lies beside it) for one code: ``c`` its composition ``(H,)``, ``w`` that part or None."""
        if w is None:
            return 1.0, 0.0
        cc, ww = float(c.dot(c)), float(w.dot(w))
        share = ww / (cc + ww) if cc + ww > 0 else float("nan")
        if self.table == "rest":  # [C, W] against [C, 0]
            return (math.sqrt(1.0 - share) if cc + ww > 0 else float("nan")), share
        e = c + w
        den = float(e.norm() * c.norm())
        return (float(torch.dot(e, c)) / den if den > 0 else float("nan")), share


from .ancestry import AncestryMode  # noqa: E402  (a subclass of EmbeddingMode, defined above)

MODES: dict[str, EmbeddingMode] = {
    m.name: m
    for m in (
        EmbeddingMode(
            "unstructured",
            "a free learnable row per token (the control)",
            hrr="none",
            table="full",
            untrained_fill="mean",
            new_row="[UNK]",
            new_row_note="[UNK] row",
        ),
        EmbeddingMode(
            "base",
            "the composition C = Σ r ⊛ a of the token's edges (pure HRR)",
            spectral_decoder=True,
            explain_note="the embedding is the composition: identical by construction",
        ),
        EmbeddingMode(
            "freq",
            "the composition plus a fixed encoding of the token's binned log frequency",
            frequency=True,
            new_row="[UNK]",
            new_row_note="[UNK] row (lowest frequency bin)",
            explain_note=(
                "the embedding adds a fixed frequency encoding to the composition; explain unbinds the "
                "composition"
            ),
        ),
        EmbeddingMode(
            "add",
            "the composition plus a free learnable row",
            table="full",
            untrained_fill="zero",
            new_row="zero",
            new_row_note="zero",
            explain_note="the embedding is the composition plus a free table W; explain unbinds C + W",
        ),
        EmbeddingMode(
            "cat",
            "a D/2 composition concatenated with a free D - D/2 row",
            hrr="half",
            table="rest",
            untrained_fill="mean",
            new_row="[UNK]",
            new_row_note="[UNK] row",
            explain_note="the embedding is [composition, table]; explain unbinds the composition half",
        ),
        AncestryMode(
            "gram",
            "GRAM: an attention-weighted mix of free vectors of the code and of its ancestors",
            hrr="none",
            table="full",
            ancestry=True,
            new_row="zero",
            new_row_note="zero own vector (the new code is its ancestors' attention mix)",
        ),
        AncestryMode(
            "ancestors",
            "the plain mean of free vectors of the code and of its ancestors (GRAM without attention)",
            hrr="none",
            table="full",
            ancestry=True,
            attention=False,
            new_row="zero",
            new_row_note="zero own vector (the new code is its ancestors' sum over their count + 1)",
        ),
    )
}


def mode_spec(name: str) -> EmbeddingMode:
    """The registered spec of mode ``name``; a :class:`ShapeError` naming the modes otherwise."""
    try:
        return MODES[name]
    except (KeyError, TypeError):
        raise ShapeError(f"mode must be one of {tuple(MODES)}, got {name!r}") from None


def hrr_mode_names() -> tuple[str, ...]:
    """The modes whose rows hold an HRR composition (the ones explain, query and diff accept)."""
    return tuple(n for n, m in MODES.items() if m.composes)
