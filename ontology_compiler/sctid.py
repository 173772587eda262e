"""SNOMED CT identifiers: Verhoeff check digits (scalar and vectorised) and partitions.

An SCTID reads ``itemIdentifier [namespace(7)] partition(2) checkDigit(1)``; the check digit is the
Verhoeff (dihedral group D5) checksum over all preceding digits.
"""

from __future__ import annotations

import numpy as np

_D = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        [1, 2, 3, 4, 0, 6, 7, 8, 9, 5],
        [2, 3, 4, 0, 1, 7, 8, 9, 5, 6],
        [3, 4, 0, 1, 2, 8, 9, 5, 6, 7],
        [4, 0, 1, 2, 3, 9, 5, 6, 7, 8],
        [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
        [6, 5, 9, 8, 7, 1, 0, 4, 3, 2],
        [7, 6, 5, 9, 8, 2, 1, 0, 4, 3],
        [8, 7, 6, 5, 9, 3, 2, 1, 0, 4],
        [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
    ],
    dtype=np.int8,
)
_P = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        [1, 5, 7, 6, 2, 8, 3, 0, 9, 4],
        [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
        [8, 9, 1, 6, 0, 4, 3, 5, 2, 7],
        [9, 4, 5, 3, 1, 2, 6, 8, 7, 0],
        [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
        [2, 7, 9, 3, 8, 0, 6, 4, 1, 5],
        [7, 0, 4, 6, 9, 1, 3, 2, 5, 8],
    ],
    dtype=np.int8,
)
_INV = [0, 4, 3, 2, 1, 5, 6, 7, 8, 9]

PARTITION_CONCEPT = "00"
PARTITION_DESCRIPTION = "01"
PARTITION_RELATIONSHIP = "02"
PARTITION_EXT_CONCEPT = "10"
PARTITION_EXT_DESCRIPTION = "11"
PARTITION_EXT_RELATIONSHIP = "12"


def check_digit(body: str) -> int:
    """Verhoeff check digit for ``body`` (item [+ namespace] + partition)."""
    c = 0
    for i, ch in enumerate(reversed(body)):
        c = int(_D[c][_P[(i + 1) % 8][int(ch)]])
    return _INV[c]


def is_valid(sctid: str | int) -> bool:
    """True when ``sctid`` is 6-18 digits with a correct Verhoeff check digit."""
    s = str(sctid)
    if not (6 <= len(s) <= 18 and s.isdigit()):
        return False
    c = 0
    for i, ch in enumerate(reversed(s)):
        c = int(_D[c][_P[i % 8][int(ch)]])
    return c == 0


def make_sctid(item: int, partition: str = PARTITION_CONCEPT, namespace: str = "") -> int:
    """A valid SCTID from an item number, a partition and an optional 7-digit namespace."""
    body = f"{item}{namespace}{partition}"
    return int(body + str(check_digit(body)))


def verhoeff_valid(ids: np.ndarray) -> np.ndarray:
    """Vectorised :func:`is_valid` over a non-negative int64 array; returns a bool array.

    Shapes: ids (N,) int64 -> (N,) bool. Ids outside 6-18 digits are invalid. Three digits a step, through
    a table of the checksum state after them (:func:`_chunk_table`): six gathers instead of eighteen.
    """
    x = np.asarray(ids, dtype=np.int64)
    ok_len = (x >= 100_000) & (x < 10**18)
    table = _chunk_table()
    r = np.where(ok_len, x, 0)
    c = np.zeros(x.shape, dtype=np.int64)
    for g in range(6):  # digits 3g, 3g+1, 3g+2 counted from the right
        live = (r >= 1).astype(np.int64) + (r >= 10) + (r >= 100)  # leading zeros are not digits
        c = table[((g * 4 + live) * 10 + c) * 1000 + r % 1000]
        r = r // 1000
    return ok_len & (c == 0)


_CHUNK_TABLE: np.ndarray | None = None


def _chunk_table() -> np.ndarray:
    """Flat int64 table, index ``((g * 4 + live) * 10 + c) * 1000 + v``: the Verhoeff state after state
    ``c`` reads the last ``live`` (0-3) digits of the three-digit group ``v`` at digits 3g..3g+2 (from the
    right), the lowest first."""
    global _CHUNK_TABLE
    if _CHUNK_TABLE is None:
        t = np.empty((6, 4, 10, 1000), dtype=np.int64)
        v = np.arange(1000)
        for g in range(6):
            for live in range(4):
                c = np.repeat(np.arange(10)[:, None], 1000, axis=1)
                for k in range(live):
                    digit = (v // 10**k) % 10
                    c = _D[c, _P[(3 * g + k) % 8, digit][None, :]].astype(np.int64)
                t[g, live] = c
        _CHUNK_TABLE = t.ravel()
    return _CHUNK_TABLE


def make_sctids(items: np.ndarray, partition: str = PARTITION_CONCEPT, namespace: str = "") -> np.ndarray:
    """Vectorised :func:`make_sctid`: ``item [|| namespace] || partition || check digit`` as int64.

    Shapes: items (N,) int -> (N,) int64. The result must fit 18 digits.
    """
    suffix = int(f"{namespace}{partition}")
    body = np.asarray(items, dtype=np.int64) * 10 ** len(f"{namespace}{partition}") + suffix
    x = body.copy()
    c = np.zeros(x.shape, dtype=np.int8)
    for i in range(17):  # the check digit will sit at position 0, so body digits start at position 1
        live = x > 0
        c = np.where(live, _D[c, _P[(i + 1) % 8, (x % 10).astype(np.int8)]], c)
        x //= 10
    return body * 10 + np.asarray(_INV, dtype=np.int64)[c]
