"""Resolve RF2 tables to the state at a date, merge modules, and keep the active view.

Full at date D: per ``id`` the row with the greatest ``effectiveTime`` not after D (rows with the same
id and time are identical by construction). A Snapshot is already resolved, but several packages
(International plus an extension) may repeat an id; the same rule picks one row. All vectorised.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)


def concat(tables: list[pa.Table]) -> pa.Table:
    """Concatenate tables of one content kind read from several files (modules)."""
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="none")


def latest_per_id(table: pa.Table, as_of: int | None) -> pa.Table:
    """Rows with ``effectiveTime <= as_of`` (all when None), then the latest row per ``id``."""
    if as_of is not None:
        table = table.filter(pc.less_equal(table["effectiveTime"], pa.scalar(as_of, pa.int32())))
    n = table.num_rows
    if n == 0:
        return table
    ids = table["id"]
    if pc.count_distinct(ids).as_py() == n:  # the common Snapshot case: nothing to resolve
        return table
    order = pc.sort_indices(table, sort_keys=[("id", "ascending"), ("effectiveTime", "descending")])
    sorted_ids = pc.take(ids, order)
    first = np.ones(n, dtype=bool)
    if pa.types.is_integer(sorted_ids.type):
        s = sorted_ids.to_numpy()
        first[1:] = s[1:] != s[:-1]
    else:
        s = sorted_ids.combine_chunks() if isinstance(sorted_ids, pa.ChunkedArray) else sorted_ids
        first[1:] = pc.not_equal(s.slice(1), s.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    picked = order.to_numpy()[first]
    picked.sort()  # keep file order for determinism
    return table.take(pa.array(picked))


def active(table: pa.Table) -> pa.Table:
    return table.filter(pc.equal(table["active"], pa.scalar(1, pa.int8())))
