"""Read an HRR program (format 1) from its files into tensors.

The program is known only through its files (``docs/program-format.md``: files, columns,
invariants): ``manifest.json`` plus ``atoms``, ``relations``, ``concepts``, ``edges`` and ``slices``
Parquet files. The reader verifies the format version, every read file's sha256 against the manifest,
the Parquet key-value metadata, row counts, dense ids, the edge ordering and the slice table.
:func:`load_program` also takes a release folder (the program with the newest ``created_at`` is used,
as ``hrrbert sql`` does). A loaded :class:`Program` looks codes up by (vocabulary, code):
:meth:`Program.row`, :meth:`Program.rows`, and back with :meth:`Program.code`.

Dimension legend: N concepts, A atoms, R relations, E edges, S slices.
"""

from __future__ import annotations

import hashlib
import json
import logging
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow.parquet as pq
import torch
from torch import Tensor

from .errors import FormatVersionError, HashMismatchError, ProgramError
from .plan import BasePlan, ComposePlan, Workspace, build_base_plan, plan_rows

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"

SUPPORTED_MAJOR_VERSIONS: tuple[int, ...] = (1,)

# file -> columns this reader needs (grammar as data; extra columns are allowed)
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "atoms.parquet": ("atom_id", "kind", "key", "label"),
    "relations.parquet": ("relation_id", "kind", "sctid", "label", "max_multiplicity", "edges"),
    "concepts.parquet": ("concept_id", "vocabulary", "code", "code_dotted", "title", "snomed_ids"),
    "edges.parquet": ("concept_id", "relation_id", "atom_id", "slot", "role_group", "provenance"),
    "slices.parquet": ("relation_id", "slot", "start", "length"),
}
RELATION_KINDS = frozenset({"is_a", "attribute", "description", "identity", "icd_hierarchy"})
LABEL_KEYED_KINDS = frozenset({"icd_hierarchy"})  # relation kinds without an SCTID, one relation per label
# manifest `counts` key -> file whose row count it must equal (checked when present)
COUNT_KEYS: dict[str, str] = {
    "atoms": "atoms.parquet",
    "relations": "relations.parquet",
    "concepts": "concepts.parquet",
    "edges": "edges.parquet",
    "slices": "slices.parquet",
}
# Codes of the special-token concepts, in concept-id order. Mirrors the program format (the compiler's
# ``ontology_compiler.program.SPECIAL_TOKENS``; tests/hrr_kernel/test_contract.py checks they agree);
# the kernel never imports the compiler, so the list is repeated here.
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")
# Program fields holding an edge or slice tensor (moved together by Program.to)
EDGE_TENSOR_FIELDS: tuple[str, ...] = (
    "edge_concept",
    "edge_relation",
    "edge_atom",
    "edge_slot",
    "order_by_concept",
    "order_by_atom",
    "slice_relation",
    "slice_start",
    "slice_length",
)


def normalize_code(vocabulary: str, code: str) -> str:
    """The stored form of a code: trimmed; ICD codes (vocabularies starting with ``ICD``) also without dots
    and upper case (``e11.9`` -> ``E119``), as ``concepts.code`` stores them. Other codes (OWL CURIEs,
    special tokens) are only trimmed."""
    code = str(code).strip()
    if str(vocabulary).strip().upper().startswith("ICD"):
        return code.replace(".", "").upper()
    return code


class UnknownCodeError(ProgramError, LookupError):
    """A (vocabulary, code) the program does not have; names both and the vocabularies that do have the code.

    Attributes: ``missing`` (the ``(vocabulary, code)`` pairs as given), ``elsewhere`` (pair -> the other
    vocabularies of the program holding that code).
    """

    def __init__(
        self,
        message: str,
        *,
        path: object,
        missing: list[tuple[str, str]],
        elsewhere: dict[tuple[str, str], list[str]],
    ) -> None:
        self.missing = missing
        self.elsewhere = elsewhere
        super().__init__(message, path=path)


@dataclass(frozen=True)
class ConceptCode:
    """One row of ``concepts.parquet``: what :meth:`Program.code` returns (``str()``: ``ICD10CM:E11.9``)."""

    row: int  # the concept id (embedding row)
    vocabulary: str  # SPECIAL, ICD9CM, ICD10CM (OWL programs: OWL, ICD10, SNOMEDCT)
    code: str  # dotless, upper case (the join key)
    code_dotted: str  # with its dot, for people
    title: str
    chapter: int | None  # chapter in its own classification; None for specials (or no chapter column)

    def __str__(self) -> str:
        return f"{self.vocabulary}:{self.code_dotted}"


@dataclass(eq=False)
class Program:
    """A loaded program: edge tensors in the orders the composer needs, plus identifiers.

    Edge tensors (int64, on ``device``) are in stored order, sorted by (relation, slot, concept);
    ``order_by_concept`` and ``order_by_atom`` are permutations of them (stable) for per-concept and
    per-atom traversals. ``plan`` is the compiled composition plan for the full matrix.
    :meth:`special_id` gives the concept id of a special token such as ``"[PAD]"``.

    Codes: ``concept_codes[i]`` is row ``i``'s dotless code, which alone is ambiguous (ICD-9-CM and
    ICD-10-CM share some, e.g. ``E030``). Look rows up by (vocabulary, code) with :meth:`row` /
    :meth:`rows` (dotted or dotless), and go back with :meth:`code`; ``concept_vocabularies``,
    ``concept_codes_dotted``, ``concept_titles`` and ``concept_chapters`` are the other columns, by row.

    Atoms and relations: ``atom_keys`` / ``atom_kinds`` / ``atom_labels`` (the SCTID, word, special
    token or ICD node key such as ``ICD10CM:E11``; ``special``, ``concept``, ``word`` or ``icd``; a readable
    name) and ``relation_keys`` (the SCTID as text, the label of an ``icd_hierarchy`` relation, or
    ``identity`` / ``description``) / ``relation_kinds`` / ``relation_labels``, by id; keys are what
    two programs share, so they match atoms and relations across releases.
    """

    SPECIAL_TOKENS: ClassVar[tuple[str, ...]] = SPECIAL_TOKENS

    program_id: str
    format_version: int
    path: Path
    manifest: dict[str, Any]
    n_concepts: int
    n_atoms: int
    n_relations: int
    edge_concept: Tensor  # (E,) int64
    edge_relation: Tensor  # (E,) int64
    edge_atom: Tensor  # (E,) int64
    edge_slot: Tensor  # (E,) int64
    order_by_concept: Tensor  # (E,) int64, permutation sorted by (concept, relation, atom)
    order_by_atom: Tensor  # (E,) int64, permutation sorted by (atom, relation, concept)
    slice_relation: Tensor  # (S,) int64
    slice_start: Tensor  # (S,) int64
    slice_length: Tensor  # (S,) int64
    concept_codes: list[str]  # dotless code per row; ambiguous across vocabularies (use row() / code())
    relation_kinds: list[str]
    relation_labels: list[str]
    atom_keys: list[str]
    base: BasePlan
    device: torch.device
    concept_vocabularies: list[str] = field(default_factory=list)  # vocabulary per row
    concept_codes_dotted: list[str] = field(default_factory=list)  # code with its dot per row
    concept_titles: list[str] = field(default_factory=list)  # title per row ("" when null)
    concept_chapters: list[int | None] = field(default_factory=list)  # chapter per row (None: none)
    atom_kinds: list[str] = field(default_factory=list)  # special, concept, word or icd, per atom
    atom_labels: list[str] = field(default_factory=list)  # readable name per atom
    relation_keys: list[str] = field(default_factory=list)  # SCTID as text, icd_hierarchy label, or kind
    workspace: Workspace = field(default_factory=Workspace)
    _plan: ComposePlan | None = None
    _special_ids: dict[str, int] | None = None  # special-token code -> concept id, built on first use
    _row_index: dict[tuple[str, str], int] | None = None  # (VOCABULARY, stored code) -> row, on first use

    @property
    def n_edges(self) -> int:
        return int(self.edge_concept.numel())

    @property
    def counts(self) -> dict[str, int]:
        return {
            "concepts": self.n_concepts,
            "atoms": self.n_atoms,
            "relations": self.n_relations,
            "edges": self.n_edges,
            "slices": int(self.slice_start.numel()),
            "pairs": self.base.n_pairs,
            "distinct_rows": self.base.n_unique_rows,
        }

    @property
    def plan(self) -> ComposePlan:
        """The composition plan for the full matrix (built once, on ``device``)."""
        if self._plan is None:
            self._plan = plan_rows(self.base, None)
        return self._plan

    def plan_for(self, rows: Tensor | None) -> ComposePlan:
        """A composition plan for the given concept rows (``None``: all rows)."""
        return self.plan if rows is None else plan_rows(self.base, rows)

    def special_id(self, token: str) -> int:
        """The concept id of a special token (one of :data:`SPECIAL_TOKENS`, e.g. ``"[PAD]"``).

        Raises:
            ValueError: ``token`` is not a special token of the program format.
            ProgramError: the program has no concept with that code (the message names both).
        """
        if token not in SPECIAL_TOKENS:
            raise ValueError(
                f"{token!r} is not a special token; the program format has {list(SPECIAL_TOKENS)}"
            )
        if self._special_ids is None:  # first concept of each special code
            self._special_ids = {}
            for i, code in enumerate(self.concept_codes):
                if code in SPECIAL_TOKENS:
                    self._special_ids.setdefault(code, i)
        if token not in self._special_ids:
            raise ProgramError(
                f"program {self.program_id} has no special-token concept {token!r} (found "
                f"{sorted(self._special_ids)})",
                path=self.path,
            )
        return self._special_ids[token]

    # --- codes ------------------------------------------------------------------------------------

    @property
    def vocabularies(self) -> list[str]:
        """The program's vocabularies, sorted (e.g. ``['ICD10CM', 'ICD9CM', 'SPECIAL']``)."""
        return sorted(set(self.concept_vocabularies))

    def _index(self) -> dict[tuple[str, str], int]:
        """(upper-case vocabulary, stored code) -> row; the first row wins should a pair repeat."""
        if self._row_index is None:
            if len(self.concept_vocabularies) != self.n_concepts:
                raise ProgramError(
                    "this Program was built without its concepts' vocabularies; load it with load_program",
                    path=self.path,
                )
            index: dict[tuple[str, str], int] = {}
            for i, (voc, code) in enumerate(zip(self.concept_vocabularies, self.concept_codes, strict=True)):
                index.setdefault((voc.upper(), normalize_code(voc, code)), i)
            self._row_index = index
        return self._row_index

    def _lookup(self, vocabulary: str, code: str) -> int | None:
        voc = str(vocabulary).strip().upper()
        return self._index().get((voc, normalize_code(voc, code)))

    def _elsewhere(self, vocabulary: str, code: str) -> list[str]:
        """The program's other vocabularies that hold ``code``."""
        here = str(vocabulary).strip().upper()
        return [v for v in self.vocabularies if v.upper() != here and self._lookup(v, code) is not None]

    def _unknown(self, missing: list[tuple[str, str]], total: int) -> UnknownCodeError:
        known = {v.upper() for v in self.concept_vocabularies}
        elsewhere = {(v, c): self._elsewhere(v, c) for v, c in missing}
        parts = []
        for v, c in missing[:10]:
            what = f"{v} code {c!r}"
            if str(v).strip().upper() not in known:
                what += f" (no vocabulary {v!r}; the program has {self.vocabularies})"
            elif elsewhere[(v, c)]:
                other = elsewhere[(v, c)][0]
                what += f" (it is a{'n' if other[:1] in 'AEIOU' else ''} {other} code: row({other!r}, {c!r}))"
            elif normalize_code(v, c) != c:
                what += f" (looked up as {normalize_code(v, c)!r})"
            parts.append(what)
        more = f", and {len(missing) - 10} more" if len(missing) > 10 else ""
        head = "has no " if total == 1 else f"lacks {len(missing)} of {total} codes: "
        return UnknownCodeError(
            f"program {self.program_id} {head}{'; '.join(parts)}{more}",
            path=self.path,
            missing=missing,
            elsewhere=elsewhere,
        )

    def row(self, vocabulary: str, code: str) -> int:
        """The row (concept id) of a code: ``program.row("ICD10CM", "E11.9")`` (dotted or dotless).

        ICD codes are looked up without dots, trimmed and upper-cased (see :func:`normalize_code`); the
        vocabulary is matched case-insensitively. Special tokens: ``row("SPECIAL", "[PAD]")``.

        Raises:
            UnknownCodeError: the program has no such (vocabulary, code); the message names both and,
                when the code exists in another vocabulary of the program, says which.
        """
        found = self._lookup(vocabulary, code)
        if found is None:
            raise self._unknown([(vocabulary, code)], 1)
        return found

    def rows(self, codes: Iterable[tuple[str, str] | str], vocabulary: str | None = None) -> list[int]:
        """The rows of many codes, in order: ``rows([("ICD10CM", "E11.9"), ("ICD9CM", "250.00")])``, or
        ``rows(["E11.9", "I10"], vocabulary="ICD10CM")``.

        Raises:
            UnknownCodeError: some codes are unknown (all of them are listed, up to ten in the message).
            ValueError: a bare code without ``vocabulary``.
        """
        pairs: list[tuple[str, str]] = []
        for item in codes:
            if isinstance(item, str):
                if vocabulary is None:
                    raise ValueError(
                        f"code {item!r} has no vocabulary: pass (vocabulary, code) pairs or vocabulary="
                    )
                pairs.append((vocabulary, item))
            else:
                voc, code = item
                pairs.append((voc, code))
        out = [self._lookup(v, c) for v, c in pairs]
        missing = [p for p, r in zip(pairs, out, strict=True) if r is None]
        if missing:
            raise self._unknown(missing, len(pairs))
        return out  # type: ignore[return-value]

    def code(self, row: int) -> ConceptCode:
        """Row ``row`` of ``concepts.parquet``: vocabulary, dotless and dotted code, title, chapter.

        Raises:
            IndexError: ``row`` is not in ``0 .. n_concepts - 1``.
        """
        i = operator.index(row)
        if not 0 <= i < self.n_concepts:
            raise IndexError(f"row {i} is outside program {self.program_id}'s rows 0..{self.n_concepts - 1}")
        self._index()  # checks the columns are there
        return ConceptCode(
            row=i,
            vocabulary=self.concept_vocabularies[i],
            code=self.concept_codes[i],
            code_dotted=self.concept_codes_dotted[i],
            title=self.concept_titles[i],
            chapter=self.concept_chapters[i],
        )

    def to(self, device: str | torch.device) -> Program:
        """A copy of this program with every tensor on ``device``."""
        device = torch.device(device)
        moved = {name: getattr(self, name).to(device) for name in EDGE_TENSOR_FIELDS}
        return replace(
            self, base=self.base.to(device), device=device, workspace=Workspace(), _plan=None, **moved
        )


def sha256_file(path: Path, chunk: int = 1 << 20, limit: int | None = None) -> str | None:
    """Hex sha256 of a file, streamed in ``chunk``-byte blocks; None when it holds more than ``limit``
    bytes (reading stops there: a file that grows, or never ends, is not read whole)."""
    h = hashlib.sha256()
    seen = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            seen += len(block)
            if limit is not None and seen > limit:
                return None
            h.update(block)
    return h.hexdigest()


def _major(version: object) -> int | None:
    if isinstance(version, bool):
        return None
    if isinstance(version, int):
        return version
    if isinstance(version, str):
        head = version.split(".", 1)[0]
        return int(head) if head.isdigit() else None
    return None


def _read_manifest(root: Path) -> dict[str, Any]:
    mpath = root / "manifest.json"
    if not mpath.is_file():
        raise ProgramError("manifest.json not found; is this a compiled program folder?", path=root)
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProgramError(f"manifest.json is not valid JSON: {exc}", path=root) from exc
    if not isinstance(manifest, dict):
        raise ProgramError("manifest.json must hold a JSON object", path=root)
    for key in ("format_version", "program_id", "files"):
        if key not in manifest:
            raise ProgramError(f"manifest.json lacks the required key {key!r}", path=root)
    major = _major(manifest["format_version"])
    if major not in SUPPORTED_MAJOR_VERSIONS:
        raise FormatVersionError(
            path=root, found=manifest["format_version"], supported=SUPPORTED_MAJOR_VERSIONS
        )
    return manifest


def _manifest_files(root: Path, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    files = manifest["files"]
    if not isinstance(files, list) or not all(isinstance(f, dict) and "path" in f for f in files):
        raise ProgramError("manifest.json 'files' must be a list of {path, sha256, rows}", path=root)
    by_path = {str(f["path"]): f for f in files}
    for name in REQUIRED_COLUMNS:
        if name not in by_path:
            raise ProgramError(f"manifest.json does not list the required file {name}", path=root)
        if "sha256" not in by_path[name]:
            raise ProgramError(f"manifest.json gives no sha256 for {name}", path=root)
    return by_path


def _verify_hash(root: Path, entry: dict[str, Any]) -> None:
    """The file's sha256 equals the manifest's; a non-regular file (a device such as ``/dev/zero``, a FIFO)
    is refused before it is read, and one larger than the manifest's ``bytes`` is read no further."""
    fpath = root / entry["path"]
    if not fpath.is_file():
        if fpath.exists():
            raise ProgramError(
                f"{entry['path']} is not a regular file (a device, FIFO or folder); expected the program "
                "file the manifest lists",
                path=root,
            )
        raise ProgramError(f"{entry['path']} is listed in the manifest but missing", path=root)
    listed = entry.get("bytes")
    limit = listed if isinstance(listed, int) and not isinstance(listed, bool) else None
    found = sha256_file(fpath, limit=limit)
    if found is None:  # read no further than the manifest's size
        found = f"(not hashed: more than the {limit:,} bytes the manifest lists)"
    expected = str(entry["sha256"]).lower()
    if found != expected:
        raise HashMismatchError(path=root, file=str(entry["path"]), expected=expected, found=found)


def _read_table(root: Path, name: str, entry: dict[str, Any], manifest: dict[str, Any]):
    table = pq.read_table(root / name)
    meta = table.schema.metadata or {}
    pid = meta.get(b"program_id", b"").decode()
    fver = meta.get(b"format_version", b"").decode()
    if pid != str(manifest["program_id"]):
        raise ProgramError(
            f"{name} key-value metadata program_id is {pid!r}, manifest says {manifest['program_id']!r}",
            path=root,
        )
    if _major(fver) != _major(manifest["format_version"]):
        raise ProgramError(
            f"{name} key-value metadata format_version is {fver!r}, manifest says "
            f"{manifest['format_version']!r}",
            path=root,
        )
    missing = [c for c in REQUIRED_COLUMNS[name] if c not in table.column_names]
    if missing:
        raise ProgramError(f"{name} lacks column(s) {missing}; found {table.column_names}", path=root)
    if "rows" in entry and int(entry["rows"]) != table.num_rows:
        raise ProgramError(f"{name} has {table.num_rows} rows, manifest says {entry['rows']}", path=root)
    return table


def _int_column(table, column: str, name: str, root: Path) -> np.ndarray:
    col = table.column(column)
    if col.null_count:
        raise ProgramError(f"{name} column {column} has {col.null_count} null(s)", path=root)
    return np.array(col.to_numpy(), dtype=np.int64)


def resolve_program(path: str | Path) -> Path:
    """The program folder ``path`` names: itself when it holds ``manifest.json``, else, for a release
    folder (``artifacts/programs/<release>``), its program with the newest manifest ``created_at`` (ties:
    the last folder name), as ``hrrbert sql`` picks. Hidden folders (a compile's temporary ones) and
    folders whose manifest is not a JSON object with a ``program_id`` are skipped. Logs which program
    it took (a warning when there were several).

    Raises:
        ProgramError: ``path`` does not exist, or holds neither a manifest nor any program.
    """
    root = Path(path)
    if not root.is_dir():
        raise ProgramError("program folder does not exist", path=root)
    if (root / MANIFEST).exists():
        return root
    found: list[tuple[str, str, Path]] = []
    for m in root.glob(f"*/{MANIFEST}"):
        if m.parent.name.startswith(".") or not m.is_file():
            continue
        try:
            manifest = json.loads(m.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            log.debug("%s: not a readable manifest; skipped", m)
            continue
        if isinstance(manifest, dict) and "program_id" in manifest:
            found.append((str(manifest.get("created_at", "")), m.parent.name, m.parent))
    if not found:
        raise ProgramError(
            f"{MANIFEST} not found; is this a compiled program folder? (nor is it a release folder "
            "holding programs)",
            path=root,
        )
    found.sort(key=lambda x: (x[0], x[1]))
    created, _, chosen = found[-1]
    if len(found) > 1:
        log.warning(
            "%s is a release folder holding %d programs; using the newest, %s (created %s); pass a "
            "program folder to choose another",
            root,
            len(found),
            chosen.name,
            created or "unknown",
        )
    else:
        log.info("%s is a release folder; using its program %s (created %s)", root, chosen.name, created)
    return chosen


def _read_verified_tables(root: Path, verify_all_files: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The manifest and the five Parquet tables, after checking hashes, metadata, columns and row counts."""
    if not root.is_dir():
        raise ProgramError("program folder does not exist", path=root)
    manifest = _read_manifest(root)
    files = _manifest_files(root, manifest)
    to_hash = list(files.values()) if verify_all_files else [files[n] for n in REQUIRED_COLUMNS]
    for entry in to_hash:
        _verify_hash(root, entry)
    tables = {name: _read_table(root, name, files[name], manifest) for name in REQUIRED_COLUMNS}
    return manifest, tables


def _dense_id_order(table, name: str, column: str, root: Path) -> np.ndarray:
    """Permutation that sorts a table by its id ``column``; raises unless the ids are exactly 0..n-1."""
    ids = _int_column(table, column, name, root)
    order = np.argsort(ids, kind="stable")
    if not np.array_equal(ids[order], np.arange(ids.size)):
        raise ProgramError(f"{name} column {column} is not dense from 0 (0..{ids.size - 1})", path=root)
    return order


def _relation_kinds(relations, rel_order: np.ndarray, root: Path) -> list[str]:
    """Relation kinds in id order; raises on a kind outside :data:`RELATION_KINDS`."""
    relation_kinds = [relations.column("kind").to_pylist()[i] for i in rel_order]
    bad = sorted({k for k in relation_kinds if k not in RELATION_KINDS}, key=str)
    if bad:
        raise ProgramError(
            f"relations.parquet has unknown kind(s) {bad}; known {sorted(RELATION_KINDS)}", path=root
        )
    return relation_kinds


def _edge_columns(
    edges, n_concepts: int, n_relations: int, n_atoms: int, root: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(concept, relation, atom, slot)`` of every edge, in stored order, each ``(E,)`` int64.

    Checks that ids are in range, slots are non-negative and edges are sorted by (relation, slot, concept)
    without repeats.
    """
    ec, er, ea, es = (
        _int_column(edges, c, "edges.parquet", root) for c in ("concept_id", "relation_id", "atom_id", "slot")
    )
    for arr, col, hi in (
        (ec, "concept_id", n_concepts),
        (er, "relation_id", n_relations),
        (ea, "atom_id", n_atoms),
    ):
        if arr.size and (arr.min() < 0 or arr.max() >= hi):
            raise ProgramError(
                f"edges.parquet column {col} has values in [{arr.min()}, {arr.max()}], "
                f"expected [0, {hi - 1}]",
                path=root,
            )
    if es.size and es.min() < 0:
        raise ProgramError("edges.parquet column slot has negative values", path=root)
    if ec.size > 1:
        key = np.lexsort((ec, es, er))
        if not np.array_equal(key, np.arange(ec.size)):
            raise ProgramError("edges.parquet is not sorted by (relation_id, slot, concept_id)", path=root)
        same = (er[1:] == er[:-1]) & (es[1:] == es[:-1]) & (ec[1:] == ec[:-1])
        if same.any():
            i = int(np.flatnonzero(same)[0])
            raise ProgramError(
                f"edges.parquet repeats (relation, slot, concept) = ({er[i]}, {es[i]}, {ec[i]})", path=root
            )
    return ec, er, ea, es


def _slice_columns(
    slices, er: np.ndarray, es: np.ndarray, root: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(relation, slot, start, length)`` of every slice, checked against the edges'
    (relation, slot) runs."""
    sr, ss, sst, sln = (
        _int_column(slices, c, "slices.parquet", root) for c in ("relation_id", "slot", "start", "length")
    )
    _check_slices(root, er, es, sr, ss, sst, sln)
    return sr, ss, sst, sln


def _check_counts(manifest: dict[str, Any], tables: dict[str, Any], root: Path) -> None:
    """The manifest's ``counts`` (where given) must equal the row counts of the files."""
    counts = manifest.get("counts") or {}
    for key, fname in COUNT_KEYS.items():
        if (
            isinstance(counts, dict)
            and isinstance(counts.get(key), int)
            and counts[key] != tables[fname].num_rows
        ):
            raise ProgramError(
                f"manifest counts.{key} = {counts[key]} but {fname} has {tables[fname].num_rows} rows",
                path=root,
            )


def _strings_in_id_order(table, column: str, order: np.ndarray) -> list[str]:
    """A string column of a table, permuted into id order."""
    return [str(x) for x in np.asarray(table.column(column).to_pylist(), dtype=object)[order]]


def _relation_keys(relations, order: np.ndarray, kinds: list[str]) -> list[str]:
    """Each relation's stable key across programs: its SCTID as text (is-a, attributes; OWL: the property
    key), else its label for the kinds with one relation per level (``icd_hierarchy``: ``ICD-10-CM
    chapter``, ...), else its kind (``identity``, ``description``)."""
    sctids = np.asarray(relations.column("sctid").to_pylist(), dtype=object)[order]
    labels = np.asarray(relations.column("label").to_pylist(), dtype=object)[order]
    return [
        str(int(s)) if s is not None else str(label) if kind in LABEL_KEYED_KINDS else kind
        for s, kind, label in zip(sctids, kinds, labels, strict=True)
    ]


def _concept_columns(concepts, order: np.ndarray) -> dict[str, list]:
    """The :class:`Program` code columns, in id order (titles: ``""`` for null; chapters: None when the
    optional ``chapter`` column is absent or null)."""
    titles = [x or "" for x in np.asarray(concepts.column("title").to_pylist(), dtype=object)[order]]
    if "chapter" in concepts.column_names:
        raw = np.asarray(concepts.column("chapter").to_pylist(), dtype=object)[order]
        chapters = [None if x is None else int(x) for x in raw]
    else:
        chapters = [None] * order.size
    return {
        "concept_codes": _strings_in_id_order(concepts, "code", order),
        "concept_vocabularies": _strings_in_id_order(concepts, "vocabulary", order),
        "concept_codes_dotted": _strings_in_id_order(concepts, "code_dotted", order),
        "concept_titles": [str(t) for t in titles],
        "concept_chapters": chapters,
    }


def load_program(
    path: str | Path,
    device: str | torch.device = "cpu",
    *,
    verify_all_files: bool = False,
    dedup_rows: bool = True,
) -> Program:
    """Load a compiled program (format 1) from its folder, or the newest program of a release folder
    (:func:`resolve_program`; the log says which one; ``Program.path`` is the program folder used).

    Checks the major ``format_version``, the sha256 of every file read (``verify_all_files=True`` also
    hashes the other files the manifest lists, e.g. ``graph/*``), the Parquet key-value metadata, row
    counts, dense ids, the (relation, slot, concept) edge order and the slice table. Concepts whose edge
    multisets are identical share one computed row when ``dedup_rows`` (the result is the same).

    Raises:
        FormatVersionError: unknown major ``format_version``.
        HashMismatchError: a file's sha256 differs from the manifest (names file, expected, found).
        ProgramError: any other structural problem.
    """
    root = resolve_program(path)
    manifest, tables = _read_verified_tables(root, verify_all_files)

    # --- identifier tables: dense ids, relation kinds
    atoms, relations, concepts = (
        tables[n] for n in ("atoms.parquet", "relations.parquet", "concepts.parquet")
    )
    atom_order = _dense_id_order(atoms, "atoms.parquet", "atom_id", root)
    rel_order = _dense_id_order(relations, "relations.parquet", "relation_id", root)
    con_order = _dense_id_order(concepts, "concepts.parquet", "concept_id", root)
    n_atoms, n_relations, n_concepts = atom_order.size, rel_order.size, con_order.size
    relation_kinds = _relation_kinds(relations, rel_order, root)

    # --- edges and slices
    ec, er, ea, es = _edge_columns(tables["edges.parquet"], n_concepts, n_relations, n_atoms, root)
    sr, ss, sst, sln = _slice_columns(tables["slices.parquet"], er, es, root)
    _check_counts(manifest, tables, root)

    # --- tensors and the composition plan
    base = build_base_plan(
        n_concepts=n_concepts,
        n_atoms=n_atoms,
        n_relations=n_relations,
        edge_concept=ec,
        edge_relation=er,
        edge_atom=ea,
        dedup_rows=dedup_rows,
    )
    dev = torch.device(device)
    program = Program(
        program_id=str(manifest["program_id"]),
        format_version=int(_major(manifest["format_version"])),
        path=root,
        manifest=manifest,
        n_concepts=n_concepts,
        n_atoms=n_atoms,
        n_relations=n_relations,
        **_edge_tensors((ec, er, ea, es), (sr, ss, sst, sln), dev),
        **_concept_columns(concepts, con_order),
        relation_kinds=relation_kinds,
        relation_labels=_strings_in_id_order(relations, "label", rel_order),
        atom_keys=_strings_in_id_order(atoms, "key", atom_order),
        atom_kinds=_strings_in_id_order(atoms, "kind", atom_order),
        atom_labels=_strings_in_id_order(atoms, "label", atom_order),
        relation_keys=_relation_keys(relations, rel_order, relation_kinds),
        base=base.to(dev),
        device=dev,
    )
    _log_loaded(program)
    return program


def _edge_tensors(edges: tuple[np.ndarray, ...], slices: tuple[np.ndarray, ...], dev: torch.device) -> dict:
    """The :class:`Program` edge and slice tensors (int64 on ``dev``), with the two traversal orders."""
    ec, er, ea, es = edges
    sr, _, sst, sln = slices

    def t(x: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64)).to(dev)

    return {
        "edge_concept": t(ec),
        "edge_relation": t(er),
        "edge_atom": t(ea),
        "edge_slot": t(es),
        "order_by_concept": t(np.lexsort((ea, er, ec))),
        "order_by_atom": t(np.lexsort((ec, er, ea))),
        "slice_relation": t(sr),
        "slice_start": t(sst),
        "slice_length": t(sln),
    }


def _log_loaded(program: Program) -> None:
    base = program.base
    log.info(
        "loaded program %s: %d concepts (%d distinct rows), %d atoms, %d relations, %d edges, %d pairs",
        program.program_id,
        program.n_concepts,
        base.n_unique_rows,
        program.n_atoms,
        program.n_relations,
        program.n_edges,
        base.n_pairs,
    )


def _check_slices(root, er, es, sr, ss, sst, sln) -> None:
    """The slice table must tile the edge list into its (relation, slot) runs, in order."""
    if er.size == 0:
        if sr.size:
            raise ProgramError("slices.parquet has rows but edges.parquet is empty", path=root)
        return
    order = np.argsort(sst, kind="stable")
    sr, ss, sst, sln = sr[order], ss[order], sst[order], sln[order]
    change = np.flatnonzero((er[1:] != er[:-1]) | (es[1:] != es[:-1])) + 1
    starts = np.concatenate(([0], change))
    lengths = np.diff(np.concatenate((starts, [er.size])))
    ok = (
        sr.size == starts.size
        and np.array_equal(sst, starts)
        and np.array_equal(sln, lengths)
        and np.array_equal(sr, er[starts])
        and np.array_equal(ss, es[starts])
    )
    if not ok:
        raise ProgramError(
            f"slices.parquet does not match the (relation_id, slot) runs of edges.parquet: expected "
            f"{starts.size} slices, found {sr.size}",
            path=root,
        )
