"""EHR readers: each turns one source layout into the common long table of diagnosis codes and the labels
(see common.py); :data:`READERS`, the registry, holds one :class:`Reader` declaration per source.

Everything keyed by a reader's name reads the registry: ``prepare`` (the reader, and the files hashed into
the dataset id), the source options of ``hrrbert prepare`` and ``hrrbert export-meds``, ``export-meds``,
the baselines' ceiling (the hospital of the demo's ground truth), Doctor2Vec's demographics and the public
API (``pipelines.read_mimic``, ...). Adding a reader is one module here plus its declaration below
(docs/architecture.md, "Add an EHR reader"); a reader with options of its own (OMOP's ``--omop-codes``)
declares them as :class:`ReaderOption` s, which ``hrrbert prepare`` offers and ``prepare`` passes on.

Light on purpose (no duckdb, no pyarrow): a declaration names the parts of its module, which is imported
only when a part is used, so that ``hrrbert --help`` builds the options without loading any reader.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["HOSPITALS", "PARTS", "READERS", "Reader", "ReaderOption", "get_reader", "options_text"]


@dataclass(frozen=True)
class ReaderOption:
    """An option of one reader beside its source option (``--omop-codes`` of ``--omop``): a keyword of the
    reader's ``read`` and ``input_files`` (``name``), and of ``hrrbert prepare`` (``--<source>-<name>``).

    Its value goes into the dataset id (the manifest's ``options.reader``), except for a ``path`` option
    (a folder whose files ``input_files`` lists: their content makes the id, not where they lie).
    """

    name: str  # the keyword of read and input_files (``codes``), and the option's suffix
    help: str  # the option's help
    default: str | None = None
    choices: tuple[str, ...] | None = None  # the values allowed (None: any text, or a folder)
    path: bool = False  # names an input folder that must exist


@dataclass(frozen=True)
class Reader:
    """One EHR source: its name, its option, and the parts of its module (attribute names, found lazily).

    ``hospital``: the baselines' ``ceiling`` reads the demo's true probabilities of that hospital
    (``task_probabilities.parquet``); ``demographics``: Doctor2Vec's sex (``F``/``M``) and age of each
    patient; ``meds_export``: what ``export-meds`` writes beyond the reader's result (each dead subject's
    ``subject_id`` and ``time``, ICD titles by (vocabulary, dotless code), and static events: ``subject_id``,
    ``time`` (null for a static code), ``code`` such as ``MEDS_BIRTH`` and ``GENDER//F``).
    """

    name: str  # source.reader of a dataset's manifest, and its default name's prefix
    option: str  # the option of `hrrbert prepare` (and `export-meds`) that takes the source folder
    help: str  # that option's help
    module: str  # the reader's module under pipelines/data/readers/
    read: str  # (path, *, threads=None) -> ReadResult
    input_files: str  # (path) -> the files whose paths and sha256 make the dataset id
    root: str  # (path) -> the source's root found from the folder given (InputFileError when none)
    hospital: str | None  # its patients' hospital in the demo's ground truth (the ceiling); None: none
    demographics: str | None = None  # (file under the root, SQL over {csv}: subject_id, sex, age)
    meds_export: str | None = None  # (path, *, threads=None) -> (deaths, titles, static); None: no export
    note: str = ""  # why a part is None, said when it is asked for (export-meds's refusal)
    options: tuple[ReaderOption, ...] = ()  # the reader's own options (prepare only; export-meds has none)
    file_ok: bool = False  # the source may be one file (an OMOP CDM as a DuckDB database), not only a folder

    @property
    def param(self) -> str:
        """The option's keyword (``--mimic`` -> ``mimic``): of ``prepare(mimic=...)`` and the commands."""
        return self.option.removeprefix("--").replace("-", "_")

    def option_flag(self, o: ReaderOption) -> str:
        """The command-line option of the reader option ``o`` (``--omop`` and ``codes``: ``--omop-codes``)."""
        return f"{self.option}-{o.name.replace('_', '-')}"

    def option_param(self, o: ReaderOption) -> str:
        """The keyword of ``o`` in ``prepare(...)`` and the commands: ``omop_codes``."""
        return f"{self.param}_{o.name}"

    def source_options(self, given: dict | None = None) -> dict:
        """The values of the reader's options: those ``given`` (keyed by their names, ``codes``), the
        defaults for the others. ValueError for an option the reader does not have or a value not among
        its choices."""
        given = dict(given or {})
        known = {o.name: o for o in self.options}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(f"reader {self.name!r} has no option {', '.join(unknown)}")
        values = {}
        for name, o in known.items():
            v = given.get(name, o.default)
            v = o.default if v is None else v
            if o.choices is not None and v not in o.choices:
                raise ValueError(f"{self.option_flag(o)} must be one of {', '.join(o.choices)}, got {v!r}")
            values[name] = v
        return values

    def id_options(self, values: dict) -> dict:
        """The options that go into the dataset id (every option but the ``path`` ones)."""
        return {o.name: values[o.name] for o in self.options if not o.path}

    def part(self, name: str) -> Any:
        """The attribute of the reader's module that the field ``name`` (``read``, ``root``, ...) names."""
        attr = getattr(self, name)
        if attr is None:
            raise LookupError(f"reader {self.name!r} has no {name}" + (f": {self.note}" if self.note else ""))
        return getattr(importlib.import_module(f"{__name__}.{self.module}"), attr)

    def inputs(self, path: str | Path, **options: str | None) -> tuple[Path, list[Path]]:
        """The files hashed into an id, and the folder their paths are recorded relative to: the outer of
        the folder given and the source's root (MIMIC-IV given ``hosp/``: the root; eICU given the folder
        holding ``eicu/``: that folder). ``options``: the reader's options (:meth:`source_options`)."""
        path = Path(path)
        root = self.part("root")(path)
        return (root if root in (path, *path.parents) else path), self.part("input_files")(path, **options)


PARTS = ("read", "input_files", "root", "demographics", "meds_export")  # the fields naming a module attribute

# --- the readers, in option order: one declaration each ------------------------------------------------
_DECLARED = (
    Reader(
        "mimic-iv",
        "--mimic",
        "MIMIC-IV root (holding hosp/).",
        "mimic",
        read="read_mimic",
        input_files="mimic_files",
        root="mimic_root",
        hospital="mimic-iv",
        demographics="DEMOGRAPHICS",
        meds_export="meds_export",
    ),
    Reader(
        "eicu",
        "--eicu",
        "eICU-CRD folder (patient.csv.gz, ...).",
        "eicu",
        read="read_eicu",
        input_files="eicu_files",
        root="eicu_root",
        hospital="eicu",
        demographics="DEMOGRAPHICS",
        note="eICU has no absolute times (only offsets from unit admission), which MEDS events need; "
        "export a MIMIC-IV-layout or MEDS source",
    ),
    Reader(
        "meds",
        "--meds",
        "MEDS root (data/, metadata/).",
        "meds",
        read="read_meds",
        input_files="meds_files",
        root="meds_root",
        hospital=None,
        meds_export="meds_export",
    ),
    Reader(
        "omop",
        "--omop",
        "OMOP CDM v5.4: a folder of its tables (CSV, CSV.gz or Parquet) or a DuckDB database file.",
        "omop",
        read="read_omop",
        input_files="omop_files",
        root="omop_root",
        hospital=None,
        note="an OMOP CDM is converted to MEDS by the MEDS ETL's own OMOP converter (meds_etl_omop); "
        "export-meds writes MIMIC-IV and MEDS sources",
        options=(
            ReaderOption(
                "codes",
                "The condition codes read: source (the ICD-10-CM / ICD-9-CM code of "
                "condition_source_concept_id, else condition_source_value) or standard (the SNOMED "
                "concept of condition_concept_id).",
                default="source",
                choices=("source", "standard"),
            ),
            ReaderOption(
                "schema",
                "--omop as a DuckDB database: the schema holding the CDM tables (default: main).",
            ),
            ReaderOption(
                "vocabulary",
                "An Athena vocabulary folder whose CONCEPT.csv is the concept table (instead of the "
                "CDM's own concept table).",
                path=True,
            ),
        ),
        file_ok=True,
    ),
)
READERS: dict[str, Reader] = {r.name: r for r in _DECLARED}
HOSPITALS: dict[str, str] = {r.name: r.hospital for r in _DECLARED if r.hospital}  # reader -> ground truth


def get_reader(name: str) -> Reader:
    """The declaration of the reader ``name`` (``mimic-iv``, ``eicu``, ``meds``, ``omop``); ValueError for
    another."""
    if name not in READERS:
        raise ValueError(f"kind must be one of {sorted(READERS)}, got {name!r}")
    return READERS[name]


def options_text(readers: Iterable[Reader] | None = None, last: str = "or") -> str:
    """The readers' options as prose: ``--mimic, --eicu, --meds or --omop``."""
    opts = [r.option for r in (READERS.values() if readers is None else readers)]
    return f"{', '.join(opts[:-1])} {last} {opts[-1]}" if len(opts) > 1 else "".join(opts)
