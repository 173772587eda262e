"""The public surface of ontology_compiler for the other packages: everything ``pipelines`` may import.

``pipelines`` imports ontology_compiler only from here (``from ontology_compiler.api import …``;
``tests/test_architecture.py`` checks it): the other modules of the package are private and may change.
The names are imported lazily, each from its module on first use, so importing this module costs no
more than the package itself (no pyarrow, DuckDB or owlready2 until a name that needs them is used).

- The package API (``ontology_compiler.__all__``): ``compile_ontology``, ``compile_source``,
  ``compile_owl``, ``CompileResult``, ``run_sql``, ``export_owl``, ``read_manifest``,
  ``verify_program``, ``dotted_code``, ``FORMAT_VERSION``, ``SPECIAL_TOKENS`` and the error classes
  (``OntologyCompilerError``, ``InputFileError``, …).
- Artifacts (``artifact``): ``safe_component`` (a name that becomes a folder), ``sha256_file``,
  ``write_file_atomically``, ``publish`` (an atomic, content-addressed folder), ``read_json_manifest``,
  ``verify_manifest_files``; ``leftover_name`` and ``clean_leftovers`` (a writer's hidden ``.tmp-``/``.old-``
  folders, and those a killed writer left).
- Input folders (``walk``): ``walk_files`` (the files of a tree, symbolic links to folders followed, each
  real folder once), ``describe_files`` (what a walk found, per top-level folder).
- SQL: ``quote_identifier``, ``quote_literal``, ``columns_literal`` (``sqlsafe``: names and literals
  for DuckDB); ``resolve_program``, ``format_result`` (``sql``, beside ``run_sql``); ``SQL_DEFAULT_TIMEOUT``,
  ``SQL_DEFAULT_MEMORY_LIMIT``, ``SQL_DEFAULT_THREADS`` (``sql_limits``: run_sql's default bounds).
- ICD codes (``icd``): ``ICD9CM``, ``ICD10CM`` (vocabulary names), ``ICD10_CHAPTERS``, ``dotless``,
  ``dotted`` (Arrow arrays), ``dotted_code`` (one code); ``icd10cm_tabular`` (``icd10cm_tree``: the
  ICD-10-CM tabular list ``simple-icd-10-cm`` ships, read once per process: ``is_valid_item``,
  ``is_leaf``, ``ancestors``, ``description``).
- Commands: ``setup_logging``, ``FORMAT``, ``DATE_FORMAT`` (``logs``: the commands' logging);
  ``summary`` (the text printed after a compile); ``printable`` (``printable``: data text made safe to
  print on a terminal, control characters escaped); ``require``, ``MissingExtraError`` (``extras``: an
  optional dependency, or an error naming the extra that installs it).
- Writing RF2 releases (the demo's): ``rf2_schema`` (the module: file grammar, columns, constant
  SCTIDs, ``METADATA_CONCEPTS`` and ``metadata_fsn``), ``rf2_file_name``, ``rf2_folder``,
  ``write_rf2_file`` (``rf2_write``); ``make_sctids``, ``is_valid``, ``PARTITION_DESCRIPTION``,
  ``PARTITION_RELATIONSHIP`` (``sctid``); ``load_stopwords`` (``words``); ``NLM_COLUMNS``,
  ``OMOP_CONCEPT_COLUMNS``, ``OMOP_RELATIONSHIP_COLUMNS`` (``map_sources``: the map files' columns).
"""

from __future__ import annotations

import importlib

import ontology_compiler as _package

_LAZY = {
    # artifacts
    # the default bounds of run_sql (light: no DuckDB)
    "SQL_DEFAULT_TIMEOUT": "ontology_compiler.sql_limits",
    "SQL_DEFAULT_MEMORY_LIMIT": "ontology_compiler.sql_limits",
    "SQL_DEFAULT_THREADS": "ontology_compiler.sql_limits",
    "safe_component": "ontology_compiler.artifact",
    "sha256_file": "ontology_compiler.artifact",
    "write_file_atomically": "ontology_compiler.artifact",
    "publish": "ontology_compiler.artifact",
    "read_json_manifest": "ontology_compiler.artifact",
    "verify_manifest_files": "ontology_compiler.artifact",
    "leftover_name": "ontology_compiler.artifact",
    "clean_leftovers": "ontology_compiler.artifact",
    # input folders (symbolic links followed, each real folder once)
    "walk_files": "ontology_compiler.walk",
    "describe_files": "ontology_compiler.walk",
    # SQL
    "quote_identifier": "ontology_compiler.sqlsafe",
    "quote_literal": "ontology_compiler.sqlsafe",
    "columns_literal": "ontology_compiler.sqlsafe",
    "resolve_program": "ontology_compiler.sql",
    "format_result": "ontology_compiler.sql",
    # ICD codes
    "ICD9CM": "ontology_compiler.icd",
    "ICD10CM": "ontology_compiler.icd",
    "ICD10_CHAPTERS": "ontology_compiler.icd",
    "dotless": "ontology_compiler.icd",
    "dotted": "ontology_compiler.icd",
    "icd10cm_tabular": "ontology_compiler.icd10cm_tree",
    # commands
    "setup_logging": "ontology_compiler.logs",
    "FORMAT": "ontology_compiler.logs",
    "DATE_FORMAT": "ontology_compiler.logs",
    "summary": "ontology_compiler.summary",
    "printable": "ontology_compiler.printable",
    "require": "ontology_compiler.extras",
    "MissingExtraError": "ontology_compiler.extras",
    # writing RF2 releases
    "rf2_file_name": "ontology_compiler.rf2_write",
    "rf2_folder": "ontology_compiler.rf2_write",
    "write_rf2_file": "ontology_compiler.rf2_write",
    "make_sctids": "ontology_compiler.sctid",
    "is_valid": "ontology_compiler.sctid",
    "PARTITION_DESCRIPTION": "ontology_compiler.sctid",
    "PARTITION_RELATIONSHIP": "ontology_compiler.sctid",
    "load_stopwords": "ontology_compiler.words",
    "NLM_COLUMNS": "ontology_compiler.map_sources",
    "OMOP_CONCEPT_COLUMNS": "ontology_compiler.map_sources",
    "OMOP_RELATIONSHIP_COLUMNS": "ontology_compiler.map_sources",
}
_MODULES = {"rf2_schema": "ontology_compiler.rf2_schema"}  # public as a whole module

__all__ = sorted({*_package.__all__, *_LAZY, *_MODULES})


def __getattr__(name: str):
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _package.__all__:
        value = getattr(_package, name)
    else:
        raise AttributeError(f"module 'ontology_compiler.api' has no attribute {name!r}")
    globals()[name] = value
    return value
