"""One entry point for every input kind: ``compile_source(src, format="auto", **options)``.

Format: ``rf2`` is a SNOMED CT RF2 release folder (compiled by :func:`compiler.compile_ontology`),
``owl`` an OWL ontology file (:func:`owl_input.compile_owl`), ``athena`` an Athena vocabulary download
(:func:`athena_compile.compile_athena`); ``auto`` takes a file for OWL, a folder holding CONCEPT.csv and
CONCEPT_RELATIONSHIP.csv at its top for Athena, and any other folder for RF2 (:func:`detect_format`).

Options are the keyword arguments of those two functions. Which apply to which format:

- both: :data:`COMMON_OPTIONS` (``out``, ``name``, ``stopwords``, ``codes``: for RF2 the ICD code
  universe, for OWL the classes that become tokens; ``icd_hierarchy``: the ICD-10-CM / ICD-9-CM nodes above
  each ICD token's code, on by default);
- RF2 only: :data:`RF2_OPTIONS`; OWL only: :data:`OWL_OPTIONS`; Athena: :data:`ATHENA_OPTIONS` (a
  subset of the RF2 options).

An option counts as given when its value is not None, False or empty (False does count for the options
that are on by default, :data:`DEFAULT_ON`); giving one that does not apply to the format, or an unknown
one, raises :class:`OptionError` (messages name options by their
``compile-ontology`` flag). Options not given keep the defaults of the compile function.

This module imports nothing heavy until a compile runs, so the command's ``--help`` stays instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import OptionError

if TYPE_CHECKING:
    from .manifest import CompileResult

FORMATS = ("auto", "rf2", "owl", "athena")
RELEASES = ("auto", "snapshot", "full")  # which RF2 release type to read (auto: Snapshot when present)
FALLBACKS = (
    "none",
    "icd",
)  # icd: unmapped codes get their title words and nearest mapped ancestor's concepts
DEFAULT_OUT = "artifacts/programs"

COMMON_OPTIONS = ("out", "name", "stopwords", "codes", "icd_hierarchy")
SNOMED_TOKEN_OPTIONS = ("tokens", "snomed_roots", "concept_set")  # RF2 and Athena (snomed_tokens)
DEFAULT_ON = ("icd_hierarchy",)  # flags whose default is True: False is a choice, given
RF2_OPTIONS = (
    "as_of", "release", "languages", "stated", "strict", "map_policy", "omop", "nlm_icd9", "gem",
    "icd10cm_map", "code_counts", "fallback", "packages", *SNOMED_TOKEN_OPTIONS,
)  # fmt: skip
ATHENA_OPTIONS = (
    "as_of", "map_policy", "nlm_icd9", "gem", "icd10cm_map", "code_counts", "fallback", *SNOMED_TOKEN_OPTIONS,
)  # fmt: skip
OWL_OPTIONS = ("code_property", "code_prefixes", "label_properties", "synonym_properties", "language")
FLAGS = {
    "languages": "--language",
    "snomed_roots": "--snomed-root",
    "code_prefixes": "--code-prefix",
    "packages": "--package",
}  # where the flag is not the name


def detect_format(src: str | Path, format: str = "auto") -> str:
    """``rf2``, ``owl`` or ``athena`` for ``src``; ``auto``: a file is OWL, a folder with CONCEPT.csv and
    CONCEPT_RELATIONSHIP.csv at its top an Athena download, anything else an RF2 release folder."""
    if format not in FORMATS:
        raise OptionError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    is_file = Path(src).is_file()
    if format == "athena" or (format == "auto" and not is_file and _athena_top(Path(src))):
        if is_file:
            raise OptionError(f"--format athena needs an Athena download folder, got the file {src}")
        return "athena"
    fmt = ("owl" if is_file else "rf2") if format == "auto" else format
    if (fmt == "owl") != is_file:
        raise OptionError(
            f"--format {fmt} needs {'an OWL file' if fmt == 'owl' else 'an RF2 release folder'}, got {src}"
        )
    return fmt


def given_options(options: dict) -> dict:
    """The options that count as given: value not None, False (unless on by default) or empty."""
    return {
        k: v for k, v in options.items() if v is not None and (v is not False or k in DEFAULT_ON) and v != ()
    }


def check_options(fmt: str, options: dict) -> None:
    """Raise :class:`OptionError` when a given option is unknown or does not apply to ``fmt``."""
    given = given_options(options)
    unknown = [k for k in given if k not in (*COMMON_OPTIONS, *RF2_OPTIONS, *OWL_OPTIONS)]
    if unknown:
        raise OptionError(f"unknown option(s): {', '.join(unknown)}")
    if fmt == "athena" and (other := [k for k in given if k not in (*COMMON_OPTIONS, *ATHENA_OPTIONS)]):
        raise OptionError(f"{_flags(other)}: not options of an Athena compile")
    if fmt == "rf2" and (owl_only := [k for k in given if k in OWL_OPTIONS]):
        raise OptionError(f"{_flags(owl_only)}: OWL options, only for --format owl")
    if fmt == "owl" and (rf2_only := [k for k in given if k in RF2_OPTIONS]):
        raise OptionError(f"{_flags(rf2_only)}: RF2 options, not for --format owl")
    if fmt == "owl" and "code_prefixes" in given and "code_property" not in given:
        raise OptionError("--code-prefix narrows the values of --code-property; give --code-property too")


def compile_source(src: str | Path, *, format: str = "auto", **options) -> CompileResult:
    """Compile ``src`` (an RF2 release folder or an OWL file) with the options that apply to it.

    See the module docstring for the rules; returns the compile function's :class:`CompileResult`.
    """
    fmt = detect_format(src, format)
    check_options(fmt, options)
    given = given_options(options)
    if fmt == "owl":
        from .owl_input import compile_owl

        return compile_owl(src, **given)
    if fmt == "athena":
        from .athena_compile import compile_athena

        return compile_athena(src, **given)
    from .compiler import compile_ontology

    return compile_ontology(src, **given)


def _athena_top(p: Path) -> bool:
    return p.is_dir() and (p / "CONCEPT.csv").is_file() and (p / "CONCEPT_RELATIONSHIP.csv").is_file()


def _flags(names: list[str]) -> str:
    return ", ".join(FLAGS.get(k, "--" + k.replace("_", "-")) for k in names)
