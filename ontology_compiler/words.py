"""Description terms to words, columnar: lower-case, punctuation stripped, split, stopwords removed.

Rule: the FSN's trailing semantic tag ``(disorder)`` is removed; text is lower-cased; apostrophes
(' and U+2019) are deleted ("Ménière's" -> "ménières"); every other character that is not a Unicode
letter, digit or white space becomes a space; the text is split on white space; stopwords are dropped.
Unicode letters survive.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .errors import InputFileError

SEMANTIC_TAG_RE = r"\s*\([^()]*\)\s*$"


def default_stopwords_path() -> Path:
    return Path(str(resources.files("ontology_compiler") / "data" / "stopwords.txt"))


def load_stopwords(path: str | Path | None = None) -> list[str]:
    """Stopwords from a file (one per line, ``#`` comments); the shipped list when ``path`` is None."""
    p = Path(path) if path is not None else default_stopwords_path()
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputFileError(p, "stopword file is not valid UTF-8", expected="UTF-8 text") from e
    except OSError as e:
        raise InputFileError(p, f"cannot read stopword file: {e.strerror}") from e
    words = []
    for lineno, line in enumerate(text.splitlines(), 1):
        w = line.strip()
        if not w or w.startswith("#"):
            continue
        if any(ch.isspace() for ch in w):
            raise InputFileError(p, "a stopword line holds more than one word", line=lineno, found=repr(w))
        words.append(w.lower())
    return sorted(set(words))


def strip_semantic_tag(terms: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``"Asthma (disorder)"`` -> ``"Asthma"``."""
    return pc.replace_substring_regex(terms, SEMANTIC_TAG_RE, "")


def semantic_tag(terms: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The semantic tag of an FSN without parentheses, or null."""
    tag = pc.extract_regex(terms, r"\((?P<tag>[^()]*)\)\s*$")
    return pc.struct_field(tag, "tag")


def normalize(terms: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Lower-case and replace punctuation by spaces (apostrophes deleted)."""
    t = pc.utf8_lower(terms)
    t = pc.replace_substring(pc.replace_substring(t, "'", ""), "\u2019", "")  # literal: no regex needed
    return pc.replace_substring_regex(t, r"[^\p{L}\p{N}\s]+", " ")


def explode_words(owner: pa.Array, terms: pa.Array, stopwords: list[str]) -> pa.Table:
    """One row per (owner, word) occurrence, stopwords and empty strings removed.

    Shapes: owner (N,) any, terms (N,) string -> table (M,) with columns ``owner``, ``word``.
    """
    # after normalize only ASCII whitespace is left (RE2's \s), so splitting on whitespace needs no regex
    split = pc.utf8_split_whitespace(normalize(terms))
    parents = pc.list_parent_indices(split)
    words = pc.list_flatten(split)
    keep = pc.and_(
        pc.not_equal(words, ""), pc.invert(pc.is_in(words, value_set=pa.array(stopwords, pa.string())))
    )
    return pa.table({"owner": pc.take(owner, parents).filter(keep), "word": words.filter(keep)})
