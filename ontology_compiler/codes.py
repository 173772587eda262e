"""The ICD code universe (``--codes``) and code occurrence counts (``--code-counts``).

``--codes FILE`` is MIMIC-IV ``d_icd_diagnoses.csv[.gz]`` (``icd_code,icd_version,long_title``) or a plain
CSV list of ``version,code`` (a header ``icd_version,icd_code`` or ``version,code`` is optional; dotted or
dotless codes). ``--code-counts FILE`` is a CSV ``icd_version,icd_code,count`` (or ``version,code,count``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from . import icd
from .errors import InputFileError

VERSION_TO_VOCAB = {"9": icd.ICD9CM, "10": icd.ICD10CM}
CODE_HEADERS = {("icd_code", "icd_version", "long_title"): (0, 1, 2),
                ("icd_version", "icd_code"): (1, 0, None),
                ("version", "code"): (1, 0, None)}  # fmt: skip
COUNT_HEADERS = {("icd_version", "icd_code", "count"), ("version", "code", "count")}


def _read_csv(path: Path) -> tuple[list[str], pa.Table]:
    try:
        t = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(autogenerate_column_names=True),
            convert_options=pacsv.ConvertOptions(
                strings_can_be_null=False, column_types={f"f{i}": pa.string() for i in range(8)}
            ),
        )
    except (pa.ArrowInvalid, OSError) as e:
        raise InputFileError(path, f"cannot read as CSV: {e}") from e
    first = [t.column(i)[0].as_py() if t.num_rows else "" for i in range(t.num_columns)]
    return [str(x).strip().lower() for x in first], t


def _vocab(path: Path, versions: pa.Array, lines: np.ndarray) -> pa.Array:
    v = pc.utf8_trim_whitespace(versions)
    ok = pc.is_in(v, value_set=pa.array(list(VERSION_TO_VOCAB))).to_numpy(zero_copy_only=False)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise InputFileError(
            path, "ICD version must be 9 or 10", line=int(lines[i]), found=repr(v[i].as_py())
        )
    return pc.if_else(pc.equal(v, "9"), pa.scalar(icd.ICD9CM), pa.scalar(icd.ICD10CM))


def read_code_universe(path: str | Path) -> pa.Table:
    """``(vocabulary, code, title)``: the codes that become tokens, titles where the file has them."""
    path = Path(path)
    header, t = _read_csv(path)
    key = tuple(header[: 3 if len(header) >= 3 and header[2] == "long_title" else 2])
    if key in CODE_HEADERS:
        ci, vi, ti = CODE_HEADERS[key]
        start = 1
    elif t.num_columns == 2:  # headerless version,code list
        ci, vi, ti, start = 1, 0, None, 0
    else:
        raise InputFileError(
            path,
            "unrecognised code list",
            line=1,
            expected="icd_code,icd_version,long_title (MIMIC-IV d_icd_diagnoses) or version,code",
            found=",".join(header),
        )
    t = t.slice(start)
    lines = np.arange(t.num_rows, dtype=np.int64) + 1 + start
    vocab = _vocab(path, t.column(vi), lines)
    code = icd.dotless(t.column(ci))
    empty = pc.equal(code, "").to_numpy(zero_copy_only=False)
    if empty.any():
        raise InputFileError(path, "empty ICD code", line=int(lines[np.flatnonzero(empty)[0]]))
    title = t.column(ti) if ti is not None else pa.nulls(t.num_rows, pa.string())
    out = pa.table({"vocabulary": vocab, "code": code, "title": title})
    return (
        out.group_by(["vocabulary", "code"], use_threads=False)
        .aggregate([("title", "first")])
        .rename_columns(["vocabulary", "code", "title"])
    )


def read_code_counts(path: str | Path) -> pa.Table:
    """``(vocabulary, code, count)`` summed per code."""
    path = Path(path)
    header, t = _read_csv(path)
    if tuple(header[:3]) not in COUNT_HEADERS:
        raise InputFileError(
            path,
            "unrecognised code-count file",
            line=1,
            expected="icd_version,icd_code,count",
            found=",".join(header),
        )
    t = t.slice(1)
    lines = np.arange(t.num_rows, dtype=np.int64) + 2
    vi, ci = (0, 1)
    counts = pc.utf8_trim_whitespace(t.column(2))
    ok = pc.match_substring_regex(counts, r"^\d+$").to_numpy(zero_copy_only=False)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise InputFileError(
            path, "count must be a non-negative integer", line=int(lines[i]), found=repr(counts[i].as_py())
        )
    out = pa.table(
        {
            "vocabulary": _vocab(path, t.column(vi), lines),
            "code": icd.dotless(t.column(ci)),
            "count": pc.cast(counts, pa.int64()),
        }
    )
    return (
        out.group_by(["vocabulary", "code"], use_threads=False)
        .aggregate([("count", "sum")])
        .rename_columns(["vocabulary", "code", "count"])
    )
