"""Write RF2 files exactly as SNOMED International publishes them (``docs/input-formats.md``, RF2 release).

An RF2 file is UTF-8 without a BOM, one header row holding the column names of its content kind
(:data:`ontology_compiler.rf2_schema.COLUMNS`), fields separated by a single TAB, every line ended by
CRLF, and no quoting or escaping at all: a field may contain ``"`` but never a TAB, CR or LF.

``pyarrow.csv.write_csv`` with ``quoting_style="none"`` refuses values holding a ``"`` (which RF2
allows, e.g. concrete string values), so the body is built with pyarrow compute string kernels
instead: every column is cast to text, the columns are joined with TAB, CRLF is appended, and the
contiguous bytes of the resulting string array are written out. No Python loop runs per row; a table
is processed in slices of :data:`_SLICE_ROWS` rows to bound memory.

Files are written to a temporary name in the target folder and renamed into place with
:func:`os.replace`, so a reader never sees a half-written file.

Also here: the standard RF2 file names (:func:`rf2_file_name`) and the package folder of each
content kind (:func:`rf2_folder`).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ontology_compiler.rf2_schema import COLUMNS, FILE_NAME_RE

__all__ = ["rf2_file_name", "rf2_folder", "write_rf2_file"]

log = logging.getLogger(__name__)

_SLICE_ROWS = 1_000_000
_FORBIDDEN = "[\t\r\n]"

# content kind -> (file type, refset pattern or None for core component files, has a language tag)
_FILE_KIND: dict[str, tuple[str, str | None, bool]] = {
    "Concept": ("sct2", None, False),
    "Description": ("sct2", None, True),
    "TextDefinition": ("sct2", None, True),
    "Relationship": ("sct2", None, False),
    "StatedRelationship": ("sct2", None, False),
    "RelationshipConcreteValues": ("sct2", None, False),
    "Language": ("der2", "c", True),
    "ExtendedMap": ("der2", "iissscc", False),
    "SimpleMap": ("der2", "s", False),
    "Association": ("der2", "c", False),
    "AssociationReference": ("der2", "c", False),
    "OWLExpression": ("sct2", "s", False),
}

_FOLDER: dict[str, str] = {
    "Concept": "Terminology",
    "Description": "Terminology",
    "TextDefinition": "Terminology",
    "Relationship": "Terminology",
    "StatedRelationship": "Terminology",
    "RelationshipConcreteValues": "Terminology",
    "OWLExpression": "Terminology",
    "Language": "Refset/Language",
    "ExtendedMap": "Refset/Map",
    "SimpleMap": "Refset/Map",
    "Association": "Refset/Content",
    "AssociationReference": "Refset/Content",
}

_RELEASES = ("Full", "Snapshot", "Delta")


def rf2_file_name(
    content: str, release: str, namespace: str, date: str | int, lang: str | None = None
) -> str:
    """The standard RF2 file name of ``content`` (a key of ``COLUMNS``).

    ``release`` is ``Full``, ``Snapshot`` or ``Delta``; ``namespace`` e.g. ``INT`` or ``US1000124``;
    ``date`` is ``YYYYMMDD``. ``lang`` defaults to ``en`` for Description, TextDefinition and Language
    files and must be None for the others. Examples: ``sct2_Concept_Snapshot_INT_20220531.txt``,
    ``sct2_Description_Snapshot-en_INT_20220531.txt``,
    ``der2_iisssccRefset_ExtendedMapSnapshot_INT_20220531.txt``.
    """
    if content not in _FILE_KIND:
        raise ValueError(f"unknown RF2 content kind {content!r}; known: {sorted(_FILE_KIND)}")
    if release not in _RELEASES:
        raise ValueError(f"release must be one of {_RELEASES}, got {release!r}")
    date = str(date)
    if len(date) != 8 or not date.isdigit():
        raise ValueError(f"date must be YYYYMMDD, got {date!r}")
    ftype, pattern, has_lang = _FILE_KIND[content]
    if has_lang:
        lang = lang or "en"
    elif lang is not None:
        raise ValueError(f"{content} files carry no language tag (got lang={lang!r})")
    suffix = f"-{lang}" if lang else ""
    if pattern is None:
        name = f"{ftype}_{content}_{release}{suffix}_{namespace}_{date}.txt"
    else:
        name = f"{ftype}_{pattern}Refset_{content}{release}{suffix}_{namespace}_{date}.txt"
    m = FILE_NAME_RE.match(name)
    if m is None or m["content"] != content or m["release"] != release or m["namespace"] != namespace:
        raise ValueError(f"generated file name {name!r} does not parse back with FILE_NAME_RE")
    return name


def rf2_folder(content: str) -> str:
    """Folder of ``content`` inside a release's ``Snapshot``/``Full`` tree, e.g. ``Refset/Map``."""
    try:
        return _FOLDER[content]
    except KeyError:
        raise ValueError(f"unknown RF2 content kind {content!r}; known: {sorted(_FOLDER)}") from None


def _as_table(content: str, table: pa.Table | Mapping[str, Any]) -> pa.Table:
    if content not in COLUMNS:
        raise ValueError(f"unknown RF2 content kind {content!r}; known: {sorted(COLUMNS)}")
    if not isinstance(table, pa.Table):
        cols = {}
        for name, values in table.items():
            if isinstance(values, pa.Array | pa.ChunkedArray):
                cols[name] = values
            elif isinstance(values, np.ndarray):
                cols[name] = pa.array(values)
            else:
                cols[name] = pa.array(list(values))
        table = pa.table(cols)
    expected = COLUMNS[content]
    have = list(table.column_names)
    if sorted(have) != sorted(expected) or len(have) != len(expected):
        missing = [c for c in expected if c not in have]
        extra = [c for c in have if c not in expected]
        raise ValueError(
            f"{content}: table columns do not match RF2 header {list(expected)}; "
            f"missing {missing}, unexpected {extra}"
        )
    return table.select(list(expected))


def _column_text(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    """One column as large_string with nulls as empty strings; raises on unwritable values."""
    t = col.type
    if pa.types.is_boolean(t):
        col = pc.cast(col, pa.int8())
        t = col.type
    if pa.types.is_integer(t):
        text = pc.cast(col, pa.large_string())
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        text = pc.cast(col, pa.large_string())
        bad = pc.match_substring_regex(text, _FORBIDDEN)
        if pc.any(bad).as_py():
            row = int(pc.index(bad, True).as_py())
            raise ValueError(
                f"column {name!r} row {row}: value {text[row].as_py()!r} contains TAB, CR or LF, "
                "which RF2 cannot represent (there is no quoting or escaping)"
            )
    elif pa.types.is_null(t):
        text = pc.cast(col, pa.large_string())
    else:
        raise ValueError(f"column {name!r} has type {t}; RF2 columns must be integers or strings")
    return pc.fill_null(text, "")


def _slice_bytes(table: pa.Table) -> bytes | pa.Buffer:
    """TAB-joined, CRLF-terminated bytes of every row of ``table`` (no header)."""
    if table.num_rows == 0:
        return b""
    texts = [_column_text(n, table.column(n)) for n in table.column_names]
    tab, crlf, empty = (pa.scalar(x, pa.large_string()) for x in ("\t", "\r\n", ""))
    lines = pc.binary_join_element_wise(*texts, tab)
    lines = pc.binary_join_element_wise(lines, empty, crlf)  # row + CRLF + ""
    arr = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    return data.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def write_rf2_file(path: str | os.PathLike[str], content: str, table: pa.Table | Mapping[str, Any]) -> int:
    """Write ``table`` as the RF2 file ``path`` of kind ``content``; returns the number of bytes.

    ``table`` is a pyarrow Table or a mapping of column name to list / numpy array / pyarrow array.
    Its columns must be exactly ``COLUMNS[content]`` (any order; they are written in RF2 order).
    Integer columns are written as plain digits, booleans as 1/0, strings verbatim, nulls as empty
    fields. A string holding TAB, CR or LF raises ValueError; float columns raise ValueError.
    The file is written to a temporary file in the same folder, then renamed over ``path``.
    """
    t = _as_table(content, table)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = ("\t".join(COLUMNS[content]) + "\r\n").encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    size = len(header)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(header)
            for start in range(0, t.num_rows, _SLICE_ROWS):
                body = _slice_bytes(t.slice(start, _SLICE_ROWS))
                fh.write(body)
                size += len(body)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    log.debug("wrote %s: %d rows, %d bytes", path, t.num_rows, size)
    return size
