"""ICD code forms and chapters (see ``docs/input-formats.md``): the ICD facts the compiler and pipelines
share.

MIMIC-IV writes codes without a dot (``E119``, ``25000``, ``V5861``, ``E8798``); maps and OMOP write
them with one. The dot goes after character 3 (ICD-10, ICD-9 numeric and V codes) or 4 (ICD-9 E codes),
only when the code is longer than that (:data:`DOT_AFTER`). Columnar forms (:func:`dotless`,
:func:`dotted`, :func:`chapters`) work on Arrow arrays; :func:`dotless_code` and :func:`dotted_code`
are the same rules for one Python string.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ICD9CM = "ICD9CM"
ICD10CM = "ICD10CM"
SPECIAL = "SPECIAL"

# The dotting rule: per vocabulary, (code prefix, characters before the dot); the first matching prefix wins.
DOT_AFTER: dict[str, tuple[tuple[str, int], ...]] = {
    ICD10CM: (("", 3),),
    ICD9CM: (("E", 4), ("", 3)),
}

# ICD-10(-CM) chapters by first-3-character ranges (inclusive), chapter numbers 1-22.
ICD10_CHAPTERS: list[tuple[str, str, int]] = [
    ("A00", "B99", 1), ("C00", "D49", 2), ("D50", "D89", 3), ("E00", "E89", 4), ("F01", "F99", 5),
    ("G00", "G99", 6), ("H00", "H59", 7), ("H60", "H95", 8), ("I00", "I99", 9), ("J00", "J99", 10),
    ("K00", "K95", 11), ("L00", "L99", 12), ("M00", "M99", 13), ("N00", "N99", 14), ("O00", "O9A", 15),
    ("P00", "P96", 16), ("Q00", "Q99", 17), ("R00", "R99", 18), ("S00", "T88", 19), ("V00", "Y99", 20),
    ("Z00", "Z99", 21), ("U00", "U85", 22),
]  # fmt: skip

# ICD-9-CM diagnosis chapters 1-19 (numeric ranges of the 3-digit category; V and E codes last).
ICD9_CHAPTERS: list[tuple[int, int, int]] = [
    (1, 139, 1), (140, 239, 2), (240, 279, 3), (280, 289, 4), (290, 319, 5), (320, 389, 6),
    (390, 459, 7), (460, 519, 8), (520, 579, 9), (580, 629, 10), (630, 679, 11), (680, 709, 12),
    (710, 739, 13), (740, 759, 14), (760, 779, 15), (780, 799, 16), (800, 999, 17),
]  # fmt: skip
ICD9_CHAPTER_V = 18
ICD9_CHAPTER_E = 19


def dotless(codes: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Remove dots and surrounding white space; upper-case."""
    return pc.utf8_upper(pc.replace_substring(pc.utf8_trim_whitespace(codes), ".", ""))


def dotless_code(code: str) -> str:
    """:func:`dotless` for one code: ``" e11.9 "`` -> ``"E119"``."""
    return code.strip().replace(".", "").upper()


def _dot_rules(vocabulary: str) -> tuple[tuple[str, str], ...]:
    """(prefix, regex) pairs of :data:`DOT_AFTER`; a match's two groups are joined by the dot."""
    if vocabulary not in DOT_AFTER:
        raise ValueError(f"unknown vocabulary {vocabulary!r}; expected {ICD9CM!r} or {ICD10CM!r}")
    return tuple(
        (prefix, rf"^({re.escape(prefix)}.{{{n - len(prefix)}}})(.+)$") for prefix, n in DOT_AFTER[vocabulary]
    )


def dotted(codes: pa.Array | pa.ChunkedArray, vocabulary: str) -> pa.Array:
    """Insert the dot into dotless codes of one vocabulary (``ICD9CM`` or ``ICD10CM``)."""
    rules = _dot_rules(vocabulary)
    codes = dotless(codes)
    (_, pattern), *earlier = reversed(rules)  # the last rule (prefix "") is the default
    out = pc.replace_substring_regex(codes, pattern, r"\1.\2")
    for prefix, pattern in earlier:
        out = pc.if_else(
            pc.starts_with(codes, prefix), pc.replace_substring_regex(codes, pattern, r"\1.\2"), out
        )
    return out


def dotted_code(code: str, vocabulary: str) -> str:
    """:func:`dotted` for one code: ``("E119", "ICD10CM")`` -> ``"E11.9"``,
    ``("E8798", "ICD9CM")`` -> ``"E879.8"``."""
    code = dotless_code(code)
    pattern = next(pattern for prefix, pattern in _dot_rules(vocabulary) if code.startswith(prefix))
    return re.sub(pattern, r"\1.\2", code)


def chapters(codes: pa.Array | pa.ChunkedArray, vocabulary: str) -> pa.Array:
    """Chapter number (int8) of each dotless code in its own classification; null when out of range."""
    codes = dotless(codes)
    head = np.asarray(pc.utf8_slice_codeunits(codes, 0, 3).to_pylist(), dtype=object)
    out = np.zeros(len(head), dtype=np.int8)
    if vocabulary == ICD10CM:
        h = head.astype("U3")
        for lo, hi, ch in ICD10_CHAPTERS:
            out[(h >= lo) & (h <= hi)] = ch
    elif vocabulary == ICD9CM:
        h = head.astype("U3")
        isv = np.char.startswith(h, "V")
        ise = np.char.startswith(h, "E")
        num = np.zeros(len(h), dtype=np.int32)
        numeric = np.char.isdigit(h)
        num[numeric] = h[numeric].astype(np.int32)
        for lo, hi, ch in ICD9_CHAPTERS:
            out[numeric & (num >= lo) & (num <= hi)] = ch
        out[isv] = ICD9_CHAPTER_V
        out[ise] = ICD9_CHAPTER_E
    else:
        raise ValueError(f"unknown vocabulary {vocabulary!r}; expected {ICD9CM!r} or {ICD10CM!r}")
    return pa.array(out, mask=out == 0)
