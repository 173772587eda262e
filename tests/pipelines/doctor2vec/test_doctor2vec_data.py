"""Doctor2Vec data: the generator on a tiny cohort (tables, determinism, rare trials, eligibility against a
slow reference) and the reader's bad-input contract."""

from __future__ import annotations

import json
import logging
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from d2v_fixtures import OPTS, make_dataset
from train_fixtures import program_dir  # noqa: F401

from pipelines.doctor2vec.data import D2VOptions, generate_doctor2vec
from pipelines.doctor2vec.read import COLUMNS, SPLITS, D2VDataError, read_doctor2vec, validate_tables
from pipelines.errors import InputFileError, PipelineError


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory, program_dir):  # noqa: F811
    return make_dataset(tmp_path_factory.mktemp("d2v") / "ds", program_dir)


@pytest.fixture(scope="module")
def generated(tmp_path_factory, dataset_dir, program_dir):  # noqa: F811
    return generate_doctor2vec(dataset_dir, program_dir, out=tmp_path_factory.mktemp("out"), options=OPTS)


def test_tables_and_manifest(generated):
    d = read_doctor2vec(generated.path)
    m = d.manifest
    assert generated.written and d.skipped == {}
    assert m["kind"] == "doctor2vec" and m["d2v_id"] == m["dataset_id"] == generated.path.name
    assert m["generator"] == "pipelines.doctor2vec_data/2" and m["demographics"] == "mimic-iv"
    assert m["n_codes"] == 31 and m["n_words"] == d.vocab.num_rows and m["rare_max_patients"] == 15
    for name in ("patients", "doctors", "trials", "pairs", "vocab"):
        raw = pq.read_table(generated.path / f"{name}.parquet")
        for col, (typ, _) in COLUMNS[name].items():
            assert raw.schema.field(col).type.equals(typ, check_metadata=False) or (
                pa.types.is_list(typ) and raw.schema.field(col).type.value_type == typ.value_type
            ), (name, col)
    doc, tri, pairs = d.doctors.to_pylist(), d.trials.to_pylist(), d.pairs
    assert [r["doctor_id"] for r in doc] == list(range(len(doc))) == list(range(m["counts"]["doctors"]))
    assert all(r["panel"] == sorted(r["panel"]) and r["volume"] == len(r["panel"]) for r in doc)
    assert all(1 <= r["specialty"] <= 22 and r["specialty_title"] for r in doc)
    panels = [s for r in doc for s in r["panel"]]
    assert len(panels) == len(set(panels))  # one doctor per patient
    assert (
        sorted(panels) == d.patients.column("subject_id").to_pylist()
        and len(panels) == m["counts"]["patients"]
    )
    for r in d.patients.to_pylist():
        assert len(r["input_ids"]) == len(r["segment_ids"]) and min(r["input_ids"]) >= 5
    assert {r["split"] for r in tri} == set(SPLITS)
    assert m["counts"]["trials"] == {"train": 6, "val": 2, "test": 2, "test_rare": 2}
    assert all(r["rare"] == (r["split"] == "test_rare") and r["sex"] in ("any", "F", "M") for r in tri)
    assert all(r["text"].startswith("A study of") and r["text_ids"] for r in tri)
    vocab = d.vocab.column("token").to_pylist()
    assert vocab[:2] == ["[PAD]", "[UNK]"]
    for r in tri:
        assert [vocab[i] for i in r["text_ids"]] == re.findall(r"\w+|[^\w\s]", r["text"].lower())
    assert pairs.num_rows == len(doc) * len(tri)
    eligible, enrolled = pairs.column("eligible").to_numpy(), pairs.column("enrolled").to_numpy()
    assert (enrolled <= eligible).all() and (enrolled >= 0).all()
    assert (pairs.column("label").to_numpy() == (enrolled >= OPTS.min_enrolled)).all()
    split = {r["trial_id"]: r["split"] for r in tri}
    assert pairs.column("split").to_pylist() == [split[t] for t in pairs.column("trial_id").to_pylist()]
    assert set(m["counts"]["positive_rate"]) == set(SPLITS)


def test_deterministic_and_no_op(generated, dataset_dir, program_dir, tmp_path):  # noqa: F811
    again = generate_doctor2vec(dataset_dir, program_dir, out=generated.path.parent.parent, options=OPTS)
    assert again.path == generated.path and not again.written
    other = generate_doctor2vec(dataset_dir, program_dir, out=tmp_path, options=OPTS)
    assert other.path.name == generated.path.name and other.written
    for name in ("patients", "doctors", "trials", "pairs", "vocab"):
        assert pq.read_table(other.path / f"{name}.parquet").equals(
            pq.read_table(generated.path / f"{name}.parquet")
        )
    reseeded = generate_doctor2vec(
        dataset_dir, program_dir, out=tmp_path, options=D2VOptions(**{**vars(OPTS), "seed": 4})
    )
    assert reseeded.path.name != generated.path.name


def _patients_per_code(dataset_dir):
    n = {}
    for row in pq.read_table(dataset_dir / "patients.parquet").column("input_ids").to_pylist():
        for c in set(row):
            n[c] = n.get(c, 0) + 1
    return n


def test_rare_trials_are_rare_and_held_out(generated, dataset_dir):
    d = read_doctor2vec(generated.path)
    n = _patients_per_code(dataset_dir)
    rare = [r for r in d.trials.to_pylist() if r["split"] == "test_rare"]
    other = [r for r in d.trials.to_pylist() if r["split"] != "test_rare"]
    held = sorted({c for r in rare for c in r["eligible_codes"]})
    assert held and held == d.held_out_codes == generated.manifest["held_out_codes"]
    assert all(OPTS.rare_min_patients <= n[c] <= OPTS.rare_max_patients for c in held)
    assert not set(held) & {c for r in other for c in r["conditions"] + r["excluded"] + r["eligible_codes"]}
    # criteria 'category': a trial lists some of its family; its codes share the seed's ICD category
    for r in d.trials.to_pylist():
        assert set(r["conditions"]) <= set(r["eligible_codes"]) and len(r["conditions"]) <= OPTS.listed_max
    assert all(n[r["conditions"][0]] >= 1 for r in other)
    assert any(n[c] >= OPTS.common_min_patients for r in other for c in r["conditions"])


def test_eligible_matches_slow_reference(generated):
    d = read_doctor2vec(generated.path)
    patients = {r["subject_id"]: r for r in d.patients.to_pylist()}
    got = {(r["doctor_id"], r["trial_id"]): r["eligible"] for r in d.pairs.to_pylist()}
    assert sum(got.values()) > 0
    for doc in d.doctors.to_pylist():
        for t in d.trials.to_pylist():
            count = 0
            for sid in doc["panel"]:
                p = patients[sid]
                codes = set(p["input_ids"])
                if not codes & set(t["eligible_codes"]) or codes & set(t["excluded"]):
                    continue
                if (t["age_min"], t["age_max"]) != (0, 200):
                    if p["age"] is None or not t["age_min"] <= p["age"] <= t["age_max"]:
                        continue
                if t["sex"] != "any" and p["sex"] != t["sex"]:
                    continue
                count += 1
            assert got[(doc["doctor_id"], t["trial_id"])] == count


def test_demographics_read_and_missing(generated, program_dir, tmp_path):  # noqa: F811
    d = read_doctor2vec(generated.path)
    sexes = d.patients.column("sex").to_pylist()
    assert {"F", "M"} <= set(sexes) and None in sexes  # the last 5 patients have no row
    assert generated.manifest["counts"]["skipped"]["patients_without_demographics"] == 5
    ds = make_dataset(tmp_path / "nodemo", program_dir, demographics=False, seed=1)
    r = generate_doctor2vec(ds, program_dir, out=tmp_path / "out", options=OPTS)
    assert r.manifest["demographics"] == "none"
    t = pq.read_table(r.path / "trials.parquet").to_pylist()
    assert all(x["sex"] == "any" and (x["age_min"], x["age_max"]) == (0, 200) for x in t)
    p = pq.read_table(r.path / "patients.parquet")
    assert p.column("sex").null_count == p.column("age").null_count == p.num_rows


def test_too_few_rare_codes_gives_fewer_trials(dataset_dir, program_dir, tmp_path, caplog):  # noqa: F811
    with caplog.at_level(logging.WARNING):
        r = generate_doctor2vec(
            dataset_dir, program_dir, out=tmp_path, options=D2VOptions(**{**vars(OPTS), "rare_trials": 5})
        )
    assert r.manifest["counts"]["trials"]["test_rare"] == 2  # two categories of rare codes: J45, M81
    assert r.manifest["counts"]["skipped"]["trials_missing_test_rare"] == 3
    assert "only 2 of 5 trials" in caplog.text
    # a scarce common pool is shared between the splits in proportion, not used up by train
    opts = D2VOptions(**{**vars(OPTS), "train_trials": 40, "val_trials": 10, "test_trials": 10})
    n = generate_doctor2vec(dataset_dir, program_dir, out=tmp_path, options=opts).manifest["counts"]["trials"]
    assert n["train"] < 40 and n["train"] >= 2 * n["val"] >= 2 and n["test"] >= 1


def test_bad_options_and_program(dataset_dir, tmp_path):
    with pytest.raises(ValueError, match="common_min_patients"):
        D2VOptions(rare_max_patients=80, common_min_patients=60)
    with pytest.raises(ValueError, match="enroll_rate"):
        D2VOptions(enroll_rate=1.5)
    other = tmp_path / "prog"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"program_id": "someotherprogram"}))
    with pytest.raises(D2VDataError, match="someotherprogram"):
        generate_doctor2vec(dataset_dir, other, out=tmp_path / "out", options=OPTS)


# ---- the reader's bad-input contract ----


def _copy(generated, tmp_path, name: str | None = None, table: pa.Table | None = None):
    """A copy of the data folder with ``name``.parquet replaced; the manifest's file hashes are dropped."""
    dst = tmp_path / "copy"
    shutil.copytree(generated.path, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest.pop("files")
    (dst / "manifest.json").write_text(json.dumps(manifest))
    if name:
        pq.write_table(table, dst / f"{name}.parquet")
    return dst


def _with(table: pa.Table, col: str, values: list) -> pa.Table:
    return table.set_column(
        table.column_names.index(col), col, pa.array(values, table.schema.field(col).type)
    )


def test_modified_file_fails_hash_check(generated, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(generated.path, dst)
    t = pq.read_table(dst / "pairs.parquet")
    pq.write_table(t.slice(1), dst / "pairs.parquet")
    with pytest.raises(PipelineError, match="sha256"):
        read_doctor2vec(dst)


def test_empty_panel_skips_doctor(generated, tmp_path, caplog):
    t = pq.read_table(generated.path / "doctors.parquet")
    panels = t.column("panel").to_pylist()
    panels[2] = []
    with caplog.at_level(logging.WARNING):
        d = read_doctor2vec(_copy(generated, tmp_path, "doctors", _with(t, "panel", panels)))
    n_trials = d.trials.num_rows
    assert d.skipped == {"doctor_no_patients": 1, "pairs_dropped": n_trials}
    assert 2 not in d.doctors.column("doctor_id").to_pylist()
    assert 2 not in d.pairs.column("doctor_id").to_pylist()
    assert "doctors without patients skipped: [2]" in caplog.text


def test_panel_patient_missing(generated, tmp_path):
    t = pq.read_table(generated.path / "doctors.parquet")
    panels = t.column("panel").to_pylist()
    panels[1] = panels[1] + [999999]
    with pytest.raises(InputFileError, match=r"doctors\.parquet.*\(1, 999999\)"):
        read_doctor2vec(_copy(generated, tmp_path, "doctors", _with(t, "panel", panels)))


def test_trial_codes_outside_program(generated, tmp_path):
    t = pq.read_table(generated.path / "trials.parquet")
    cond = t.column("conditions").to_pylist()
    cond[0] = [99999, 2, -1]  # nothing valid (2 is [SEP])
    cond[1] = cond[1] + [77777]  # one invalid id in a valid trial
    d = read_doctor2vec(_copy(generated, tmp_path, "trials", _with(t, "conditions", cond)))
    n_doc = d.doctors.num_rows
    assert d.skipped == {
        "trial_codes_outside_program": 4,
        "trial_no_eligible_codes": 1,
        "pairs_dropped": n_doc,
    }
    assert (
        0 not in d.trials.column("trial_id").to_pylist() and 0 not in d.pairs.column("trial_id").to_pylist()
    )
    assert 77777 not in d.trials.column("conditions").to_pylist()[0]


def test_duplicate_pairs(generated, tmp_path):
    t = pq.read_table(generated.path / "pairs.parquet")
    t = pa.concat_tables([t, t.slice(5, 1)])
    with pytest.raises(
        InputFileError, match=rf"pairs\.parquet.*duplicate .*\(0, 5\).*rows \[5, {t.num_rows - 1}\]"
    ):
        read_doctor2vec(_copy(generated, tmp_path, "pairs", t))


@pytest.mark.parametrize("col", ["doctor_id", "trial_id"])
def test_pair_with_unknown_id(generated, tmp_path, col):
    t = pq.read_table(generated.path / "pairs.parquet")
    ids = t.column(col).to_pylist()
    ids[3] = 4242
    with pytest.raises(InputFileError, match=rf"pairs\.parquet.*unknown {col}: rows \[3\].*4242"):
        read_doctor2vec(_copy(generated, tmp_path, "pairs", _with(t, col, ids)))


def test_bad_split_and_patient_lengths(generated, tmp_path):
    t = pq.read_table(generated.path / "trials.parquet")
    split = t.column("split").to_pylist()
    split[4] = "holdout"
    with pytest.raises(InputFileError, match=r"trials\.parquet.*split outside .* trial_id \[4\]"):
        read_doctor2vec(_copy(generated, tmp_path, "trials", _with(t, "split", split)))
    p = pq.read_table(generated.path / "patients.parquet")
    seg = p.column("segment_ids").to_pylist()
    seg[0] = seg[0][:-1]
    sid = p.column("subject_id")[0].as_py()
    with pytest.raises(InputFileError, match=rf"patients\.parquet.*subject_id \[{sid}\]"):
        read_doctor2vec(_copy(generated, tmp_path / "b", "patients", _with(p, "segment_ids", seg)))


def test_wrong_kind(generated, tmp_path):
    dst = _copy(generated, tmp_path)
    manifest = json.loads((dst / "manifest.json").read_text())
    (dst / "manifest.json").write_text(json.dumps({**manifest, "kind": "clinical-qa"}))
    with pytest.raises(D2VDataError, match="not Doctor2Vec"):
        read_doctor2vec(dst)


def test_bring_your_own_tables(tmp_path):
    """Only the required columns and manifest keys: defaults are filled in, labels derived from enrolled."""
    manifest = {"kind": "doctor2vec", "program_id": "p", "n_codes": 10, "n_words": 3, "format_version": 1}
    tables = {
        "patients": pa.table(
            {
                "subject_id": [1, 2, 3],
                "input_ids": [[5, 6], [7], [0, 8]],
                "segment_ids": [[0, 1], [0], [0, 0]],
            }
        ),
        "doctors": pa.table({"doctor_id": [10, 11], "panel": [[1, 2], [3]]}),
        "trials": pa.table({"trial_id": [0, 1], "split": ["train", "test_rare"], "conditions": [[5], [9]]}),
        "pairs": pa.table(
            {"doctor_id": [10, 11, 10, 11], "trial_id": [0, 0, 1, 1], "enrolled": [2, 0, 1, None]}
        ),
        "vocab": pa.table({"token_id": [0, 1, 2], "token": ["[PAD]", "[UNK]", "asthma"]}),
    }
    t, skipped = validate_tables(manifest, tables, tmp_path)
    assert skipped == {"patient_codes_outside_program": 1}  # the [PAD] (0) in patient 3
    assert t["patients"].column("input_ids").to_pylist() == [[5, 6], [7], [8]]
    assert t["patients"].column("sex").null_count == 3
    assert t["doctors"].column("volume").to_pylist() == [2, 1]
    tr = t["trials"].to_pylist()
    assert [x["rare"] for x in tr] == [False, True] and tr[0]["sex"] == "any" and tr[0]["age_max"] == 200
    assert t["pairs"].column("label").to_pylist() == [True, False, True, False]
    assert t["pairs"].column("split").to_pylist() == ["train", "train", "test_rare", "test_rare"]
    for name, table in t.items():
        assert table.column_names == list(COLUMNS[name]), name
    with pytest.raises(D2VDataError, match="n_words"):
        validate_tables({k: v for k, v in manifest.items() if k != "n_words"}, tables, tmp_path)
    with pytest.raises(InputFileError, match="'label'.*'enrolled'"):
        validate_tables(manifest, {**tables, "pairs": tables["pairs"].drop_columns(["enrolled"])}, tmp_path)


def test_listed_criteria_make_conditions_the_eligible_codes(dataset_dir, program_dir, tmp_path):  # noqa: F811
    from dataclasses import replace

    r = generate_doctor2vec(dataset_dir, program_dir, out=tmp_path, options=replace(OPTS, criteria="listed"))
    trials = read_doctor2vec(r.path).trials.to_pylist()
    assert trials and all(t["conditions"] == t["eligible_codes"] for t in trials)
    with pytest.raises(ValueError, match="criteria"):
        replace(OPTS, criteria="fuzzy")


def test_equivalent_codes_are_eligible_with_their_family(generated, program_dir):  # noqa: F811
    """Codes mapped to the same SNOMED concepts as a family code are eligible too
    (rare trials: all of them)."""
    c = pq.read_table(program_dir / "concepts.parquet").to_pydict()
    key = {
        i: tuple(sorted(ids))
        for i, ids, kind in zip(c["concept_id"], c["snomed_ids"], c["mapping_kind"], strict=True)
        if ids and kind not in ("fallback", "special")
    }
    trials = read_doctor2vec(generated.path).trials.to_pylist()
    for t in trials:
        fam = set(t["eligible_codes"])
        keys = {key[x] for x in fam if x in key}
        same = {i for i, k in key.items() if k in keys}
        if t["split"] == "test_rare":
            assert same <= fam
        assert set(t["conditions"]) <= fam
    # equivalents really join: some trial's eligible codes reach beyond its ICD category (E11 -> N08, N18)
    category = {
        i: (v, code[:3]) for i, v, code in zip(c["concept_id"], c["vocabulary"], c["code"], strict=True)
    }
    assert any(len({category[x] for x in t["eligible_codes"]}) > 1 for t in trials)
