"""The mapping precedence policy, as data: a small TOML file shipped as the default.

See ``ontology_compiler/data/map_policy.toml`` for the keys and their meaning.
"""

from __future__ import annotations

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
    import hashlib

    p = Path(path) if path is not None else default_policy_path()
    try:
        raw = p.read_bytes()
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except OSError as e:
        raise InputFileError(p, f"cannot read the mapping policy: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise InputFileError(p, "mapping policy is not valid UTF-8") from e
    except tomllib.TOMLDecodeError as e:
        raise InputFileError(p, f"not valid TOML: {e}", line=getattr(e, "lineno", None)) from e

    def need(section: str, key: str | None = None):
        if section not in data or (key is not None and key not in data[section]):
            name = section if key is None else f"{section}.{key}"
            raise InputFileError(
                p, f"mapping policy lacks [{name}]", expected="see the shipped map_policy.toml"
            )
        return data[section] if key is None else data[section][key]

    if data.get("format") != 1:
        raise InputFileError(
            p,
            f"unsupported policy format {data.get('format')!r}",
            line=_line_of(text, "format"),
            expected="format = 1",
        )
    prec = need("precedence")
    precedence: dict[str, tuple[str, ...]] = {}
    for vocab, sources in prec.items():
        if vocab not in VOCABULARIES:
            raise InputFileError(p, f"unknown vocabulary {vocab!r} in [precedence]", line=_line_of(text, vocab),
                                 expected=" or ".join(VOCABULARIES))  # fmt: skip
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise InputFileError(
                p, f"[precedence] {vocab} must be a list of source names", line=_line_of(text, vocab)
            )
        for s in sources:
            if s not in SOURCES:
                raise InputFileError(p, f"unknown mapping source {s!r}", line=_line_of(text, f'"{s}"'),
                                     expected="one of " + ", ".join(SOURCES))  # fmt: skip
        precedence[vocab] = tuple(sources)
    mode = need("one_to_many", "mode")
    if mode not in ("union", "first"):
        raise InputFileError(
            p,
            f"unknown one_to_many mode {mode!r}",
            line=_line_of(text, "mode"),
            expected='"union" or "first"',
        )
    chain_sec = need("chain")
    chain = {}
    for vocab in VOCABULARIES:
        v = chain_sec.get(vocab, "none")
        if v not in CHAINS[vocab]:
            raise InputFileError(p, f"unknown chain {v!r} for {vocab}", line=_line_of(text, f"{vocab} ="),
                                 expected=" or ".join(repr(c) for c in CHAINS[vocab]))  # fmt: skip
        chain[vocab] = v
    hist = need("historical")
    follow = []
    for name in hist.get("follow", []):
        if name not in ASSOCIATIONS:
            raise InputFileError(p, f"unknown association {name!r}", line=_line_of(text, f'"{name}"'),
                                 expected=" or ".join(ASSOCIATIONS))  # fmt: skip
        follow.append(ASSOCIATIONS[name])
    return MapPolicy(
        precedence=precedence,
        one_to_many=mode,
        chain=chain,
        use_approximate=bool(chain_sec.get("use_approximate", True)),
        follow=tuple(follow),
        max_hops=int(hist.get("max_hops", 5)),
        path=str(p) if path is not None else "ontology_compiler/data/map_policy.toml (shipped)",
        sha256=hashlib.sha256(raw).hexdigest(),
    )
