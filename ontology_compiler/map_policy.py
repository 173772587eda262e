"""The mapping precedence policy, as data: a small TOML file shipped as the default.

See ``ontology_compiler/data/map_policy.toml`` for the keys and their meaning.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from . import rf2_schema as S
from .errors import InputFileError

SOURCES = ("snomed_icd10cm_map", "snomed_icd10_map", "omop", "nlm_icd9_1to1", "nlm_icd9_1tom")
VOCABULARIES = ("ICD10CM", "ICD9CM")
CHAINS = {"ICD10CM": ("gem_backward", "none"), "ICD9CM": ("gem_forward", "none")}
ASSOCIATIONS = {"REPLACED_BY": S.REPLACED_BY, "SAME_AS": S.SAME_AS}


@dataclass(frozen=True)
class MapPolicy:
    precedence: dict[str, tuple[str, ...]]
    one_to_many: str  # union | first
    chain: dict[str, str]
    use_approximate: bool
    follow: tuple[int, ...]  # association refset ids
    max_hops: int
    path: str
    sha256: str

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "precedence": {k: list(v) for k, v in self.precedence.items()},
            "one_to_many": self.one_to_many,
            "chain": self.chain,
            "use_approximate": self.use_approximate,
            "follow": list(self.follow),
            "max_hops": self.max_hops,
        }


def default_policy_path() -> Path:
    return Path(str(resources.files("ontology_compiler") / "data" / "map_policy.toml"))


def _line_of(text: str, needle: str) -> int | None:
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line and not line.lstrip().startswith("#"):
            return i
    return None


def load_policy(path: str | Path | None = None) -> MapPolicy:
    """Read and validate a policy file (the shipped default when ``path`` is None)."""
    p = Path(path) if path is not None else default_policy_path()
    raw, text, data = _read_toml(p)
    policy = _PolicyFile(p, text, data)
    if data.get("format") != 1:
        raise policy.error(f"unsupported policy format {data.get('format')!r}", "format", "format = 1")
    precedence = _precedence(policy)
    one_to_many = _one_to_many(policy)
    chain_sec = policy.need("chain")
    chain = _chain(policy, chain_sec)
    hist = policy.need("historical")
    return MapPolicy(
        precedence=precedence,
        one_to_many=one_to_many,
        chain=chain,
        use_approximate=bool(chain_sec.get("use_approximate", True)),
        follow=_follow(policy, hist),
        max_hops=int(hist.get("max_hops", 5)),
        path=str(p) if path is not None else "ontology_compiler/data/map_policy.toml (shipped)",
        sha256=hashlib.sha256(raw).hexdigest(),
    )


def _read_toml(p: Path) -> tuple[bytes, str, dict]:
    """The file's bytes, text and parsed TOML; every failure an :class:`InputFileError`."""
    try:
        raw = p.read_bytes()
        text = raw.decode("utf-8")
        return raw, text, tomllib.loads(text)
    except OSError as e:
        raise InputFileError(p, f"cannot read the mapping policy: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise InputFileError(p, "mapping policy is not valid UTF-8") from e
    except tomllib.TOMLDecodeError as e:
        raise InputFileError(p, f"not valid TOML: {e}", line=getattr(e, "lineno", None)) from e


@dataclass(frozen=True)
class _PolicyFile:
    """The parsed policy, with its path and text for errors that name a line."""

    path: Path
    text: str
    data: dict

    def need(self, section: str, key: str | None = None):
        """``[section]`` (or ``section.key``); an error when the file lacks it."""
        data = self.data
        if section not in data or (key is not None and key not in data[section]):
            name = section if key is None else f"{section}.{key}"
            raise InputFileError(
                self.path, f"mapping policy lacks [{name}]", expected="see the shipped map_policy.toml"
            )
        return data[section] if key is None else data[section][key]

    def error(self, message: str, needle: str, expected: str | None = None) -> InputFileError:
        """An error at the first non-comment line holding ``needle``."""
        return InputFileError(self.path, message, line=_line_of(self.text, needle), expected=expected)


def _precedence(policy: _PolicyFile) -> dict[str, tuple[str, ...]]:
    precedence: dict[str, tuple[str, ...]] = {}
    for vocab, sources in policy.need("precedence").items():
        if vocab not in VOCABULARIES:
            raise policy.error(
                f"unknown vocabulary {vocab!r} in [precedence]", vocab, " or ".join(VOCABULARIES)
            )
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise policy.error(f"[precedence] {vocab} must be a list of source names", vocab)
        for s in sources:
            if s not in SOURCES:
                raise policy.error(f"unknown mapping source {s!r}", f'"{s}"', "one of " + ", ".join(SOURCES))
        precedence[vocab] = tuple(sources)
    return precedence


def _one_to_many(policy: _PolicyFile) -> str:
    mode = policy.need("one_to_many", "mode")
    if mode not in ("union", "first"):
        raise policy.error(f"unknown one_to_many mode {mode!r}", "mode", '"union" or "first"')
    return mode


def _chain(policy: _PolicyFile, chain_sec: dict) -> dict[str, str]:
    chain = {}
    for vocab in VOCABULARIES:
        v = chain_sec.get(vocab, "none")
        if v not in CHAINS[vocab]:
            expected = " or ".join(repr(c) for c in CHAINS[vocab])
            raise policy.error(f"unknown chain {v!r} for {vocab}", f"{vocab} =", expected)
        chain[vocab] = v
    return chain


def _follow(policy: _PolicyFile, hist: dict) -> tuple[int, ...]:
    follow = []
    for name in hist.get("follow", []):
        if name not in ASSOCIATIONS:
            raise policy.error(f"unknown association {name!r}", f'"{name}"', " or ".join(ASSOCIATIONS))
        follow.append(ASSOCIATIONS[name])
    return tuple(follow)
