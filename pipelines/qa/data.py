"""Clinical question answering data in the spirit of bAbI, generated from a tokenized cohort and its program.

The memory of a patient is the list of their diagnosis events, oldest first, each a fact of three tokens
``visit <n> <code>`` ("visit 3: E11.9"), the most recent ``max_memories`` kept. Questions (closed answer
set: yes/no, ICD chapters, SNOMED finding sites) are of the types in :data:`QUESTION_TYPES`; the body
system of a diagnosis is its ICD chapter. Each question lists its supporting facts (indices into the
memory), as the original Memory Network is trained on them.

Unseen codes: ``unseen_fraction`` of the codes that occur (and have a finding site or morphology) are held
out. Train and validation memories have their facts with a held-out code removed; test memories are
complete, and a test question is ``unseen`` when one of its supporting facts holds a held-out code, so
accuracy on those measures reasoning about codes never seen in training.

Output: ``<out>/<name>/<qa_id>/`` with ``questions.parquet``, ``vocab.parquet``, ``answers.parquet`` and
``manifest.json`` (content-addressed: the id hashes the program, the dataset and the options; written to a
temporary folder and renamed, as :mod:`pipelines.data.dataset` does). Ids in ``facts`` / ``question`` are
joint: ``[0, n_words)`` words, ``n_words + concept_id`` codes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ontology_compiler.api import safe_component
from pipelines.data.dataset import Generated, dataset_for_program, verify_dataset
from pipelines.errors import InputFileError, PipelineError

from .config import QAOptions

log = logging.getLogger(__name__)

GENERATOR_VERSION = "pipelines.qa_data/1"
FINDING_SITE = 363698007
ASSOCIATED_MORPHOLOGY = 116676008
QUESTION_TYPES = ("chapter_latest", "has_site", "has_morphology", "site_of_visit", "share_system")
# question type -> template words; {site}, {morph}, {n}, {m} are filled in
TEMPLATES: dict[str, list[str]] = {
    "chapter_latest": ["what", "chapter", "is", "the", "latest", "diagnosis"],
    "has_site": ["does", "any", "diagnosis", "have", "finding", "site", "{site}"],
    "has_morphology": ["does", "any", "diagnosis", "have", "morphology", "{morph}"],
    "site_of_visit": ["what", "is", "the", "finding", "site", "of", "visit", "{n}"],
    "share_system": ["do", "visits", "{n}", "and", "{m}", "share", "a", "body", "system"],
}
FACT_WORD = "visit"
MAX_VISIT_NUMBER = 100  # visit numbers are words "1" .. "100"
# our split <- dataset splits
SPLIT_SOURCES = {
    "train": ("pretrain_train", "finetune_train"),
    "val": ("pretrain_val", "finetune_val"),
    "test": ("test", "rood"),
}


class QADataError(PipelineError):
    """The QA data cannot be generated or read (missing table, wrong program, bad manifest)."""


@dataclass
class Ontology:
    """What the questions need from the program: codes, chapters, finding sites, morphologies, labels."""

    codes: list[str]  # concept id -> code (dotted)
    chapter: list[int | None]  # concept id -> ICD chapter
    sites: dict[int, frozenset[int]]  # concept id -> finding-site SCTIDs
    morphs: dict[int, frozenset[int]]  # concept id -> morphology SCTIDs
    labels: dict[int, str]  # SCTID -> preferred term
    special: set[int]  # concept ids of special tokens

    @property
    def n_codes(self) -> int:
        return len(self.codes)


def read_ontology(program: str | Path) -> Ontology:
    """Codes, chapters and the finding-site / morphology attributes of every concept of a program."""
    p = Path(program)
    need = [p / "concepts.parquet", p / "graph" / "snomed_relationships.parquet"]
    for f in need:
        if not f.is_file():
            raise QADataError(f"{f}: missing; QA generation needs the program's concepts and graph tables")
    c = pq.read_table(need[0], columns=["concept_id", "code_dotted", "snomed_ids", "chapter"]).to_pydict()
    order = np.argsort(c["concept_id"])
    codes = [c["code_dotted"][i] for i in order]
    chapter = [c["chapter"][i] for i in order]
    rel = pq.read_table(need[1], columns=["source_id", "destination_id", "type_id"]).to_pydict()
    by_type: dict[int, dict[int, set[int]]] = {FINDING_SITE: {}, ASSOCIATED_MORPHOLOGY: {}}
    for s, d, t in zip(rel["source_id"], rel["destination_id"], rel["type_id"], strict=True):
        if t in by_type:
            by_type[t].setdefault(s, set()).add(d)
    sites, morphs = {}, {}
    for i in order:
        cid = c["concept_id"][i]
        sct = c["snomed_ids"][i] or []
        s = frozenset().union(*(by_type[FINDING_SITE].get(x, set()) for x in sct))
        m = frozenset().union(*(by_type[ASSOCIATED_MORPHOLOGY].get(x, set()) for x in sct))
        if s:
            sites[cid] = s
        if m:
            morphs[cid] = m
    labels: dict[int, str] = {}
    sc = p / "graph" / "snomed_concepts.parquet"
    if sc.is_file():
        t = pq.read_table(sc, columns=["id", "preferred_term"]).to_pydict()
        wanted = set().union(*sites.values(), *morphs.values()) if (sites or morphs) else set()
        labels = {i: term for i, term in zip(t["id"], t["preferred_term"], strict=True) if i in wanted}
    special = {i for i, code in enumerate(codes) if code.startswith("[")}
    return Ontology(codes, chapter, sites, morphs, labels, special)


class Vocabulary:
    """Words and answers: fixed template words, visit numbers, site/morphology tokens; answers closed."""

    def __init__(self, onto: Ontology) -> None:
        all_sites = sorted(set().union(*onto.sites.values())) if onto.sites else []
        all_morphs = sorted(set().union(*onto.morphs.values())) if onto.morphs else []
        words = ["[PAD]", "[UNK]", FACT_WORD]
        for t in TEMPLATES.values():
            words += [w for w in t if not w.startswith("{") and w not in words]
        words += [str(n) for n in range(1, MAX_VISIT_NUMBER + 1)]
        words += [f"site:{s}" for s in all_sites] + [f"morph:{m}" for m in all_morphs]
        self.words = list(dict.fromkeys(words))
        self.word_id = {w: i for i, w in enumerate(self.words)}
        self.answers = (
            ["no", "yes"] + [f"chapter:{k}" for k in range(1, 23)] + [f"site:{s}" for s in all_sites]
        )
        self.answer_id = {a: i for i, a in enumerate(self.answers)}
        self.n_words = len(self.words)

    def label(self, token: str, onto: Ontology) -> str:
        if token.startswith(("site:", "morph:")):
            return onto.labels.get(int(token.split(":")[1]), token)
        return token

    def fingerprint(self) -> str:
        payload = json.dumps([self.words, self.answers]).encode()
        return hashlib.sha256(payload).hexdigest()[:16]


@dataclass
class Counts:
    """Data-quality counts written to the manifest."""

    patients: Counter = field(default_factory=Counter)  # kept / skipped by reason
    facts: Counter = field(default_factory=Counter)  # kept / truncated / held out / outside program
    questions: Counter = field(default_factory=Counter)  # by split/type


def patient_facts(ids: list[int], segs: list[int], onto: Ontology, counts: Counts) -> list[tuple[int, int]]:
    """(visit number, concept id) of each diagnosis event, oldest first; specials and unknown ids skipped."""
    facts = []
    for cid, seg in zip(ids, segs, strict=False):
        if cid < 0 or cid >= onto.n_codes:
            counts.facts["outside_program"] += 1
            continue
        if cid in onto.special:
            continue
        facts.append((min(int(seg) + 1, MAX_VISIT_NUMBER), int(cid)))
    return facts


def _yes_no_question(
    kind: str, attr: dict[int, frozenset[int]], universe: list[int], memory, rng, prefer: set[int]
):
    """has_site / has_morphology: half the time a value present in the memory, else one absent."""
    present: dict[int, list[int]] = {}
    for i, (_, cid) in enumerate(memory):
        for v in attr.get(cid, ()):
            present.setdefault(v, []).append(i)
    if not universe:
        return None
    if present and rng.random() < 0.5:
        pref = [v for v, idx in present.items() if any(memory[i][1] in prefer for i in idx)]
        pool = pref or sorted(present)
        v = pool[rng.integers(len(pool))]
        sup = present[v][-2:][::-1]
        answer = "yes"
    else:
        absent = [u for u in universe if u not in present]
        if not absent:
            return None
        v = absent[rng.integers(len(absent))]
        sup, answer = [], "no"
    slot = "{site}" if kind == "has_site" else "{morph}"
    prefix = "site" if kind == "has_site" else "morph"
    words = [f"{prefix}:{v}" if w == slot else w for w in TEMPLATES[kind]]
    return words, answer, sup


def make_questions(memory, onto: Ontology, rng, prefer: set[int], site_universe, morph_universe):
    """Every question type that can be asked of this memory: (type, words, answer, supporting)."""
    out = []
    latest = len(memory) - 1
    ch = onto.chapter[memory[latest][1]]
    if ch is not None and 1 <= ch <= 22:
        out.append(("chapter_latest", TEMPLATES["chapter_latest"], f"chapter:{ch}", [latest]))
    for kind, attr, universe in (
        ("has_site", onto.sites, site_universe),
        ("has_morphology", onto.morphs, morph_universe),
    ):
        q = _yes_no_question(kind, attr, universe, memory, rng, prefer)
        if q is not None:
            out.append((kind, *q))
    visits: dict[int, list[int]] = {}
    for i, (v, _) in enumerate(memory):
        visits.setdefault(v, []).append(i)
    single = []
    for v, idx in visits.items():
        s = set().union(*(onto.sites.get(memory[i][1], frozenset()) for i in idx))
        if len(s) == 1:
            single.append((v, idx, next(iter(s))))
    if single:
        pref = [x for x in single if any(memory[i][1] in prefer for i in x[1])]
        v, idx, site = (pref or single)[rng.integers(len(pref or single))]
        sup = [i for i in idx if site in onto.sites.get(memory[i][1], ())][:2]
        words = [str(v) if w == "{n}" else w for w in TEMPLATES["site_of_visit"]]
        out.append(("site_of_visit", words, f"site:{site}", sup))
    if len(visits) >= 2:
        vs = sorted(visits)
        a, b = sorted(rng.choice(len(vs), size=2, replace=False).tolist())
        n, m = vs[a], vs[b]

        def chapters(v):
            return {onto.chapter[memory[i][1]]: i for i in visits[v] if onto.chapter[memory[i][1]]}

        ca, cb = chapters(n), chapters(m)
        shared = sorted(set(ca) & set(cb))
        sup = [ca[shared[0]], cb[shared[0]]] if shared else []
        words = [str(n) if w == "{n}" else str(m) if w == "{m}" else w for w in TEMPLATES["share_system"]]
        out.append(("share_system", words, "yes" if shared else "no", sup))
    return out


def _sample(rows: np.ndarray, n: int, rng) -> np.ndarray:
    return rows if n <= 0 or n >= len(rows) else np.sort(rng.choice(rows, size=n, replace=False))


# the questions table: one row per question
QUESTION_COLUMNS = {
    "subject_id": pa.int64(),
    "split": pa.string(),
    "qtype": pa.string(),
    "facts": pa.list_(pa.list_(pa.int32())),  # the memory: (visit word, visit number word, code) per fact
    "fact_codes": pa.list_(pa.int32()),  # concept id of each fact
    "question": pa.list_(pa.int32()),
    "answer": pa.int32(),
    "supporting": pa.list_(pa.int32()),  # indices into facts
    "unseen": pa.bool_(),  # a supporting fact holds a held-out code
    "memory_unseen": pa.bool_(),  # any fact holds a held-out code
}


def build_qa_tables(
    patients: pa.Table, onto: Ontology, opts: QAOptions
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The questions, vocabulary and answer tables, and the manifest's counts and held-out codes."""
    rng = np.random.default_rng(opts.seed)
    vocab = Vocabulary(onto)
    counts = Counts()
    ids_col = patients.column("input_ids").to_pylist()
    seg_col = patients.column("segment_ids").to_pylist()
    subj = patients.column("subject_id").to_numpy()
    chosen = _choose_patients(patients, opts, rng)
    held, site_universe, morph_universe = _hold_out(chosen, ids_col, onto, opts, rng)
    rec: dict[str, list] = {k: [] for k in QUESTION_COLUMNS}
    for split, rows in chosen.items():
        for r in rows:
            facts = _memory(patient_facts(ids_col[r], seg_col[r], onto, counts), split, held, opts, counts)
            if not facts:
                counts.patients["skipped_empty_memory"] += 1
                continue
            qs = make_questions(
                facts, onto, rng, held if split == "test" else set(), site_universe, morph_universe
            )
            if not qs:
                counts.patients["skipped_no_question"] += 1
                continue
            counts.patients[f"kept_{split}"] += 1
            counts.facts["kept"] += len(facts)
            _add_questions(rec, int(subj[r]), split, facts, qs, held, vocab, counts)
    questions = pa.table({k: pa.array(rec[k], t) for k, t in QUESTION_COLUMNS.items()})
    info = {
        "counts": {k: dict(sorted(getattr(counts, k).items())) for k in ("patients", "facts", "questions")},
        "held_out_codes": sorted(int(c) for c in held),
        "n_words": vocab.n_words,
        "n_codes": onto.n_codes,
        "n_answers": len(vocab.answers),
        "vocab_fingerprint": vocab.fingerprint(),
    }
    return {"questions": questions, **_vocabulary_tables(vocab, onto)}, info


def _choose_patients(patients: pa.Table, opts: QAOptions, rng) -> dict[str, np.ndarray]:
    """Our split -> the rows of the patients sampled for it (all with a size of 0)."""
    split_names = np.asarray(patients.column("split").cast(pa.string()).to_pylist(), dtype=object)
    wanted = {"train": opts.train_patients, "val": opts.val_patients, "test": opts.test_patients}
    return {
        split: _sample(np.flatnonzero(np.isin(split_names, sources)), wanted[split], rng)
        for split, sources in SPLIT_SOURCES.items()
    }


def _hold_out(chosen: dict[str, np.ndarray], ids_col: list, onto: Ontology, opts: QAOptions, rng):
    """The held-out codes (``unseen_fraction`` of the occurring codes with a site or morphology) and the
    finding sites and morphologies of the occurring codes (what the yes/no questions draw from)."""
    occurring = sorted(
        {
            cid
            for rows in chosen.values()
            for r in rows
            for cid in ids_col[r]
            if 0 <= cid < onto.n_codes and (cid in onto.sites or cid in onto.morphs)
        }
    )
    n_held = int(round(opts.unseen_fraction * len(occurring)))
    held = set(rng.choice(occurring, size=n_held, replace=False).tolist()) if n_held else set()
    site_universe = sorted({s for c in occurring for s in onto.sites.get(c, ())})
    morph_universe = sorted({m for c in occurring for m in onto.morphs.get(c, ())})
    return held, site_universe, morph_universe


def _memory(facts: list[tuple[int, int]], split: str, held: set[int], opts: QAOptions, counts: Counts):
    """A patient's memory: outside test without the held-out codes' facts, the most recent
    ``max_memories``."""
    if split != "test":
        before = len(facts)
        facts = [f for f in facts if f[1] not in held]
        counts.facts["held_out_removed"] += before - len(facts)
    if len(facts) > opts.max_memories:
        counts.facts["truncated"] += len(facts) - opts.max_memories
        facts = facts[-opts.max_memories :]
    return facts


def _add_questions(
    rec: dict[str, list],
    subject: int,
    split: str,
    facts,
    qs,
    held: set[int],
    vocab: Vocabulary,
    counts: Counts,
) -> None:
    """Append the questions ``qs`` about one memory to the columns ``rec`` (answers outside the set
    skipped)."""
    enc = [[vocab.word_id[FACT_WORD], vocab.word_id[str(v)], vocab.n_words + c] for v, c in facts]
    mem_unseen = any(c in held for _, c in facts)
    for qtype, words, answer, sup in qs:
        if answer not in vocab.answer_id:
            counts.questions["skipped_answer_outside_set"] += 1
            continue
        unseen = any(facts[i][1] in held for i in sup)
        row = {
            "subject_id": subject,
            "split": split,
            "qtype": qtype,
            "facts": enc,
            "fact_codes": [c for _, c in facts],
            "question": [vocab.word_id.get(w, 1) for w in words],
            "answer": vocab.answer_id[answer],
            "supporting": sup,
            "unseen": unseen,
            "memory_unseen": mem_unseen,
        }
        for k, v in row.items():
            rec[k].append(v)
        counts.questions[f"{split}/{qtype}"] += 1
        if split == "test" and unseen:
            counts.questions[f"test_unseen/{qtype}"] += 1


def _vocabulary_tables(vocab: Vocabulary, onto: Ontology) -> dict[str, pa.Table]:
    """The ``vocab`` (words) and ``answers`` tables, each token with its readable label."""
    return {
        "vocab": pa.table(
            {
                "token_id": pa.array(range(vocab.n_words), pa.int32()),
                "token": vocab.words,
                "label": [vocab.label(w, onto) for w in vocab.words],
            }
        ),
        "answers": pa.table(
            {
                "answer_id": pa.array(range(len(vocab.answers)), pa.int32()),
                "answer": vocab.answers,
                "label": [vocab.label(a, onto) for a in vocab.answers],
            }
        ),
    }


@dataclass
class QAResult:
    path: Path  # the QA set folder
    manifest: dict[str, Any]
    written: bool  # False when the identical QA set was already there


def _dataset_name(dataset: Path) -> str:
    """The dataset's name (the folder above its id folder), the same from any working directory."""
    return Path(os.path.abspath(dataset)).parent.name


def generate_qa(
    dataset: str | Path,
    program: str | Path,
    *,
    out: str | Path = "artifacts/qa",
    name: str | None = None,
    options: QAOptions | None = None,
) -> QAResult:
    """Generate a clinical QA set from a tokenized ``dataset`` and the ``program`` it was tokenized with."""
    opts = options or QAOptions()
    if name is not None:
        safe_component(name, "name")  # one folder under ``out``, never a path
    dpath, ppath = Path(dataset), Path(program)
    dman, program_id = dataset_for_program(dpath, ppath, QADataError)
    pfile = dpath / "patients.parquet"
    if not pfile.is_file():
        raise InputFileError(pfile, "missing; not a tokenized dataset folder")
    patients = pq.read_table(pfile, columns=["subject_id", "split", "input_ids", "segment_ids"])
    onto = read_ontology(ppath)
    gen = Generated(
        GENERATOR_VERSION, program_id, dman, asdict(opts), Path(out) / (name or f"qa-{_dataset_name(dpath)}")
    )
    manifest = gen.existing()
    if manifest is not None:
        return QAResult(gen.path, manifest, False)
    tables, info = build_qa_tables(patients, onto, opts)
    if tables["questions"].num_rows == 0:
        raise QADataError(f"{dpath}: no question could be generated ({info['counts']['patients']})")
    manifest = gen.manifest("clinical-qa", "qa_id", question_types=list(QUESTION_TYPES), **info)
    for k, v in info["counts"]["patients"].items():
        if k.startswith("skipped"):
            log.warning("%s: %d patients %s", dpath, v, k.replace("_", " "))
    return QAResult(gen.path, *gen.write(tables, manifest))


def read_qa(path: str | Path) -> tuple[dict[str, Any], pa.Table, pa.Table, pa.Table]:
    """Manifest, questions, vocabulary and answers of a QA set (hashes checked)."""
    p = Path(path)
    manifest = verify_dataset(p)
    if manifest.get("kind") != "clinical-qa":
        raise QADataError(f"{p}: not a clinical QA set (kind {manifest.get('kind')!r})")
    return (
        manifest,
        pq.read_table(p / "questions.parquet"),
        pq.read_table(p / "vocab.parquet"),
        pq.read_table(p / "answers.parquet"),
    )


def describe(result: QAResult) -> str:
    """What ``hrrbert qa generate`` prints: the QA set's folder and its questions per type."""
    q = result.manifest["counts"]["questions"]
    return (
        f"qa        {result.path}{'' if result.written else ' (already generated)'}\n"
        "questions " + ", ".join(f"{k} {v}" for k, v in q.items())
    )
