"""ontology_compiler: SNOMED CT RF2 (+ ICD maps, descriptions) -> versioned Parquet HRR program.

Never imports torch. Public API::

    from ontology_compiler import compile_ontology, run_sql
    result = compile_ontology("snomed_2022-05-31/")      # -> CompileResult(path, program_id, ...)
    run_sql(result.path, "SELECT count(*) FROM edges")
"""

from .compiler import CompileResult, compile_ontology
from .errors import (
    AsOfError,
    HierarchyCycleError,
    InputFileError,
    MissingInputError,
    OntologyCompilerError,
    OutputExistsError,
    ProgramFormatError,
)
from .owl_export import export_owl
from .owl_input import compile_owl
from .program import FORMAT_VERSION, SPECIAL_TOKENS, read_manifest, verify_program
from .sql import run_sql

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
    "export_owl",
    "read_manifest",
    "run_sql",
    "verify_program",
]
