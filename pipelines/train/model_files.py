"""A trained small model's files: ``model.safetensors`` (tensors only) and ``config.json`` (its metadata).

Shared by the QA memory networks (:mod:`pipelines.qa.train`) and Doctor2Vec
(:mod:`pipelines.doctor2vec.train`): the weights and ``config.json`` are each written to a temporary
file and renamed (a failed write removes it and raises
:class:`~pipelines.train.checkpoint.OutputWriteError`), with the user's normal permissions; reading
resolves a run folder to its ``model/`` sub-folder, checks the model kind, and checks the metadata keys
that tie a model to the data it was trained on (program id, vocabulary fingerprint) with an error naming
both values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import nn

from ontology_compiler.api import write_file_atomically

from .checkpoint import OutputWriteError
from .runtime import plain

WEIGHTS_FILE = "model.safetensors"
META_FILE = "config.json"


def save_weights(model: nn.Module, directory: Path, meta: dict[str, Any], kind: str) -> Path:
    """Write ``model``'s state dict and ``meta`` into ``directory`` (created)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    write_file_atomically(
        directory / WEIGHTS_FILE,
        lambda tmp: save_file(state, str(tmp), metadata={"kind": kind}),
        what="model weights",
        error=OutputWriteError,
    )
    text = json.dumps(plain(meta), indent=2, default=str, allow_nan=False) + "\n"
    write_file_atomically(
        directory / META_FILE,
        lambda tmp: tmp.write_text(text, encoding="utf-8"),
        what="model config",
        error=OutputWriteError,
    )
    return directory


def read_meta(
    directory: str | Path, kind: str, what: str, command: str, error: type[Exception]
) -> tuple[Path, Path, dict[str, Any]]:
    """The model folder (a run folder resolves to its ``model/``), its ``config.json`` path and content."""
    d = Path(directory)
    d = d / "model" if (d / "model" / META_FILE).is_file() else d
    p = d / META_FILE
    if not p.is_file():
        raise error(f"{p}: missing; not a saved {what} model (run `{command}`)")
    meta = json.loads(p.read_text(encoding="utf-8"))
    if meta.get("kind") != kind:
        raise error(f"{p}: not a {what} model (kind {meta.get('kind')!r})")
    return d, p, meta


def check_meta(
    meta: dict[str, Any],
    manifest: dict[str, Any],
    keys: tuple[str, ...],
    path: Path,
    data: str,
    hint: str,
    error: type[Exception],
) -> None:
    """Raise ``error`` when the model's ``keys`` differ from the data manifest's (``data`` names the data)."""
    for key in keys:
        if meta.get(key) != manifest.get(key):
            raise error(
                f"{path}: the model's {key} is {meta.get(key)!r} but the {data}'s is "
                f"{manifest.get(key)!r}; {hint}"
            )
