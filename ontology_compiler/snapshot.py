"""Resolve RF2 tables to the state at a date, merge modules, and keep the active view.

Full at date D: per ``id`` the row with the greatest ``effectiveTime`` not after D. A Snapshot is already
resolved, but several packages (International plus an extension) may repeat an id; the same rule picks
one row. Two rows with the same id and effectiveTime must be identical (:func:`drop_duplicates` drops
the repeats and refuses rows that differ), so the pick never depends on file order. All vectorised.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import DuplicateRowError
from .order import stable_order

log = logging.getLogger(__name__)

# Bookkeeping columns: where a row came from (index into the list of files read, physical line).
SOURCE_COLUMNS = ("_src", "_line")


def concat(tables: list[pa.Table]) -> pa.Table:
    """Concatenate tables of one content kind read from several files (modules)."""
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="none")


def all_distinct(ids: pa.Array | pa.ChunkedArray) -> bool:
    """Whether no value of the ``id`` column repeats (the common Snapshot case), without Arrow's hash
    count: int64 ids by a numpy sort; strings of one width (refset member UUIDs) by a sort of a 64-bit
    digest of their bytes, confirmed on the strings where two digests meet; other strings by Arrow."""
    n = len(ids)
    if n < 2:
        return True
    arr = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    if pa.types.is_integer(arr.type):
        v = arr.to_numpy()
        if bool((v[1:] > v[:-1]).all()):  # a file in id order (one pass, no sort)
            return True
        v = np.sort(v)
        return not bool((v[1:] == v[:-1]).any())
    key = _digest(arr)
    if key is None:
        return pc.count_distinct(arr).as_py() == n
    k = np.sort(key)
    if not bool((k[1:] == k[:-1]).any()):
        return True
    order = np.argsort(key, kind="stable")
    k = key[order]
    meet = np.flatnonzero(k[1:] == k[:-1])
    suspects = pa.array(np.unique(np.concatenate([order[meet], order[meet + 1]])))
    return pc.count_distinct(pc.take(arr, suspects)).as_py() == len(suspects)  # exact among the suspects


_MIX = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)


def _digest(arr: pa.Array) -> np.ndarray | None:
    """A uint64 digest of each value when all values are strings of one byte length (1-64), else None.
    Equal strings share a digest; different ones rarely do."""
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) or arr.null_count:
        return None
    n = len(arr)
    off_type = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=off_type)[arr.offset : arr.offset + n + 1]
    width = int(offsets[1] - offsets[0])
    if (
        not 0 < width <= 64
        or offsets[-1] - offsets[0] != width * n
        or not bool((np.diff(offsets) == width).all())
    ):
        return None
    data = arr.buffers()[2]
    start = int(offsets[0])
    out = np.zeros(n, dtype=np.uint64)
    for j, k in enumerate(range(0, width, 8)):
        if width - k >= 8:  # eight bytes of every string, read in place (a strided view)
            word = np.ndarray((n,), dtype="<u8", buffer=data, offset=start + k, strides=(width,))
        else:  # the last bytes, zero-padded
            word = np.zeros(n, dtype=np.uint64)
            for b in range(width - k):
                byte = np.ndarray((n,), dtype=np.uint8, buffer=data, offset=start + k + b, strides=(width,))
                word |= byte.astype(np.uint64) << np.uint64(8 * b)
        out ^= (word + np.uint64(j)) * np.uint64(_MIX[j % 4])
        out ^= out >> np.uint64(29)
    return out


def drop_duplicates(
    table: pa.Table, files: list[Path], *, distinct: bool | None = None
) -> tuple[pa.Table, int]:
    """Drop repeated rows (same ``id`` and ``effectiveTime``, identical content); ``(table, dropped)``.

    ``table`` carries ``_src`` (index into ``files``) and ``_line``. Two rows with the same id and
    effectiveTime that differ in any other column raise :class:`DuplicateRowError` naming both lines:
    which one holds would otherwise depend on the order the files were read in. The first row in file
    order is kept.
    """
    n = table.num_rows
    if distinct is None:
        distinct = all_distinct(table["id"])
    if n < 2 or distinct:  # the common Snapshot case
        return table, 0
    # a stable sort: rows of one id and time stay in file order (the table is files in order, lines in order)
    fast = _id_time_order(table, time_descending=False)
    if fast is not None:
        o, same_id = fast
        times = table["effectiveTime"].to_numpy()[o]
        same = same_id & (times[1:] == times[:-1])
    else:
        order = pc.sort_indices(table, sort_keys=[("id", "ascending"), ("effectiveTime", "ascending")])
        same = _equal_neighbours(pc.take(table["id"], order)) & _equal_neighbours(
            pc.take(table["effectiveTime"], order)
        )
        o = order.to_numpy()
    if not same.any():
        return table, 0
    first, second = pa.array(o[:-1][same]), pa.array(o[1:][same])
    _refuse_differing(table, files, first, second)
    keep = np.ones(n, dtype=bool)
    keep[second.to_numpy()] = False
    dropped = int(n - keep.sum())
    return table.filter(pa.array(keep)), dropped


def _refuse_differing(table: pa.Table, files: list[Path], first: pa.Array, second: pa.Array) -> None:
    """Raise :class:`DuplicateRowError` naming both lines when a pair of rows ``first[i]``,
    ``second[i]`` (same id and effectiveTime) differs in content."""
    content = [c for c in table.column_names if c not in SOURCE_COLUMNS]
    differs = np.zeros(len(first), dtype=bool)
    columns_differing: list[list[str]] = [[] for _ in range(len(first))]
    for c in content:
        d = pc.not_equal(pc.take(table[c], first), pc.take(table[c], second))
        d = pc.fill_null(d, True).to_numpy(zero_copy_only=False)
        if d.any():
            differs |= d
            for i in np.flatnonzero(d):
                if len(columns_differing[i]) < 5:
                    columns_differing[i].append(c)
    if differs.any():
        i = int(np.flatnonzero(differs)[0])
        a, b = int(first[i].as_py()), int(second[i].as_py())
        cols = columns_differing[i]
        row_a = {c: table[c][a].as_py() for c in cols}
        row_b = {c: table[c][b].as_py() for c in cols}
        src, line = table["_src"], table["_line"]
        fa, la = files[src[a].as_py()], line[a].as_py()
        fb, lb = files[src[b].as_py()], line[b].as_py()
        raise DuplicateRowError(
            fa,
            la,
            fb,
            lb,
            f"two rows of id {table['id'][a].as_py()} with effectiveTime {table['effectiveTime'][a].as_py()} "
            f"differ (this line and {fb}, line {lb}); {int(differs.sum())} such pair(s)",
            expected="one state per component and effectiveTime (identical repeats are dropped)",
            found=f"line {la}: "
            + ", ".join(f"{c}={v!r}" for c, v in row_a.items())
            + f"; line {lb}: "
            + ", ".join(f"{c}={v!r}" for c, v in row_b.items()),
        )


def resolve_at(table: pa.Table, files: list[Path], as_of: int | None) -> tuple[pa.Table, int]:
    """:func:`drop_duplicates`, then :func:`latest_per_id` at ``as_of``, in one sort (a Full release):
    ``(table, dropped)``, the rows kept in file order."""
    n = table.num_rows
    fast = _id_time_order(table, time_descending=True) if n >= 2 else None
    if fast is None:
        table, dropped = drop_duplicates(table, files)
        return latest_per_id(table, as_of), dropped
    o, same_id = fast
    times = table["effectiveTime"].to_numpy()[o]
    same = same_id & (times[1:] == times[:-1])  # repeats: in file order within an id and time
    valid = np.ones(n, dtype=bool)
    dropped = 0
    if same.any():
        _refuse_differing(table, files, pa.array(o[:-1][same]), pa.array(o[1:][same]))
        valid[1:][same] = False
        dropped = int(same.sum())
    if as_of is not None:
        valid &= times <= as_of
    group = np.cumsum(np.concatenate([[True], ~same_id]))  # the id of each sorted row, as a run number
    at = np.flatnonzero(valid)
    g = group[at]
    firsts = at[np.concatenate([[True], g[1:] != g[:-1]])] if len(at) else at  # latest valid row per id
    return table.take(pa.array(np.sort(o[firsts]))), dropped


def _id_time_order(table: pa.Table, *, time_descending: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """A stable order of the rows by id, then effectiveTime (``time_descending``: latest first), and
    ``same[i]``: sorted rows ``i`` and ``i + 1`` share an id; by a numpy sort of integer ids or of the
    64-bit digests of one-width string ids (refset member UUIDs). Rows whose digests meet are compared
    as strings; should two different ids share a digest, None (the caller sorts the strings)."""
    arr = table["id"].combine_chunks()
    times = table["effectiveTime"].to_numpy().astype(np.int64)
    if pa.types.is_integer(arr.type):
        key = arr.to_numpy()
        exact = True
    else:
        key = _digest(arr)
        if key is None:
            return None
        exact = False
    order = stable_order(key, -times if time_descending else times)
    k = key[order]
    same = k[1:] == k[:-1]
    if not exact and same.any():
        a, b = pc.take(arr, pa.array(order[:-1][same])), pc.take(arr, pa.array(order[1:][same]))
        if not pc.all(pc.equal(a, b)).as_py():
            return None
    return order, same


def _equal_neighbours(sorted_values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``out[i]``: value ``i + 1`` equals value ``i`` (length n - 1)."""
    s = sorted_values.combine_chunks() if isinstance(sorted_values, pa.ChunkedArray) else sorted_values
    if pa.types.is_integer(s.type):
        v = s.to_numpy()
        return v[1:] == v[:-1]
    n = len(s)
    return pc.equal(s.slice(1), s.slice(0, n - 1)).to_numpy(zero_copy_only=False)


def latest_per_id(table: pa.Table, as_of: int | None, *, distinct: bool | None = None) -> pa.Table:
    """Rows with ``effectiveTime <= as_of`` (all when None), then the latest row per ``id``. ``distinct``:
    whether the ids are known to be distinct (computed when None)."""
    if as_of is not None:
        table = table.filter(pc.less_equal(table["effectiveTime"], pa.scalar(as_of, pa.int32())))
    n = table.num_rows
    if n == 0:
        return table
    ids = table["id"]
    if distinct or (distinct is None and all_distinct(ids)):  # the common Snapshot case: nothing to resolve
        return table
    fast = _id_time_order(table, time_descending=True)
    if fast is not None:
        o, same_id = fast
    else:
        order = pc.sort_indices(table, sort_keys=[("id", "ascending"), ("effectiveTime", "descending")])
        o, same_id = order.to_numpy(), _equal_neighbours(pc.take(ids, order))
    first = np.ones(n, dtype=bool)
    first[1:] = ~same_id
    picked = o[first]
    picked.sort()  # keep file order for determinism
    return table.take(pa.array(picked))


def active(table: pa.Table) -> pa.Table:
    return table.filter(pc.equal(table["active"], pa.scalar(1, pa.int8())))
