"""ontology_compiler: SNOMED CT RF2 (+ ICD maps, descriptions) or OWL -> versioned Parquet HRR program.

Never imports torch. Public API (imported lazily, so ``compile-ontology --help`` stays instant)::

    from ontology_compiler import compile_ontology, run_sql
    result = compile_ontology("snomed_2022-05-31/")      # -> CompileResult(path, program_id, ...)
    run_sql(result.path, "SELECT count(*) FROM edges")

``compile_source(src, format="auto", **options)`` takes either input kind (it is what
``compile-ontology`` calls); ``compile_owl`` compiles an OWL file. ``docs/input-formats.md`` describes
the inputs, ``docs/program-format.md`` the program.

Modules, in the order a compile uses them:

- ``cli``: the ``compile-ontology`` command; ``front``: format detection and option rules;
  ``summary``: the text printed after a compile; ``logs``: the commands' logging setup.
- ``compiler``: the RF2 compile, step by step; ``owl_input``: the OWL compile.
- RF2 input: ``rf2_schema`` (file names, columns, constant SCTIDs, the metadata concepts' terms),
  ``rf2_files`` (find files), ``rf2_read`` (typed, validated tables), ``sctid`` (check digits),
  ``snapshot`` (state at a date), ``release`` (the resolved active release); ``rf2_write`` writes RF2
  (fixtures, demos).
- OWL input: ``owl_read`` (classes, properties, edges, annotations via owlready2).
- ICD mapping: ``icd`` (code forms, dotting rule, chapters), ``codes`` (``--codes``, ``--code-counts``),
  ``map_sources`` (NLM, OMOP, GEM, tls readers), ``map_policy`` (the precedence policy), ``mapping``
  (candidates, targets, choice), ``map_codes`` (the mapping step: chains, fallback, coverage).
- Graph and program: ``words`` (terms -> words), ``graph`` (edges of the mapped concepts),
  ``icd_hierarchy`` (the ICD nodes above each token's code: ``icd10cm_tree`` for ICD-10-CM,
  ``icd9_sections`` for ICD-9-CM), ``program`` (ids and tables), ``manifest`` (program id, manifest,
  publication), ``artifact`` (hashing, atomic folders), ``errors``.
- Reading programs back: ``sql`` (DuckDB views), ``owl_export`` (a program as OWL).
- ``api``: the public module for the other packages (``pipelines`` imports only from it).
"""

from __future__ import annotations

import importlib
import os
import platform
import sys

# Arrow reads these once, when pyarrow loads (ontology_compiler.memory): on x86-64 Linux its jemalloc
# pool (in those wheels), with which a SNOMED-size compile measured 10 % faster than with mimalloc at the same
# highest peak (docs/architecture.md); elsewhere mimalloc, told to give freed pages back at once. Only
# when ontology_compiler is imported before pyarrow, and never over the user's own setting
# (``ARROW_DEFAULT_MEMORY_POOL=mimalloc`` keeps Arrow's own default).
if "pyarrow" not in sys.modules:
    if sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64"):  # where the wheels carry it
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")

from .errors import (  # noqa: E402
    AsOfError,
    DuplicateRowError,
    HierarchyCycleError,
    InputFileError,
    MissingInputError,
    OntologyCompilerError,
    OptionError,
    OutputExistsError,
    PackageError,
    ProgramFormatError,
    ProgramWriteError,
)

_LAZY = {
    "CompileResult": "ontology_compiler.compiler",
    "compile_ontology": "ontology_compiler.compiler",
    "compile_source": "ontology_compiler.front",
    "compile_owl": "ontology_compiler.owl_input",
    "compile_athena": "ontology_compiler.athena_compile",
    "export_athena": "ontology_compiler.athena_export",
    "dotted_code": "ontology_compiler.icd",
    "export_owl": "ontology_compiler.owl_export",
    "run_sql": "ontology_compiler.sql",
    "FORMAT_VERSION": "ontology_compiler.program",
    "SPECIAL_TOKENS": "ontology_compiler.program",
    "read_manifest": "ontology_compiler.program",
    "verify_program": "ontology_compiler.program",
}

__all__ = [
    "FORMAT_VERSION",
    "SPECIAL_TOKENS",
    "AsOfError",
    "CompileResult",
    "DuplicateRowError",
    "HierarchyCycleError",
    "InputFileError",
    "MissingInputError",
    "OntologyCompilerError",
    "OptionError",
    "OutputExistsError",
    "PackageError",
    "ProgramFormatError",
    "ProgramWriteError",
    "compile_athena",
    "compile_ontology",
    "compile_owl",
    "compile_source",
    "dotted_code",
    "export_athena",
    "export_owl",
    "read_manifest",
    "run_sql",
    "verify_program",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ontology_compiler' has no attribute {name!r}")
