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
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
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
    # block by block: a thread parses the next block while this one is typed, and the file's text is
    # never whole in memory (line numbers run on: the header is line 1; no quoting, so rows = lines)
    report = ReadReport(path=str(path))
    parts = []
    first_line = 2
    for block in _string_blocks(path, cols):
        n = block.num_rows
        typed, found = type_rf2_table(
            path, content, block, np.arange(first_line, first_line + n, dtype=np.int64), strict=strict
        )
        del block
        parts.append(typed)
        first_line += n
        report.rows += found.rows
        report.dropped_non_numeric_id += found.dropped_non_numeric_id
        report.bad_check_digit += found.bad_check_digit
        for e in found.examples:
            report.note(e)
    if not parts:  # a header and no rows
        empty = pa.table({c: pa.array([], pa.string()) for c in cols})
        return type_rf2_table(path, content, empty, np.zeros(0, dtype=np.int64), strict=strict)
    return (parts[0] if len(parts) == 1 else pa.concat_tables(parts)), report  # chunked: no copy


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

    def typed_column(name: str) -> Callable[[], tuple[pa.Array, np.ndarray | None]]:
        col = table.column(name)
        if name in INT_COLUMNS:
            arr = _int_column(path, name, col, line_no)
            return lambda: (arr, None)
        if name in SCTID_COLUMNS.get(content, ()):
            return _sctid_column(path, name, col, line_no, strict, report)
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        return lambda: (arr, None)

    # Arrow work here, the check digits of large columns two at a time on worker threads (numpy leaves
    # Python's lock; workers allocate no Arrow memory, which a worker's heap would keep); results, findings
    # and the first error are taken in column order, whichever thread finished first
    finishers = []
    for name in cols:
        try:
            finishers.append(typed_column(name))
        except InputFileError as e:
            finishers.append(_raiser(e))
    out: dict[str, pa.Array] = {}
    keep = None  # bool mask of rows kept (non-numeric SCTIDs dropped when not strict)
    for name, finish in zip(cols, finishers, strict=True):
        arr, ok = finish()
        out[name] = arr
        if ok is not None:
            keep = ok if keep is None else (keep & ok)
    typed = pa.table(out)
    if keep is not None:
        typed = typed.filter(pa.array(keep))
        # physical line numbers survive filtering so later findings can still name lines
        line_no = line_no[keep]
    typed = typed.append_column("_line", pa.array(line_no.astype(np.int64)))
    return typed, report


_PARSER: ThreadPoolExecutor | None = None


def _parse_pool() -> ThreadPoolExecutor:
    """One thread that parses every file (its Arrow heap reuses the blocks the caller has freed)."""
    global _PARSER
    if _PARSER is None:
        _PARSER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rf2-parse")
    return _PARSER


_POOL: ThreadPoolExecutor | None = None
COLUMN_THREADS = 2


def _column_pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=COLUMN_THREADS, thread_name_prefix="rf2-columns")
    return _POOL


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


BLOCK_BYTES = 1 << 24  # text parsed at a time


def _csv_options(cols: tuple[str, ...]) -> dict:
    return {
        # one thread per file: as fast on two cores (the other one types the previous block)
        "read_options": pacsv.ReadOptions(
            column_names=list(cols), skip_rows=1, block_size=BLOCK_BYTES, use_threads=False
        ),
        "parse_options": pacsv.ParseOptions(
            delimiter="\t",
            quote_char=False,
            escape_char=False,
            double_quote=False,
            newlines_in_values=False,
            ignore_empty_lines=False,
        ),
        "convert_options": pacsv.ConvertOptions(
            column_types={c: pa.string() for c in cols},
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            check_utf8=True,
        ),
    }


def _read_strings(path: Path, cols: tuple[str, ...]) -> pa.Table:
    """The whole file as a table of strings (the small tables read whole: map files, tls)."""
    try:
        return pacsv.read_csv(path, **_csv_options(cols))
    except pa.ArrowInvalid as e:
        _locate_problem(path, len(cols))
        raise InputFileError(path, f"could not parse as a TAB-separated RF2 file: {e}") from e


_END = object()


def _string_blocks(path: Path, cols: tuple[str, ...]) -> Iterator[pa.Table]:
    """The file's rows as tables of strings, a block (:data:`BLOCK_BYTES` of text) each, parsed on a
    thread one block ahead of the caller. A parse error is an :class:`InputFileError` naming the line."""
    blocks: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            with pacsv.open_csv(path, **_csv_options(cols)) as reader:
                for batch in reader:
                    while not stop.is_set():
                        try:
                            blocks.put(batch, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
            blocks.put(_END)
        except BaseException as e:  # handed to the caller
            blocks.put(e)

    _parse_pool().submit(produce)
    try:
        while (item := blocks.get()) is not _END:
            if isinstance(item, pa.ArrowInvalid):
                _locate_problem(path, len(cols))
                raise InputFileError(path, f"could not parse as a TAB-separated RF2 file: {item}") from item
            if isinstance(item, BaseException):
                raise item
            yield pa.Table.from_batches([item])
    finally:
        stop.set()


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


def _encoded(col: pa.ChunkedArray | pa.Array) -> pa.DictionaryArray:
    """The column dictionary-encoded in one chunk: few distinct values are then checked and cast once."""
    d = pc.dictionary_encode(col)
    return d.combine_chunks() if isinstance(d, pa.ChunkedArray) else d


def _rows_with(d: pa.DictionaryArray, bad: np.ndarray) -> np.ndarray:
    """Bool mask of the rows whose dictionary entry is one of ``bad`` (dictionary positions)."""
    return pc.is_in(d.indices, value_set=pa.array(bad, d.indices.type)).to_numpy(zero_copy_only=False)


def _int_column(path: Path, name: str, col: pa.ChunkedArray, line_no: np.ndarray) -> pa.Array:
    """A small-integer column (dates, flags, groups, priorities): its distinct values are checked and cast,
    then spread to the rows."""
    digits = r"^\d{8}$" if name == "effectiveTime" else (r"^[01]$" if name == "active" else r"^\d{1,9}$")
    d = _encoded(col)
    ok = pc.match_substring_regex(d.dictionary, digits).to_numpy(zero_copy_only=False)
    if not ok.all():
        line, value = _first_bad(_rows_with(d, np.flatnonzero(~ok)), line_no, col)
        expected = {"effectiveTime": "YYYYMMDD", "active": "0 or 1"}.get(name, "a non-negative integer")
        raise InputFileError(
            path, f"bad value in column {name}", line=line, expected=expected, found=repr(value)
        )
    dtype = pa.int8() if name == "active" else pa.int32()
    if name == "effectiveTime":
        bad = [i for i, v in enumerate(d.dictionary.to_pylist()) if not is_calendar_date(v)]
        if bad:
            line, value = _first_bad(_rows_with(d, np.array(bad)), line_no, col)
            raise InputFileError(
                path,
                "bad value in column effectiveTime: not a calendar date",
                line=line,
                expected="a date YYYYMMDD (month 01-12, a day that month has)",
                found=repr(value),
            )
    return pc.take(pc.cast(d.dictionary, dtype), d.indices)


def _raiser(e: BaseException) -> Callable[[], tuple[pa.Array, np.ndarray | None]]:
    def raise_it() -> tuple[pa.Array, np.ndarray | None]:
        raise e

    return raise_it


def _sctid_column(
    path: Path, name: str, col: pa.ChunkedArray, line_no: np.ndarray, strict: bool, report: ReadReport
) -> Callable[[], tuple[pa.Array, np.ndarray | None]]:
    """An SCTID column as int64, and the rows to keep (None: all), from the function returned (call it in
    column order: it reports and, with ``strict``, raises). A column of few distinct values
    (:data:`_LOW_CARDINALITY`) is checked on its dictionary here; a large one's check digits on a worker."""
    if name in _LOW_CARDINALITY:
        d = _encoded(col)
        try:  # as the column path below: a column that casts is numeric throughout
            dict_ints = pc.cast(d.dictionary, pa.int64()).to_numpy()
            numeric = np.ones(len(dict_ints), dtype=bool)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            numeric = pc.match_substring_regex(d.dictionary, r"^\d{6,18}$").to_numpy(zero_copy_only=False)
            words = pc.if_else(pa.array(numeric), d.dictionary, pa.scalar("0"))
            dict_ints = pc.cast(words, pa.int64()).to_numpy()
        dict_valid = verhoeff_valid(dict_ints) | ~numeric
        keep = None if numeric.all() else ~_rows_with(d, np.flatnonzero(~numeric))
        ints = pc.take(pa.array(dict_ints), d.indices)
        invalid = None if dict_valid.all() else _rows_with(d, np.flatnonzero(~dict_valid))
    else:
        keep = None
        try:  # fast path: every value casts (sign, length and check digit are checked below)
            ints = pc.cast(col, pa.int64()).combine_chunks()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            numeric_rows = pc.match_substring_regex(col, r"^\d{6,18}$")
            keep = numeric_rows.to_numpy(zero_copy_only=False)
            ints = pc.cast(pc.if_else(numeric_rows, col, pa.scalar("0")), pa.int64()).combine_chunks()
        checking = _column_pool().submit(verhoeff_valid, ints.to_numpy())
        invalid = None

    def finish() -> tuple[pa.Array, np.ndarray | None]:
        bad_digits = invalid
        if bad_digits is None and name not in _LOW_CARDINALITY:
            valid = checking.result()
            if keep is not None:
                valid |= ~keep
            bad_digits = None if valid.all() else ~valid
        _report_sctids(path, name, col, line_no, strict, report, ints, keep, bad_digits)
        return ints, keep

    return finish


def _report_sctids(
    path: Path,
    name: str,
    col: pa.ChunkedArray,
    line_no: np.ndarray,
    strict: bool,
    report: ReadReport,
    ints: pa.Array,
    keep: np.ndarray | None,
    invalid: np.ndarray | None,
) -> None:
    """Count, log and (``strict``) raise the non-numeric and bad-check-digit SCTIDs of a column."""
    if keep is not None:
        bad = ~keep
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
    if invalid is not None:
        i = int(np.flatnonzero(invalid)[0])
        n = int(invalid.sum())
        _bad_sctid(
            path,
            f"SCTID with a bad Verhoeff check digit in column {name}",
            int(line_no[i]),
            str(ints[i].as_py()),
            n,
            "value(s); kept",
            strict,
            report,
        )
        report.bad_check_digit += n


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
