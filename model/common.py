"""What the model files share: config (de)serialisation and the saved-folder layout.

Every model's config is a dataclass saved as ``config.json``; :class:`ConfigDict` gives it
``from_dict`` / ``to_dict`` and :func:`check_positive` its size checks. A saved model folder holds
``config.json`` (kind, config, anything extra) and ``model.safetensors`` (the weights, no pickle);
:func:`save_folder` writes both, each through a temporary file renamed into place with the user's
normal permissions (safetensors creates its files 0600); a failed write removes the temporary file and
raises :class:`~model.errors.ModelWriteError` naming the file.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from .errors import ModelWriteError, PretrainedFileError

__all__ = [
    "CONFIG_FILE", "WEIGHTS_FILE", "ConfigDict", "check_positive", "save_folder", "shape_mismatch",
    "weight_shapes",
]  # fmt: skip

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
UNTRAINED_KEY = "untrained_tokens"  # config.json: sorted ids of the tokens no training saw
CACHE_KEY = "mlm_cache"  # config.json: the code cache of masked-code prediction (model.code_cache.CodeCache)

_C = TypeVar("_C", bound="ConfigDict")


def check_positive(obj: Any, names: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming the first of ``obj``'s fields ``names`` that is below 1."""
    for name in names:
        if getattr(obj, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(obj, name)}")


# the largest safetensors header read (safetensors itself refuses one over 100 MB)
MAX_HEADER_BYTES = 100_000_000


def weight_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """The tensor shapes a ``model.safetensors`` file declares, read from its JSON header alone (no
    tensor is loaded); a file too short for its header, or a header that is not safetensors JSON, is a
    :class:`~model.errors.PretrainedFileError` naming the file."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            size = os.fstat(f.fileno()).st_size
            if n < 2 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise PretrainedFileError(
                    path,
                    f"unreadable or corrupt safetensors file (header of {n} bytes in a file of {size} bytes)",
                )
            header = json.loads(f.read(n))
        shapes = {k: tuple(int(x) for x in v["shape"]) for k, v in header.items() if k != "__metadata__"}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise PretrainedFileError(path, f"unreadable or corrupt safetensors file ({e})") from e
    return shapes


def shape_mismatch(
    expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]], first: int = 3
) -> str | None:
    """What differs between two ``name -> shape`` maps (the first ``first`` missing, unexpected and
    wrong-shaped tensors, each with its expected and found shape); None when they agree."""
    missing = [k for k in expected if k not in found]
    extra = [k for k in found if k not in expected]
    wrong = [k for k in expected if k in found and tuple(expected[k]) != tuple(found[k])]
    parts = []
    if wrong:
        parts.append(
            "wrong shape: "
            + ", ".join(f"{k} expected {list(expected[k])} found {list(found[k])}" for k in wrong[:first])
            + (f" (+{len(wrong) - first} more)" if len(wrong) > first else "")
        )
    for what, keys in (("missing", missing), ("unexpected", extra)):
        if keys:
            more = f" (+{len(keys) - first} more)" if len(keys) > first else ""
            parts.append(f"{what}: {', '.join(keys[:first])}{more}")
    return "; ".join(parts) or None


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
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    _write_atomically(d / WEIGHTS_FILE, lambda tmp: save_file(state, str(tmp), metadata=metadata), "weights")
    text = json.dumps(meta, indent=2) + "\n"
    _write_atomically(d / CONFIG_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"), "config")
    return d


def _write_atomically(path: Path, write: Callable[[Path], object], what: str) -> None:
    """``write(tmp)``, fsync, the user's normal permissions (0666 less the umask), rename to ``path``; on a
    failure the temporary file is removed (``model`` imports no other package, so this mirrors
    ``ontology_compiler.artifact.write_file_atomically``)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        tmp.unlink(missing_ok=True)
        full = getattr(e, "errno", None) == errno.ENOSPC or "write failed" in str(e)
        cause = "the disk is full" if full else f"{type(e).__name__}: {getattr(e, 'strerror', None) or e}"
        raise ModelWriteError(
            f"{path}: could not write the model {what} ({cause}); nothing was left under this name"
        ) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask
