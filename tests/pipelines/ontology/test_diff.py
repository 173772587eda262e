"""``hrrbert diff``: two hand-built programs whose atoms, relations and codes are re-numbered between them,
with known added, removed, changed and unchanged tokens; the exact tables; the per-token cosines of a tiny
model under both programs; the command; refusal to overwrite; and the format page against the files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipelines.errors import PipelineError
from pipelines.ontology.diff import diff_programs, summary_lines
from tests.helpers.synthetic_program import write_program

ISA, FINDING_SITE, LATERALITY = 116680003, 363698007, 272741003
# OLD: relations is_a, description, identity, Finding site; atoms 10, 20, 30, fever, 40
OLD_ATOMS = [("concept", "10"), ("concept", "20"), ("concept", "30"), ("word", "fever"), ("concept", "40")]
OLD_RELATIONS = (["is_a", "description", "identity", "attribute"], [ISA, None, None, FINDING_SITE])
OLD_CODES = ["A00", "A01", "A02", "A03"]
OLD_EDGES = {  # code -> (relation key, atom key)
    "A00": [(str(ISA), "10"), ("description", "fever")],
    "A01": [(str(ISA), "20"), (str(FINDING_SITE), "30")],
    "A02": [(str(ISA), "10"), (str(FINDING_SITE), "40")],
    "A03": [(str(ISA), "30")],
}
# NEW: every id re-numbered; atom 40 gone, atom 50 and relation Laterality new; A03 gone, B00 new
NEW_ATOMS = [("word", "fever"), ("concept", "50"), ("concept", "30"), ("concept", "20"), ("concept", "10")]
NEW_RELATIONS = (
    ["attribute", "is_a", "description", "identity", "attribute"],
    [LATERALITY, ISA, None, None, FINDING_SITE],
)
NEW_CODES = ["B00", "A02", "A01", "A00"]
NEW_EDGES = {
    "A00": [(str(ISA), "10"), ("description", "fever")],  # unchanged
    "A01": [(str(ISA), "20"), (str(FINDING_SITE), "30"), (str(LATERALITY), "50")],  # gains one edge
    "A02": [(str(ISA), "10"), (str(FINDING_SITE), "30")],  # loses Finding site 40, gains Finding site 30
    "B00": [(str(ISA), "20")],  # added
}
GAINED = {("A01", str(LATERALITY), "50"), ("A02", str(FINDING_SITE), "30"), ("B00", str(ISA), "20")}
LOST = {("A02", str(FINDING_SITE), "40"), ("A03", str(ISA), "30")}


def _relation_key(kind: str, sctid: int | None) -> str:
    return kind if sctid is None else str(sctid)


def _write(root: Path, atoms, relations, codes, edges) -> Path:
    """A program with these keys; ``edges`` by key, turned into this program's ids."""
    kinds, sctids = relations
    rel_id = {_relation_key(k, s): j for j, (k, s) in enumerate(zip(kinds, sctids, strict=True))}
    atom_id = {key: i for i, (_, key) in enumerate(atoms)}
    triples = [(codes.index(code), rel_id[r], atom_id[a]) for code, pairs in edges.items() for r, a in pairs]
    c, r, a = (np.array(x) for x in zip(*triples, strict=True))
    return write_program(
        root,
        n_concepts=len(codes),
        n_atoms=len(atoms),
        n_relations=len(kinds),
        edges=(c, r, a),
        relation_kinds=kinds,
        relation_sctids=sctids,
        atom_keys=[k for _, k in atoms],
        atom_kinds=[k for k, _ in atoms],
        concept_codes=codes,
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("programs")
    old = _write(root / "old", OLD_ATOMS, OLD_RELATIONS, OLD_CODES, OLD_EDGES)
    new = _write(root / "release" / "new", NEW_ATOMS, NEW_RELATIONS, NEW_CODES, NEW_EDGES)
    return old, new


@pytest.fixture(scope="module")
def diff(pair, tmp_path_factory):
    """The diff of the pair (NEW given as its release folder)."""
    return diff_programs(pair[0], pair[1].parent, out=tmp_path_factory.mktemp("diffs") / "d")


def _rows(out: Path, name: str) -> list[dict]:
    return pq.read_table(out / name).to_pylist()


def test_tokens_by_key_not_by_id(diff):
    tokens = {r["code"]: r for r in _rows(diff.out, "tokens.parquet")}
    assert {c: r["status"] for c, r in tokens.items()} == {
        "A00": "unchanged",
        "A01": "changed",
        "A02": "changed",
        "A03": "removed",
        "B00": "added",
    }
    got = {
        c: (r["old_concept_id"], r["new_concept_id"], r["edges_gained"], r["edges_lost"])
        for c, r in tokens.items()
    }
    assert got == {
        "A00": (0, 3, 0, 0),
        "A01": (1, 2, 1, 0),
        "A02": (2, 1, 1, 1),
        "A03": (3, None, 0, 1),
        "B00": (None, 0, 1, 0),
    }
    assert tokens["A02"]["relations_changed"] == ["attribute 4"]  # NEW's label of Finding site
    assert tokens["A00"]["relations_changed"] == [] and tokens["A00"]["title"] == "code 3"  # NEW's title
    assert [r["code"] for r in _rows(diff.out, "tokens.parquet")] == sorted(tokens)


def test_exact_edges_gained_and_lost(diff):
    rows = _rows(diff.out, "edges.parquet")
    got = {(r["change"], r["code"], r["relation_key"], r["atom_key"]) for r in rows}
    assert got == {("gained", *e) for e in GAINED} | {("lost", *e) for e in LOST}
    lost40 = next(r for r in rows if r["atom_key"] == "40")  # labelled from OLD, where the edge was
    assert (lost40["atom_label"], lost40["relation_label"]) == ("atom 40", "attribute 3")
    assert lost40["token_status"] == "changed"
    assert {r["token_status"] for r in rows if r["code"] == "A03"} == {"removed"}


def test_counts_atoms_relations_mappings(diff):
    c = diff.counts
    assert c["tokens"] == {"old": 4, "new": 4, "added": 1, "removed": 1, "changed": 2, "unchanged": 1}
    assert c["edges"] == {
        "old": 7,
        "new": 8,
        "gained": 3,
        "lost": 2,
        "gained_on_shared_tokens": 2,
        "lost_on_shared_tokens": 1,
    }
    assert c["atoms"] == {
        "old": 5,
        "new": 5,
        "added": 1,
        "removed": 1,
        "added_by_kind": {"concept": 1},
        "removed_by_kind": {"concept": 1},
    }
    atoms = {
        (r["change"], r["key"], r["old_atom_id"], r["new_atom_id"]) for r in _rows(diff.out, "atoms.parquet")
    }
    assert atoms == {("added", "50", None, 1), ("removed", "40", 4, None)}
    rels = {r["key"]: r for r in _rows(diff.out, "relations.parquet")}
    assert rels[str(LATERALITY)]["change"] == "added" and rels[str(LATERALITY)]["edges_gained"] == 1
    assert (rels[str(FINDING_SITE)]["old_relation_id"], rels[str(FINDING_SITE)]["new_relation_id"]) == (3, 4)
    assert (rels[str(FINDING_SITE)]["edges_gained"], rels[str(FINDING_SITE)]["edges_lost"]) == (1, 1)
    assert (rels[str(ISA)]["edges_gained"], rels[str(ISA)]["edges_lost"]) == (1, 1)
    # the synthetic labels name the position ("is_a 0" -> "is_a 1"), so every kept relation is relabelled
    assert c["relations"] == {"old": 4, "new": 5, "added": 1, "relabelled": 4}
    # synthetic snomed_ids are 1000 + row, so every re-numbered code's mapping changed
    maps = {r["code"]: r for r in _rows(diff.out, "mappings.parquet")}
    assert {k: r["change"] for k, r in maps.items()} == {
        "A00": "changed",
        "A01": "changed",
        "A02": "changed",
        "A03": "removed",
        "B00": "added",
    }
    assert (maps["A00"]["old_snomed_ids"], maps["A00"]["new_snomed_ids"]) == ([1000], [1003])
    assert maps["A00"]["fields_changed"] == ["snomed_ids"] and maps["B00"]["old_mapping_source"] is None
    record = json.loads((diff.out / "diff.json").read_text(encoding="utf-8"))
    assert record["old"]["program_id"] == diff.old_id and record["new"]["program_id"] == diff.new_id
    assert record["counts"]["tokens"] == c["tokens"] and record["model"] is None


def test_a_program_against_itself_is_unchanged(pair, tmp_path):
    r = diff_programs(pair[0], pair[0], out=tmp_path / "same")
    assert r.counts["tokens"] == {"old": 4, "new": 4, "unchanged": 4}
    assert r.counts["edges"]["gained"] == r.counts["edges"]["lost"] == 0
    assert pq.read_table(tmp_path / "same" / "edges.parquet").num_rows == 0


def _model(program_dir: Path, folder: Path, mode: str = "base") -> Path:
    import torch

    from hrr_kernel import load_program
    from model import HRRBert
    from model.bert import preset

    torch.manual_seed(0)
    HRRBert(preset("tiny", mode=mode), load_program(program_dir)).save_pretrained(folder)
    return folder


def _cconv(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.fft.irfft(np.fft.rfft(x) * np.fft.rfft(y), n=x.size)


def test_model_cosines(pair, tmp_path):
    """A model of OLD: unchanged tokens have cosine 1; A01's gained edge uses a new atom and a new
    relation (zero), so it is 1 too; A02's is the cosine of its two compositions, computed here."""
    from safetensors.numpy import load_file

    mdir = _model(pair[0], tmp_path / "model")
    r = diff_programs(pair[0], pair[1], out=tmp_path / "d", model=mdir)
    rows = {x["code"]: x for x in _rows(r.out, "vectors.parquet")}
    assert set(rows) == {"A00", "A01", "A02"}
    assert rows["A00"]["cosine"] == pytest.approx(1.0, abs=1e-12)
    assert rows["A01"]["cosine"] == pytest.approx(1.0, abs=1e-12)
    weights = {k: v.astype(np.float64) for k, v in load_file(str(mdir / "model.safetensors")).items()}
    atoms = next(v for k, v in weights.items() if k.endswith("token.atoms"))
    relations = next(v for k, v in weights.items() if k.endswith("token.relations"))
    isa10 = _cconv(relations[0], atoms[0])
    before, after = isa10 + _cconv(relations[3], atoms[4]), isa10 + _cconv(relations[3], atoms[2])
    expected = before @ after / (np.linalg.norm(before) * np.linalg.norm(after))
    assert rows["A02"]["cosine"] == pytest.approx(expected, abs=1e-9)
    assert rows["A02"]["rank"] == 1 and rows["A02"]["old_norm"] == pytest.approx(np.linalg.norm(before))
    assert r.model["trained_on"] == "old" and r.model["init"] == "zero"
    assert r.model["counts"]["tokens"] == 3 and "lowest cosine" in "\n".join(summary_lines(r))


def test_model_refusals(pair, tmp_path):
    with pytest.raises(PipelineError, match="unstructured"):
        diff_programs(
            pair[0], pair[1], out=tmp_path / "a", model=_model(pair[0], tmp_path / "u", "unstructured")
        )
    other = _write(
        tmp_path / "other",
        OLD_ATOMS,
        OLD_RELATIONS,
        ["Z99", "A01", "A02", "A03"],
        {"Z99": [(str(ISA), "10")], "A01": [(str(ISA), "20")]},
    )
    with pytest.raises(PipelineError, match="trained on program"):
        diff_programs(pair[0], pair[1], out=tmp_path / "b", model=_model(other, tmp_path / "o"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_command_writes_refuses_and_forces(pair, tmp_path, monkeypatch):
    from pipelines.cli import main

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    args = ["diff", str(pair[0]), str(pair[1]), "--top", "1"]
    res = runner.invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "tokens: 4 -> 4: 1 added, 1 removed, 2 changed, 1 unchanged" in res.output
    assert "ICD10CM:A02  +1 -1" in res.output and "ICD10CM:A01  +1 -0" not in res.output  # --top 1
    out = next((tmp_path / "artifacts" / "diffs").iterdir())
    old_id, new_id = out.name.split("__")
    assert json.loads((out / "diff.json").read_text())["new"]["program_id"] == new_id
    res = runner.invoke(main, args)
    assert res.exit_code != 0 and "exists" in res.output
    assert runner.invoke(main, [*args, "--force"]).exit_code == 0
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "x.txt").write_text("mine")
    res = runner.invoke(main, [*args, "--out", "keep", "--force"])
    assert res.exit_code != 0 and "not an earlier diff" in res.output
    assert (tmp_path / "keep" / "x.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_format_page_lists_the_written_columns(pair, tmp_path):
    """docs/diff-format.md's column tables match the files (parsed as tests/test_docs.py parses pages)."""
    from tests.test_docs import DOCS, compare, parse_page, type_name

    r = diff_programs(pair[0], pair[1], out=tmp_path / "d", model=_model(pair[0], tmp_path / "m"))
    got = {p.name: {f.name: type_name(f.type) for f in pq.read_schema(p)} for p in r.out.glob("*.parquet")}
    page = DOCS / "diff-format.md"
    doc, _ = parse_page(page)
    problems = compare(page, doc, got)
    assert not problems, "\n".join(problems)
