"""Read RF2 files into typed Arrow tables, columnar (pyarrow CSV; no Python loop per row).

Validation, with file and line in every message:
- the header must equal the published column list of the file's kind;
- every line must have that many TAB-separated fields and be valid UTF-8;
- ``effectiveTime`` is a calendar date YYYYMMDD, ``active`` is 0/1, group/priority columns are integers
  (always fatal);
- SCTID columns are numeric with a valid Verhoeff check digit: with ``strict`` the first bad one is fatal,
  otherwise rows with a non-numeric id are dropped and bad check digits are kept, both counted and logged.

Only the error path scans a file line by line, to name the exact line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from .errors import InputFileError
from .rf2_schema import COLUMNS, INT_COLUMNS, SCTID_COLUMNS, is_calendar_date
from .sctid import verhoeff_valid

log = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"
_LOW_CARDINALITY = (
    "moduleId",
    "typeId",
    "refsetId",
    "characteristicTypeId",
    "modifierId",
    "definitionStatusId",
)


@dataclass
class ReadReport:
    """What reading one file found: rows, and data-quality findings (counted, not fatal)."""

    path: str
    rows: int = 0
    dropped_non_numeric_id: int = 0
    bad_check_digit: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, msg: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(msg)


def read_header(path: Path, *, bom_expected: bool = False) -> list[str]:
    """The header fields of a TAB-separated file (a leading UTF-8 BOM is skipped)."""
    with open(path, "rb") as f:
        first = f.readline()
    if first.startswith(_BOM):
        if not bom_expected:
            log.warning("%s: starts with a UTF-8 BOM (RF2 files have none); ignoring it", path)
        first = first[len(_BOM) :]
    try:
        text = first.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputFileError(path, "invalid UTF-8 in the header", line=1, found=repr(first[:80])) from e
    return text.rstrip("\r\n").split("\t")


def read_rf2_file(path: str | Path, content: str, *, strict: bool = False) -> tuple[pa.Table, ReadReport]:
    """Read one RF2 file of kind ``content`` into a typed table.

    SCTID columns become int64, ``effectiveTime`` int32 (YYYYMMDD), ``active`` int8, group and priority
    columns int32; refset member ids, terms and map text stay strings.
    """
    path = Path(path)
    cols = COLUMNS[content]
    header = read_header(path)
    if tuple(header) != cols:
        raise InputFileError(
            path,
            f"wrong header for an RF2 {content} file",
            line=1,
            expected="\t".join(cols).replace("\t", " "),
            found=" ".join(header) + f" ({len(header)} columns)",
        )
    table = _read_strings(path, cols)
    line_no = np.arange(table.num_rows, dtype=np.int64) + 2  # header is line 1; no quoting, so rows = lines
    return type_rf2_table(path, content, table, line_no, strict=strict)


def read_rf2_like(path: str | Path, table: pa.Table, content: str, *, strict: bool = False) -> pa.Table:
    """Type a string table holding the columns of an RF2 kind (plus ``_line``), e.g. read from a tls file."""
    line_no = table["_line"].to_numpy()
    typed, _report = type_rf2_table(
        Path(path), content, table.drop_columns(["_line"]), line_no, strict=strict
    )
    return typed


def type_rf2_table(
    path: Path, content: str, table: pa.Table, line_no: np.ndarray, *, strict: bool = False
) -> tuple[pa.Table, ReadReport]:
    """Validate and type the string columns of an RF2 kind; see :func:`read_rf2_file`."""
    cols = COLUMNS[content]
    report = ReadReport(path=str(path), rows=table.num_rows)
    out: dict[str, pa.Array] = {}
    keep = None  # bool mask of rows kept (non-numeric SCTIDs dropped when not strict)
    for name in cols:
        col = table.column(name)
        if name in INT_COLUMNS:
            out[name] = _int_column(path, name, col, line_no)
        elif name in SCTID_COLUMNS.get(content, ()):
            arr, ok = _sctid_column(path, name, col, line_no, strict, report)
            out[name] = arr
            if ok is not None:
                keep = ok if keep is None else (keep & ok)
        else:
            out[name] = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    typed = pa.table(out)
    if keep is not None:
        typed = typed.filter(pa.array(keep))
        # physical line numbers survive filtering so later findings can still name lines
        line_no = line_no[keep]
    typed = typed.append_column("_line", pa.array(line_no.astype(np.int64)))
    return typed, report


def read_tsv(
    path: str | Path, columns: tuple[str, ...], what: str, *, bom_expected: bool = False
) -> pa.Table:
    """A TAB-separated, unquoted file with a header equal to ``columns``, all columns as strings.

    Adds ``_line`` (the physical line of each row). Errors name the file and line.
    """
    path = Path(path)
    header = read_header(path, bom_expected=bom_expected)
    if tuple(header) != tuple(columns):
        raise InputFileError(
            path,
            f"wrong header for {what}",
            line=1,
            expected=" ".join(columns) + f" ({len(columns)} TAB-separated columns)",
            found=" ".join(header) + f" ({len(header)} columns)",
        )
    t = _read_strings(path, tuple(columns))
    return t.append_column("_line", pa.array(np.arange(t.num_rows, dtype=np.int64) + 2))


def _read_strings(path: Path, cols: tuple[str, ...]) -> pa.Table:
    try:
        return pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=list(cols), skip_rows=1, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(
                delimiter="\t",
                quote_char=False,
                escape_char=False,
                double_quote=False,
                newlines_in_values=False,
                ignore_empty_lines=False,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={c: pa.string() for c in cols},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                check_utf8=True,
            ),
        )
    except pa.ArrowInvalid as e:
        _locate_problem(path, len(cols))
        raise InputFileError(path, f"could not parse as a TAB-separated RF2 file: {e}") from e


def _locate_problem(path: Path, ncols: int) -> None:
    """Error path only: scan lines to name the first bad one (UTF-8 or column count)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                snippet = raw[max(0, e.start - 30) : e.end + 30]
                raise InputFileError(
                    path,
                    f"invalid UTF-8 at byte {e.start} of the line",
                    line=lineno,
                    expected="UTF-8 text",
                    found=repr(snippet),
                ) from None
            body = text[:-2] if text.endswith("\r\n") else text.rstrip("\n")
            if "\r" in body:
                raise InputFileError(
                    path, "stray carriage return inside a line", line=lineno, found=repr(body[:120])
                )
            n = len(body.split("\t"))
            if n != ncols:
                raise InputFileError(
                    path,
                    "wrong number of columns",
                    line=lineno,
                    expected=f"{ncols} TAB-separated columns",
                    found=f"{n}: {body[:120]!r}",
                )


def _first_bad(mask_bad: np.ndarray, line_no: np.ndarray, col: pa.ChunkedArray) -> tuple[int, str]:
    i = int(np.flatnonzero(mask_bad)[0])
    return int(line_no[i]), col[i].as_py()


def _int_column(path: Path, name: str, col: pa.ChunkedArray, line_no: np.ndarray) -> pa.Array:
    digits = r"^\d{8}$" if name == "effectiveTime" else (r"^[01]$" if name == "active" else r"^\d{1,9}$")
    ok = pc.match_substring_regex(col, digits)
    if not pc.all(ok).as_py() and col.length():
        bad = ~ok.to_numpy(zero_copy_only=False)
        line, value = _first_bad(bad, line_no, col)
        expected = {"effectiveTime": "YYYYMMDD", "active": "0 or 1"}.get(name, "a non-negative integer")
        raise InputFileError(
            path, f"bad value in column {name}", line=line, expected=expected, found=repr(value)
        )
    dtype = pa.int8() if name == "active" else pa.int32()
    values = pc.cast(col, dtype).combine_chunks()
    if name == "effectiveTime" and len(values):
        _check_calendar_dates(path, values, col, line_no)
    return values


def _check_calendar_dates(path: Path, values: pa.Array, col: pa.ChunkedArray, line_no: np.ndarray) -> None:
    """Every effectiveTime is a calendar date (checked on the few distinct values)."""
    bad = [v for v in pc.unique(values).to_pylist() if not is_calendar_date(f"{v:08d}")]
    if bad:
        mask = pc.is_in(values, value_set=pa.array(bad, values.type)).to_numpy(zero_copy_only=False)
        line, value = _first_bad(mask, line_no, col)
        raise InputFileError(
            path,
            "bad value in column effectiveTime: not a calendar date",
            line=line,
            expected="a date YYYYMMDD (month 01-12, a day that month has)",
            found=repr(value),
        )


def _sctid_column(
    path: Path, name: str, col: pa.ChunkedArray, line_no: np.ndarray, strict: bool, report: ReadReport
) -> tuple[pa.Array, np.ndarray | None]:
    keep = None
    try:  # fast path: every value casts (sign, length and check digit are checked below)
        ints = pc.cast(col, pa.int64()).combine_chunks()
        numeric = None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        numeric = pc.match_substring_regex(col, r"^\d{6,18}$")
        ints = None
    if numeric is not None:
        bad = ~numeric.to_numpy(zero_copy_only=False)
        line, value = _first_bad(bad, line_no, col)
        n = int(bad.sum())
        _bad_sctid(
            path,
            f"non-numeric SCTID in column {name}",
            line,
            repr(value),
            n,
            "row(s) dropped",
            strict,
            report,
            expected="6-18 digits",
        )
        report.dropped_non_numeric_id += n
        keep = ~bad
        col = pc.if_else(numeric, col, pa.scalar("0"))
        ints = pc.cast(col, pa.int64()).combine_chunks()
    values = ints.to_numpy()
    if name in _LOW_CARDINALITY:
        uniq, inv = np.unique(values, return_inverse=True)
        valid = verhoeff_valid(uniq)[inv]
    else:
        valid = verhoeff_valid(values)
    if keep is not None:
        valid |= ~keep
    if not valid.all():
        i = int(np.flatnonzero(~valid)[0])
        n = int((~valid).sum())
        _bad_sctid(
            path,
            f"SCTID with a bad Verhoeff check digit in column {name}",
            int(line_no[i]),
            str(values[i]),
            n,
            "value(s); kept",
            strict,
            report,
        )
        report.bad_check_digit += n
    return ints, keep


def _bad_sctid(
    path: Path,
    msg: str,
    line: int,
    shown: str,
    n: int,
    outcome: str,
    strict: bool,
    report: ReadReport,
    expected: str | None = None,
) -> None:
    """A bad SCTID (the first of ``n`` in a column): fatal with ``strict``, else noted and logged once."""
    if strict:
        raise InputFileError(path, msg, line=line, expected=expected, found=shown)
    report.note(f"line {line}: {msg}: {shown}")
    log.warning(
        "%s, line %d: %s: %s (%d such %s; --strict makes this fatal)", path, line, msg, shown, n, outcome
    )
