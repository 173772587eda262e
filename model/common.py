"""What the model files share: config (de)serialisation and the saved-folder layout.

Every model's config is a dataclass saved as ``config.json``; :class:`ConfigDict` gives it
``from_dict`` / ``to_dict`` and :func:`check_positive` its size checks. A saved model folder holds
``config.json`` (kind, config, anything extra) and ``model.safetensors`` (the weights, no pickle);
:func:`save_folder` writes both.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

__all__ = ["CONFIG_FILE", "WEIGHTS_FILE", "ConfigDict", "check_positive", "save_folder"]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"

_C = TypeVar("_C", bound="ConfigDict")


def check_positive(obj: Any, names: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming the first of ``obj``'s fields ``names`` that is below 1."""
    for name in names:
        if getattr(obj, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(obj, name)}")


class ConfigDict:
    """Mixin for config dataclasses: ``from_dict`` refuses unknown keys, ``to_dict`` is ``asdict``."""

    @classmethod
    def from_dict(cls: type[_C], d: dict[str, Any]) -> _C:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} key(s) {unknown}; known {sorted(known)}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def save_folder(
    directory: str | Path, module: nn.Module, meta: dict[str, Any], metadata: dict[str, str]
) -> Path:
    """Write ``model.safetensors`` (``module``'s state, on the CPU, with safetensors ``metadata``) through a
    temporary file, then ``config.json`` (``meta``); returns the folder (created)."""
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    tmp = d / (WEIGHTS_FILE + ".tmp")
    save_file(state, str(tmp), metadata=metadata)
    tmp.replace(d / WEIGHTS_FILE)
    (d / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return d
