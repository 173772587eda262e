"""ontology_compiler: SNOMED CT RF2 (+ ICD maps, descriptions) or OWL -> versioned Parquet HRR program.

Never imports torch. Public API (imported lazily, so ``compile-ontology --help`` stays instant)::

    from ontology_compiler import compile_ontology, run_sql
    result = compile_ontology("snomed_2022-05-31/")      # -> CompileResult(path, program_id, ...)
    run_sql(result.path, "SELECT count(*) FROM edges")
"""

from __future__ import annotations

import importlib

from .errors import (
    AsOfError,
    HierarchyCycleError,
    InputFileError,
    MissingInputError,
    OntologyCompilerError,
    OutputExistsError,
    ProgramFormatError,
)

_LAZY = {
    "CompileResult": "ontology_compiler.compiler",
    "compile_ontology": "ontology_compiler.compiler",
    "compile_owl": "ontology_compiler.owl_input",
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
    "HierarchyCycleError",
    "InputFileError",
    "MissingInputError",
    "OntologyCompilerError",
    "OutputExistsError",
    "ProgramFormatError",
    "compile_ontology",
    "compile_owl",
    "dotted_code",
    "export_owl",
    "read_manifest",
    "run_sql",
    "verify_program",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ontology_compiler' has no attribute {name!r}")
