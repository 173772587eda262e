"""The demo cohort's ground truth (contract C): reserved codes only flagged patients have, the true task
probabilities, a realistic frequency head, chronic codes that recur, byte-identical regeneration."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipelines.data.readers.eicu import read_eicu
from pipelines.data.readers.mimic import read_mimic
from pipelines.demo.cohort import RESERVED_PATIENTS, SWITCH, generate_cohort

N = 3000


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    from ontology_compiler import compile_ontology
    from pipelines.demo.release import build_demo_release

    root = tmp_path_factory.mktemp("demo_program")
    release = build_demo_release(root / "demo_icd10cm_small", size="small", seed=0)
    return compile_ontology(release, out=root / "programs").path


@pytest.fixture(scope="module", params=[0, 1])
def cohort(request, program, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"truth{request.param}") / "c"
    return generate_cohort(out, n_patients=N, seed=request.param, codes=program)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Without a program: the whole ICD-10-CM code space, as large as the default demo program's."""
    return generate_cohort(tmp_path_factory.mktemp("plain") / "c", n_patients=N, seed=0)


def _gt(cohort, name, hospital="mimic-iv"):
    t = pq.read_table(cohort / "ground_truth" / name)
    return t.filter(pc.equal(t["hospital"], hospital)) if "hospital" in t.column_names else t


def _reserved(cohort) -> set[tuple[str, str]]:
    t = pq.read_table(cohort / "ground_truth" / "reserved_codes.parquet")
    assert t.column_names == ["vocabulary", "code", "condition"]
    return set(zip(t["vocabulary"].to_pylist(), t["code"].to_pylist(), strict=True))


def _pairs(events) -> list[tuple[str, str]]:
    return list(zip(events["vocabulary"].to_pylist(), events["code"].to_pylist(), strict=True))


def _auroc(y: np.ndarray, s: np.ndarray) -> float:
    """Mann-Whitney AUROC (ties as midranks)."""
    from scipy.stats import rankdata

    ranks = rankdata(s)
    n1 = y.sum()
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2) / (n1 * (len(y) - n1)))


def test_reserved_codes_only_in_flagged_patients(cohort, program):
    reserved = _reserved(cohort)
    assert reserved and {v for v, _ in reserved} == {"ICD10CM"}
    concepts = pq.read_table(program / "concepts.parquet", columns=["vocabulary", "code"])
    universe = set(_pairs(concepts))
    assert reserved <= universe
    pats = _gt(cohort, "patients.parquet")
    flagged = set(np.array(pats["subject_id"].to_pylist())[np.array(pats["reserved"].to_pylist())].tolist())
    r = read_mimic(cohort)
    subject = r.events["subject_id"].to_pylist()
    is_reserved = np.array([p in reserved for p in _pairs(r.events)])
    is_flagged = np.array([s in flagged for s in subject])
    assert is_flagged.any() and is_reserved[is_flagged].all()  # flagged: ALL their codes are reserved
    assert not is_reserved[~is_flagged].any()  # nobody else has one
    eicu = read_eicu(cohort / "eicu")
    assert not any(p in reserved for p in _pairs(eicu.events))
    assert not any(_gt(cohort, "patients.parquet", "eicu")["reserved"].to_pylist())


def test_flagged_patients_count_visits_and_icd10_only(cohort):
    pats = _gt(cohort, "patients.parquet")
    res = np.array(pats["reserved"].to_pylist())
    assert 0.4 * RESERVED_PATIENTS * N < res.sum() < 1.6 * RESERVED_PATIENTS * N
    assert (np.array(pats["n_visits"].to_pylist())[res] >= 2).all()
    flagged = set(np.array(pats["subject_id"].to_pylist())[res].tolist())
    r = read_mimic(cohort)
    mine = np.array([s in flagged for s in r.events["subject_id"].to_pylist()])
    times = np.array(r.events["visit_time"].to_pylist(), dtype="datetime64[s]")[mine]
    assert (times >= np.datetime64(int(SWITCH), "s")).all()
    assert set(np.array(r.events["vocabulary"].to_pylist())[mine]) == {"ICD10CM"}
    # their conditions span chapters: the chapters labels of their last visits vary
    labels = {
        tuple(c)
        for s, c in zip(r.labels["subject_id"].to_pylist(), r.labels["chapters"].to_pylist(), strict=True)
        if s in flagged
    }
    assert len({c for cs in labels for c in cs}) >= 4 and len(labels) >= 5


def test_task_probabilities_are_the_truth(cohort):
    tp = _gt(cohort, "task_probabilities.parquet")
    assert tp.column_names == ["hospital", "subject_id", "mortality", "chapters"]
    types = {f.name: f.type for f in tp.schema}
    assert pa.types.is_int64(types["subject_id"]) and pa.types.is_float64(types["mortality"])
    assert pa.types.is_list(types["chapters"]) and pa.types.is_float64(types["chapters"].value_type)
    r = read_mimic(cohort)
    row = {s: i for i, s in enumerate(tp["subject_id"].to_pylist())}
    idx = np.array([row[s] for s in r.labels["subject_id"].to_pylist()])
    p_mort = tp["mortality"].to_numpy()[idx]
    chapters = np.array(tp["chapters"].to_pylist())[idx]
    assert chapters.shape == (N, 22) and tp.num_rows == N
    assert ((p_mort > 0) & (p_mort < 1)).all() and ((chapters >= 0) & (chapters <= 1)).all()
    died = np.array(r.labels["mortality_6m"].to_pylist())
    assert abs(p_mort.mean() - died.mean()) < 0.03
    assert _auroc(died, p_mort) > 0.75
    y = np.zeros((N, 22), dtype=bool)
    for i, cs in enumerate(r.labels["chapters"].to_pylist()):
        y[i, np.array(cs, dtype=np.int64) - 1] = True
    # calibrated per chapter (exact for MIMIC-IV: binomial noise only) and informative
    assert np.abs(y.mean(axis=0) - chapters.mean(axis=0)).max() < 0.04
    common = [c for c in range(22) if 0.05 < y[:, c].mean() < 0.95]
    assert len(common) >= 5
    assert np.mean([_auroc(y[:, c], chapters[:, c]) for c in common]) > 0.75
    # eICU: ids as its reader numbers patients (a patient whose last stay kept no code has no label)
    eicu = _gt(cohort, "task_probabilities.parquet", "eicu")
    labels = read_eicu(cohort / "eicu").labels
    p_eicu = dict(zip(eicu["subject_id"].to_pylist(), eicu["mortality"].to_pylist(), strict=True))
    ids = labels["subject_id"].to_pylist()
    assert sorted(p_eicu) == list(range(1, eicu.num_rows + 1)) and set(ids) <= set(p_eicu)
    assert len(ids) > 0.95 * eicu.num_rows
    died_eicu = np.array(labels["mortality_6m"].to_pylist())
    assert abs(np.mean([p_eicu[i] for i in ids]) - died_eicu.mean()) < 0.05


def test_next_visit_probabilities_are_the_truth(cohort):
    from pipelines.data.next_visit import category_of
    from pipelines.demo.cohort_truth import NEXT_VISIT_TOP

    t = _gt(cohort, "next_visit_probabilities.parquet")
    assert t.column_names == ["hospital", "subject_id", "rank", "category", "probability"]
    sid, rank = t["subject_id"].to_numpy(), t["rank"].to_numpy()
    cat, prob = np.array(t["category"].to_pylist()), t["probability"].to_numpy()
    assert t.num_rows == N * NEXT_VISIT_TOP and np.array_equal(rank, np.tile(np.arange(1, 31), N))
    assert ((prob >= 0) & (prob <= 1)).all() and (np.diff(prob.reshape(N, -1), axis=1) <= 1e-12).all()
    ev = read_mimic(cohort).events
    subject, visit = ev["subject_id"].to_numpy(), ev["visit_index"].to_numpy()
    last = {s: v for s, v in zip(subject, visit, strict=True)}  # events are sorted by patient, visit
    true = {
        (s, f"{v}:{category_of(v, c)}")
        for s, i, v, c in zip(
            subject, visit, ev["vocabulary"].to_pylist(), ev["code"].to_pylist(), strict=True
        )
        if i == last[s]
    }
    hit = np.array([(s, c) in true for s, c in zip(sid.tolist(), cat.tolist(), strict=True)])
    # calibrated at every rank (exact for MIMIC-IV: binomial noise only), and the top 30 hold most truths
    for r in (1, 2, 3, 5, 10, 20, 30):
        assert abs(hit[rank == r].mean() - prob[rank == r].mean()) < 0.04, r
    assert hit.sum() > 0.8 * len(true) and hit[rank == 1].mean() > 0.5


def test_readme_lists_files_version_and_counts(cohort):
    meta = json.loads((cohort / "ground_truth" / "README.json").read_text())
    assert {"reserved_codes.parquet", "task_probabilities.parquet", "patients.parquet"} <= set(meta["files"])
    assert all((cohort / "ground_truth" / f).is_file() for f in meta["files"])
    assert meta["version"] and meta["reserved_codes"] == len(_reserved(cohort))
    assert set(meta["reserved_codes_excluded"]) == {"identical_edge_set", "shares_snomed_with_icd9"}
    assert meta["counts"]["mimic-iv"]["reserved_patients"] > 0


def test_reserved_codes_are_not_twins_of_ordinary_codes(cohort, program):
    concepts = pq.read_table(program / "concepts.parquet", columns=["concept_id", "vocabulary", "code"])
    edges = pq.read_table(program / "edges.parquet", columns=["concept_id", "relation_id", "atom_id"])
    sig: dict[int, set] = {}
    for c, rel, a in zip(*(edges[k].to_pylist() for k in edges.column_names), strict=True):
        sig.setdefault(c, set()).add((rel, a))
    reserved = _reserved(cohort)
    key = dict(zip(concepts["concept_id"].to_pylist(), _pairs(concepts), strict=True))
    reserved_sigs = {frozenset(sig.get(c, ())) for c, k in key.items() if k in reserved}
    ordinary = {frozenset(sig.get(c, ())) for c, k in key.items() if k not in reserved}
    assert not reserved_sigs & ordinary


def test_frequency_head_and_recurring_codes(plain):
    r = read_mimic(plain)
    codes = np.array([f"{v}:{c}" for v, c in _pairs(r.events)])
    _, counts = np.unique(codes, return_counts=True)
    top = np.sort(counts)[::-1]
    assert 0.20 < top[:30].sum() / counts.sum() < 0.45
    assert (counts == 1).sum() > 0.2 * len(counts)  # a long rare tail
    # a code of a visit is often also in another visit of the same patient (chronic conditions); the
    # reader keeps a code once per visit, so a (patient, code) seen twice is in two visits
    subject = np.array(r.events["subject_id"].to_pylist())
    key = np.char.add(np.char.add(subject.astype(str), "|"), codes)
    _, inv, per_code = np.unique(key, return_inverse=True, return_counts=True)
    assert np.mean(per_code[inv] > 1) > 0.25


def test_same_seed_same_bytes_with_program(tmp_path, program):
    a = generate_cohort(tmp_path / "a", n_patients=300, seed=4, codes=program)
    b = generate_cohort(tmp_path / "b", n_patients=300, seed=4, codes=program)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        x, y = (a / rel).read_bytes(), (b / rel).read_bytes()
        if rel.suffix == ".gz":
            x, y = gzip.decompress(x), gzip.decompress(y)
        assert x == y, rel


def test_ensure_cohort_regenerates_a_cohort_of_another_version(tmp_path, program):
    from pipelines.demo.cohort import GENERATOR_VERSION
    from pipelines.demo.prepare import ensure_cohort

    final = ensure_cohort(tmp_path, program, n_patients=60, seed=0)
    readme = final / "ground_truth" / "README.json"
    assert json.loads(readme.read_text())["version"] == GENERATOR_VERSION
    stamp = readme.stat().st_mtime_ns
    assert ensure_cohort(tmp_path, program, n_patients=60, seed=0) == final
    assert readme.stat().st_mtime_ns == stamp  # cached
    readme.write_text(json.dumps({**json.loads(readme.read_text()), "version": "0"}))
    ensure_cohort(tmp_path, program, n_patients=60, seed=0)
    assert json.loads(readme.read_text())["version"] == GENERATOR_VERSION


def test_flagged_chapter_mix_is_the_ordinary_one_where_flagged_patients_can_go():
    from pipelines.demo.cohort import flagged_chapter_mix

    ordinary = np.array([5.0, 4.0, 3.0, 2.0, 1.0])  # chapter 0 is "no chapter" and never drawn
    flagged = np.array([1.0, 0.1, 0.0, 7.0, 0.2])  # chapter 2 has no condition with reserved codes
    np.testing.assert_allclose(flagged_chapter_mix(ordinary, flagged), [0, 4 / 7, 0, 2 / 7, 1 / 7])


def test_one_uniform_draws_the_chapter_and_a_fresh_uniform_within_it():
    from scipy.stats import chisquare, kstest

    from pipelines.demo.cohort import _split_uniform

    mix = np.array([0.0, 0.5, 0.0, 0.3, 0.2])
    u = np.random.default_rng(3).random(60_000)
    system = np.where(np.arange(u.size) % 3 == 0, 2, 0)  # a third have a system chapter: kept as drawn
    ch, fresh = _split_uniform(mix, system, u)
    assert (ch[system == 2] == 2).all() and np.array_equal(fresh[system == 2], u[system == 2])
    free = system == 0
    counts = np.bincount(ch[free], minlength=mix.size)
    assert counts[0] == counts[2] == 0
    assert chisquare(counts[[1, 3, 4]], mix[[1, 3, 4]] * free.sum()).pvalue > 1e-3
    for c in (1, 3, 4):  # within each chapter the rescaled uniform is uniform on [0, 1)
        assert kstest(fresh[free & (ch == c)], "uniform").pvalue > 1e-3
    assert ((0 <= fresh) & (fresh < 1)).all()
    edge, f_edge = _split_uniform(mix, np.zeros(1, dtype=np.int64), np.array([1.0 - 1e-12]))
    assert edge[0] == 4 and 0 <= f_edge[0] < 1


def test_flagged_draws_keep_the_ordinary_chapter_mix(program):
    """Draws outside a system: flagged patients get each chapter as often as ordinary ones (over the chapters
    where conditions with reserved codes exist), and only conditions with reserved codes."""
    from pipelines.demo.cohort import _Draws
    from pipelines.demo.cohort_program import read_program
    from pipelines.demo.cohort_space import build_code_space

    facts = read_program(program, 0)
    space = build_code_space(0, facts.universe, facts=facts)
    draws = _Draws(space, space.prevalence)
    n = 200_000
    u = np.random.default_rng(5).random(n)
    for kind in ("chronic", "acute"):
        ordinary = draws.draw(kind, np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64), u)
        flagged = draws.draw(kind, np.ones(n, dtype=bool), np.zeros(n, dtype=np.int64), u)
        assert space.has_reserved[flagged].all() and not space.has_reserved[ordinary].all()
        can = draws.mass[kind, True] > 0
        ch_o = np.bincount(space.chapter[ordinary], minlength=can.size)[can] / n
        ch_f = np.bincount(space.chapter[flagged], minlength=can.size)[can] / n
        np.testing.assert_allclose(ch_f, ch_o / ch_o.sum(), atol=0.01)
