"""Optional dependencies: one place that imports them and, when one is missing, says which extra to install.

The core install (``pip install hrrbert``) compiles RF2 releases, tokenizes EHR data and trains; the
extras add the rest: ``owl`` (OWL in and out: owlready2), ``eval`` (plots: matplotlib), ``demo`` (the demo
release and cohort: simple-icd-10-cm, which the core install also has now, for the ICD-10-CM hierarchy of
every program), ``hf`` (Hugging Face transformers), ``tensorboard``, and ``all``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtraError", "require"]

# import name -> (extra that installs it, what needs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "owlready2": ("owl", "reading and writing OWL ontologies"),
    "matplotlib": ("eval", "the evaluation plots"),
    "simple_icd_10_cm": ("demo", "the ICD-10-CM hierarchy, the demo release and the synthetic cohort"),
    "transformers": ("hf", "the Hugging Face model classes"),
    "tensorboard": ("tensorboard", "TensorBoard scalars"),
}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def require(name: str) -> ModuleType:
    """Import the optional module ``name`` (a key of :data:`EXTRAS`, or a submodule of one)."""
    top = name.split(".")[0]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != top or top not in EXTRAS:
            raise
        extra, what = EXTRAS[top]
        raise MissingExtraError(
            f"{top} is needed for {what} but is not installed; "
            f"install it with: pip install 'hrrbert[{extra}]'"
        ) from e
