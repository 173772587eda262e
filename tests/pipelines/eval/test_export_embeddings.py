"""``hrrbert export-embeddings``: code vectors of a model or a program as Parquet, and the TensorBoard
projector files in the shapes the projector reads (vectors TSV, metadata TSV with a header, the pbtxt)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from train_fixtures import write_dataset

from hrr_kernel import load_program
from pipelines.cli import main
from pipelines.errors import PipelineError
from pipelines.eval.export import METADATA_COLUMNS, escape_tsv, export_embeddings

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def program_dir(tmp_path_factory) -> Path:
    """The fixture release compiled with the ICD-9 sources too: SPECIAL, ICD9CM and ICD10CM tokens."""
    from ontology_compiler import compile_ontology

    m = DATA / "mapping_sources"
    out = tmp_path_factory.mktemp("programs")
    return compile_ontology(
        DATA / "snomed_mini_20220531",
        out=out,
        omop=m / "omop",
        nlm_icd9=m / "nlm",
        gem=m / "gem",
        codes=m / "d_icd_diagnoses.csv",
        fallback="icd",
    ).path


@pytest.fixture(scope="module")
def model_dir(program_dir, tmp_path_factory) -> Path:
    """A saved tiny HRRBert (mode add) with its program/ copy."""
    import torch

    from model import HRRBert, bert_tiny

    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("models") / "model"
    HRRBert(bert_tiny(dim=16, n_layers=1, ffn_dim=32, mode="add"), load_program(program_dir)).save_pretrained(
        d
    )
    if not (d / "program").is_dir():
        shutil.copytree(program_dir, d / "program")
    return d


def _run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["export-embeddings", *map(str, args)])
    return res.exit_code, res.output


def _projector(out: Path) -> tuple[np.ndarray, list[str], list[list[str]], str]:
    """Read the projector files the way TensorBoard's projector does: rows on newlines, cells on tabs; a
    metadata file of several columns has a header row."""
    lines = (out / "vectors.tsv").read_text(encoding="utf-8").rstrip("\n").split("\n")
    vectors = np.array([[float(x) for x in line.split("\t")] for line in lines], dtype=np.float32)
    meta = (out / "metadata.tsv").read_text(encoding="utf-8").rstrip("\n").split("\n")
    return (
        vectors,
        meta[0].split("\t"),
        [m.split("\t") for m in meta[1:]],
        (out / "projector_config.pbtxt").read_text(),
    )


def _check_projector_shapes(out: Path, table: pa.Table) -> None:
    vectors, header, rows, pbtxt = _projector(out)
    n, d = table.num_rows, len(table.column("vector")[0])
    assert vectors.shape == (n, d)
    np.testing.assert_allclose(vectors, np.array(table.column("vector").to_pylist(), np.float32), rtol=1e-6)
    assert header == list(METADATA_COLUMNS)
    assert len(rows) == n and all(len(r) == len(header) for r in rows)
    assert [r[0] for r in rows] == table.column("code_dotted").to_pylist()
    assert [r[1] for r in rows] == table.column("vocabulary").to_pylist()
    # projector_config.pbtxt: one `embeddings { ... }` whose paths name the files beside it
    block = re.fullmatch(r"embeddings \{\n((?:  \w+: (?:\"(?:[^\"\\]|\\.)*\"|\d+)\n)+)\}\n", pbtxt)
    assert block, pbtxt
    fields = re.findall(r"  (\w+): (\"(?:[^\"\\]|\\.)*\"|\d+)\n", block.group(1))
    assert {k for k, _ in fields} == {"tensor_name", "tensor_path", "metadata_path", "tensor_shape"}
    values = dict(fields)
    assert (out / json.loads(values["tensor_path"])).name == "vectors.tsv"
    assert (out / json.loads(values["metadata_path"])).is_file()
    assert [int(v) for k, v in fields if k == "tensor_shape"] == [n, d]


def test_program_exports_the_seeded_untrained_composition(program_dir, tmp_path):
    code, output = _run(program_dir.parent, tmp_path / "out", "--projector", "--dim", "64", "--seed", "3")
    assert code == 0, output
    assert "exported" in output and "base (untrained, seed 3)" in output and "tensorboard --logdir" in output
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "embeddings.parquet",
        "export.json",
        "metadata.tsv",
        "projector_config.pbtxt",
        "vectors.tsv",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary folder left
    t = pq.read_table(out / "embeddings.parquet")
    assert t.column_names == [
        "concept_id",
        "vocabulary",
        "code",
        "code_dotted",
        "title",
        "chapter",
        "count",
        "log_frequency",
        "vector_group",
        "vector",
    ]
    assert t.schema.field("vector").type == pa.list_(pa.float32(), 64)
    assert t.schema.metadata[b"program_id"].decode() == program_dir.name
    p = load_program(program_dir)
    assert t.column("concept_id").to_pylist() == [
        i for i in range(p.n_concepts) if p.code(i).vocabulary != "SPECIAL"
    ]
    assert set(t.column("vocabulary").to_pylist()) == {"ICD9CM", "ICD10CM"}
    for r in t.select(["concept_id", "vocabulary", "code", "code_dotted", "title", "chapter"]).to_pylist():
        c = p.code(r["concept_id"])
        assert (r["vocabulary"], r["code"], r["code_dotted"], r["title"], r["chapter"]) == (
            c.vocabulary,
            c.code,
            c.code_dotted,
            c.title,
            c.chapter,
        )
    assert t.column("log_frequency").null_count == t.num_rows  # no --dataset
    v = np.array(t.column("vector").to_pylist())
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)  # unit rows
    _check_projector_shapes(out, t)
    record = json.loads((out / "export.json").read_text())
    assert record["source_kind"] == "program" and record["dim"] == 64 and record["config"]["seed"] == 3

    # the same seed gives the same vectors, another seed others; codes sharing atoms are closer
    assert _run(program_dir, tmp_path / "again", "--dim", "64", "--seed", "3")[0] == 0
    assert _run(program_dir, tmp_path / "other", "--dim", "64", "--seed", "4")[0] == 0
    again = np.array(pq.read_table(tmp_path / "again" / "embeddings.parquet").column("vector").to_pylist())
    other = np.array(pq.read_table(tmp_path / "other" / "embeddings.parquet").column("vector").to_pylist())
    assert np.array_equal(again, v) and not np.allclose(other, v)
    row = {
        (r["vocabulary"], r["code"]): i for i, r in enumerate(t.select(["vocabulary", "code"]).to_pylist())
    }
    asthma10, asthma9, osteoporosis = (
        v[row[k]] for k in (("ICD10CM", "J459"), ("ICD9CM", "49390"), ("ICD10CM", "M810"))
    )
    assert asthma10 @ asthma9 > 0.5 > abs(asthma10 @ osteoporosis)


def test_model_export_is_its_token_matrix_with_dataset_frequencies(program_dir, model_dir, tmp_path):
    import torch

    from model import HRRBert

    ds = write_dataset(tmp_path / "ds", program_dir)
    out = tmp_path / "emb"
    code, output = _run(model_dir, out, "--dataset", ds, "--projector", "--vocabulary", "icd9cm")
    assert code == 0, output
    assert f"model {model_dir} (mode add)" in output and "frequencies: dataset" in output
    t = pq.read_table(out / "embeddings.parquet")
    p = load_program(program_dir)
    assert set(t.column("vocabulary").to_pylist()) == {"ICD9CM"}
    ids = t.column("concept_id").to_pylist()
    assert ids == [i for i in range(p.n_concepts) if p.code(i).vocabulary == "ICD9CM"]
    with torch.no_grad():
        m = HRRBert.from_pretrained(model_dir, p).eval().token_matrix().numpy()
    np.testing.assert_allclose(np.array(t.column("vector").to_pylist()), m[ids], rtol=1e-6, atol=1e-7)
    counts = pq.read_table(ds / "code_counts.parquet").to_pydict()
    by_id = dict(
        zip(counts["concept_id"], zip(counts["count"], counts["log_frequency"], strict=True), strict=True)
    )
    assert t.column("count").to_pylist() == [by_id[i][0] for i in ids]
    assert t.column("log_frequency").to_pylist() == [by_id[i][1] for i in ids]
    assert t.schema.metadata[b"mode"] == b"add" and t.schema.metadata[b"source_kind"] == b"model"
    _check_projector_shapes(out, t)
    _, _, rows, _ = _projector(out)
    assert [int(r[4]) for r in rows] == [by_id[i][0] for i in ids]  # frequency = count

    # --program explicitly gives the same vectors; a run folder holding model/ works too
    run = tmp_path / "run"
    shutil.copytree(model_dir, run / "model")
    (run / "config.json").write_text("{}")
    code, output = _run(run, tmp_path / "emb2", "--program", program_dir.parent, "--vocabulary", "ICD9CM")
    assert code == 0, output
    assert pq.read_table(tmp_path / "emb2" / "embeddings.parquet").column("vector").equals(t.column("vector"))


def test_model_without_its_program_asks_for_program(model_dir, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(model_dir, bare, ignore=shutil.ignore_patterns("program"))
    code, output = _run(bare, tmp_path / "out")
    assert code != 0 and "pass --program" in output
    assert json.loads((model_dir / "config.json").read_text())["program_id"] in output
    assert not (tmp_path / "out").exists()
    code, output = _run(bare, tmp_path / "out", "--dim", "8", "--program", model_dir / "program")
    assert code != 0 and "--dim is for a program" in output


def test_model_with_another_program_is_refused(model_dir, make_other_program, tmp_path):
    code, output = _run(model_dir, tmp_path / "out", "--program", make_other_program)
    assert code != 0 and "program" in output.lower()
    assert not (tmp_path / "out").exists()


@pytest.fixture
def make_other_program(tmp_path):
    from tests.helpers.synthetic_program import random_edges, write_program

    root = tmp_path / "other_program"
    write_program(
        root,
        n_concepts=7,
        n_atoms=5,
        n_relations=3,
        edges=random_edges(np.random.default_rng(0), 7, 5, 3, 20),
    )
    return root


def test_dataset_of_another_program_is_refused(program_dir, tmp_path):
    ds = write_dataset(tmp_path / "ds", program_dir, program_id="0123456789abcdef")
    code, output = _run(program_dir, tmp_path / "out", "--dataset", ds, "--dim", "8")
    assert code != 0 and "tokenized against program '0123456789abcdef'" in output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # nothing written, no temporary folder


def test_option_mistakes_are_clear(program_dir, tmp_path):
    code, output = _run(program_dir, tmp_path / "out", "--program", program_dir)
    assert code != 0 and "--program is for a model" in output
    code, output = _run(program_dir, tmp_path / "out", "--vocabulary", "ICD11")
    assert code != 0 and "no vocabulary ['ICD11']" in output and "ICD10CM" in output
    code, output = _run(tmp_path, tmp_path / "out")
    assert code != 0 and "manifest.json not found" in output


def test_existing_out_needs_force_and_force_replaces_only_an_export(program_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()  # an empty folder is fine
    assert _run(program_dir, out, "--dim", "8")[0] == 0
    code, output = _run(program_dir, out, "--dim", "8", "--projector")
    assert code != 0 and "pass --force" in output and not (out / "vectors.tsv").exists()
    code, output = _run(program_dir, out, "--dim", "8", "--projector", "--force")
    assert code == 0, output
    assert (out / "vectors.tsv").is_file() and json.loads((out / "export.json").read_text())["config"][
        "projector"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    other = tmp_path / "precious"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    code, output = _run(program_dir, other, "--force")
    assert code != 0 and "not an earlier export" in output and (other / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(PipelineError, match="not a folder"):
        export_embeddings(source=str(program_dir), out=str(tmp_path / "file"), force=True)


def test_titles_with_tabs_and_newlines_keep_the_metadata_rectangular(make_other_program, tmp_path):
    from hrr_kernel.program import sha256_file

    root = make_other_program
    t = pq.read_table(root / "concepts.parquet")
    titles = ["tab\there", "new\nline", "cr\rhere", "back\\slash", "plain", None, "é ünïcode"]
    t = t.set_column(t.column_names.index("title"), "title", pa.array(titles, pa.string()))
    pq.write_table(t, root / "concepts.parquet")
    m = json.loads((root / "manifest.json").read_text())
    for f in m["files"]:
        if f["path"] == "concepts.parquet":
            f["sha256"] = sha256_file(root / "concepts.parquet")
    (root / "manifest.json").write_text(json.dumps(m))
    out = tmp_path / "out"
    code, output = _run(root, out, "--projector", "--dim", "8")
    assert code == 0, output
    table = pq.read_table(out / "embeddings.parquet")
    assert table.column("title").to_pylist() == [x or "" for x in titles]  # Parquet keeps them as they are
    _check_projector_shapes(out, table)
    _, _, rows, _ = _projector(out)
    assert [r[2] for r in rows] == [
        "tab\\there",
        "new\\nline",
        "cr\\rhere",
        "back\\\\slash",
        "plain",
        "",
        "é ünïcode",
    ]


def test_escape_tsv():
    assert escape_tsv(None) == "" and escape_tsv(4) == "4" and escape_tsv(-1.5) == "-1.5"
    assert escape_tsv("a\tb\nc\rd\\e") == "a\\tb\\nc\\rd\\\\e"


def read_word2vec(path: Path) -> tuple[list[str], np.ndarray]:
    """The word2vec text format as gensim 4.4's ``load_word2vec_format(binary=False)`` parses it: a header
    ``<rows> <dim>``, then per line a key and exactly ``dim`` floats, separated by single spaces."""
    lines = path.read_text(encoding="utf-8").rstrip("\n").split("\n")
    n, d = map(int, lines[0].split(" "))
    assert len(lines) == n + 1
    keys, rows = [], []
    for line in lines[1:]:
        key, *vals = line.split(" ")
        assert len(vals) == d and key and not any(c.isspace() for c in key)
        keys.append(key)
        rows.append([float(x) for x in vals])
    return keys, np.array(rows, np.float32)


def test_vector_groups_name_the_first_code_of_each_identical_vector():
    """The fixture program has no two equal vectors, so the grouping is checked here on one that has."""
    from pipelines.eval.export import ExportResult, _vector_groups, summary_lines

    vec = np.array([[1, 0], [0, 1], [1, 0], [1, 0], [0, 2]], np.float32)
    assert _vector_groups(vec, [10, 11, 12, 13, 14]) == [10, 11, 10, 10, 14]
    r = ExportResult(Path("o"), "program", "p", Path("p"), None, "base", 2, 5, {"ICD10CM": 5}, None,
                     duplicate_rows=2, vector_groups=3)  # fmt: skip
    assert any(
        "2 of 5 vectors exactly equal an earlier code's (3 distinct" in line for line in summary_lines(r)
    )


def test_word2vec_export_is_keyed_and_duplicates_are_marked(program_dir, tmp_path):
    code, output = _run(program_dir, tmp_path / "out", "--word2vec", "--projector", "--dim", "32")
    assert code == 0, output
    out = tmp_path / "out"
    t = pq.read_table(out / "embeddings.parquet")
    keys, vec = read_word2vec(out / "vectors.word2vec.txt")
    want = [
        f"{v}/{d}" for v, d in zip(t["vocabulary"].to_pylist(), t["code_dotted"].to_pylist(), strict=True)
    ]
    assert keys == want and len(set(keys)) == len(keys)
    np.testing.assert_array_equal(vec, np.array(t.column("vector").to_pylist(), np.float32))  # exact
    # vector_group: the first code with the very same vector; equal groups <=> equal vectors
    group = np.array(t["vector_group"].to_pylist())
    ids = np.array(t["concept_id"].to_pylist())
    for g in np.unique(group):
        members = np.flatnonzero(group == g)
        assert ids[members[0]] == g and all(np.array_equal(vec[m], vec[members[0]]) for m in members)
    firsts = vec[np.isin(ids, np.unique(group))]
    assert len(np.unique(firsts, axis=0)) == len(firsts)  # distinct groups, distinct vectors
    dup = int((group != ids).sum())
    record = json.loads((out / "export.json").read_text())
    assert record["duplicate_rows"] == dup and record["vector_groups"] == len(np.unique(group))
    if dup:
        assert f"{dup} of {t.num_rows} vectors exactly equal an earlier code's" in output
    meta = (out / "metadata.tsv").read_text(encoding="utf-8").split("\n")
    assert meta[0].split("\t")[-1] == "vector_group" and meta[1].split("\t")[-1] == str(group[0])
