"""A Hugging Face tokenizer for HRRBERT folders (``AutoTokenizer.from_pretrained(folder)``).

A model folder's ``vocab.txt`` lists its tokens, one per row = token id: the special tokens, then
``VOCABULARY:dotted code`` (``ICD10CM:E11.9``). :class:`HRRBertTokenizer` reads it and turns a patient's
history, written as text, into the model's inputs:

    tok("I10 E11.9 [SEP] ICD10CM/J45.909 [MASK]")
    # input_ids [CLS] I10 E11.9 J45.909 [MASK]; token_type_ids 0 0 0 1 1 (the visit of each code)

- Codes are separated by white space; ``[SEP]`` (or ``|``) ends a visit: the visits number the codes'
  ``token_type_ids`` (the model's segments), and the separator itself is not an input (HRRBERT reads
  ``[CLS]`` then the codes). ``[CLS]`` is added in front.
- A code may be written ``ICD10CM:E11.9``, ``ICD10CM/E11.9`` (OMOP / MEDS ``parent_codes``), or bare
  (``E11.9`` or dotless ``E119``); a bare code is looked up in ICD-10-CM first, then in the other
  vocabularies in file order (write ``ICD9CM:...`` for an ICD-9-CM code that has an ICD-10-CM twin).
  A code the model does not know becomes ``[UNK]``; :meth:`unknown_codes` lists those of a text.
- Too long a history is cut from the left (the oldest codes), as ``hrrbert prepare`` keeps the latest
  visits.

``save_pretrained`` writes ``vocab.txt`` and ``tokenizer_config.json`` (with ``auto_map``); HRRBERT's own
``save_pretrained`` writes both into every model folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizer

VOCAB_FILE = "vocab.txt"
VISIT_SEPARATORS = ("[SEP]", "|")
PREFERRED = ("ICD10CM",)  # a bare code's vocabularies, looked up first


def _dotless(code: str) -> str:
    return code.replace(".", "").upper()


class HRRBertTokenizer(PreTrainedTokenizer):
    """Codes of a history (text) -> HRRBERT ``input_ids`` and visit ``token_type_ids`` (module docstring)."""

    vocab_files_names = {"vocab_file": VOCAB_FILE}
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(
        self,
        vocab_file: str | os.PathLike,
        *,
        max_segments: int | None = None,
        unk_token: str = "[UNK]",
        sep_token: str = "[SEP]",
        pad_token: str = "[PAD]",
        cls_token: str = "[CLS]",
        mask_token: str = "[MASK]",
        **kwargs: Any,
    ) -> None:
        self.vocab_file = str(vocab_file)
        rows = Path(vocab_file).read_text(encoding="utf-8").splitlines()
        self.vocab = {t: i for i, t in enumerate(rows)}
        self.ids_to_tokens = dict(enumerate(rows))
        self.max_segments = max_segments
        self._alias: dict[str, int] = {}
        bare: dict[str, list[tuple[str, int]]] = {}
        for i, t in enumerate(rows):
            vocab, sep, code = t.partition(":")
            if not sep:
                continue
            for form in (
                f"{vocab}:{code}",
                f"{vocab}/{code}",
                f"{vocab}:{_dotless(code)}",
                f"{vocab}/{_dotless(code)}",
            ):
                self._alias.setdefault(form.upper(), i)
            for form in {code.upper(), _dotless(code)}:
                bare.setdefault(form, []).append((vocab, i))
        for form, hits in bare.items():
            hits.sort(key=lambda h: (h[0] not in PREFERRED, 0))
            self._alias.setdefault(form, hits[0][1])
        kwargs.setdefault("truncation_side", "left")
        super().__init__(
            unk_token=unk_token,
            sep_token=sep_token,
            pad_token=pad_token,
            cls_token=cls_token,
            mask_token=mask_token,
            **kwargs,
        )

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        out = []
        for word in text.split():
            if word in VISIT_SEPARATORS:
                out.append(self.sep_token)
            elif word in self.vocab:
                out.append(word)
            else:
                i = self._alias.get(word.upper())
                out.append(self.ids_to_tokens[i] if i is not None else self.unk_token)
        return out

    def unknown_codes(self, text: str) -> list[str]:
        """The words of ``text`` that are neither a code of the model nor a special token."""
        return [w for w in text.split() if w not in VISIT_SEPARATORS and w not in self.vocab
                and w.upper() not in self._alias]  # fmt: skip

    def _convert_token_to_id(self, token: str) -> int:
        return self.vocab.get(token, self.vocab[self.unk_token])

    def _convert_id_to_token(self, index: int) -> str:
        return self.ids_to_tokens.get(index, self.unk_token)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    # ---- visits: [SEP] in the ids marks a visit's end; the model's inputs drop it
    def _visits(self, ids: list[int]) -> tuple[list[int], list[int]]:
        """(the ids without separators, the visit number of each)."""
        sep, kept, seg, v, open_visit = self.sep_token_id, [], [], 0, False
        cap = None if self.max_segments is None else self.max_segments - 1
        for i in ids:
            if i == sep:  # ends the visit (a separator after no code starts none)
                v, open_visit = v + open_visit, False
                continue
            kept.append(i)
            seg.append(v if cap is None else min(v, cap))
            open_visit = True
        return kept, seg

    def build_inputs_with_special_tokens(self, token_ids_0: list[int], token_ids_1: list[int] | None = None):
        if token_ids_1 is not None:
            raise ValueError("HRRBERT reads one history per input; write its visits with [SEP] between them")
        return [self.cls_token_id, *self._visits(token_ids_0)[0]]

    def create_token_type_ids_from_sequences(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ):
        if token_ids_1 is not None:
            raise ValueError("HRRBERT reads one history per input; write its visits with [SEP] between them")
        return [0, *self._visits(token_ids_0)[1]]

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None, already_has_special_tokens=False):
        if already_has_special_tokens:
            special = set(self.all_special_ids)
            return [int(i in special) for i in token_ids_0]
        return [1, *([0] * len(self._visits(token_ids_0)[0]))]

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 1

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        path = Path(save_directory) / ((filename_prefix + "-" if filename_prefix else "") + VOCAB_FILE)
        if Path(self.vocab_file).resolve() != path.resolve():
            path.write_text("\n".join(self.ids_to_tokens[i] for i in range(len(self.ids_to_tokens))) + "\n",
                            encoding="utf-8")  # fmt: skip
        return (str(path),)
