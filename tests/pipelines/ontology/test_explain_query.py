"""pipelines.ontology explain and query: a tiny HRRBERT on a synthetic program with known edges, its atoms
set to random vectors and its relations to unitary ones (so unbinding recovers every edge), through the
Python API and the ``hrrbert explain`` / ``hrrbert query`` commands."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from hrr_kernel import compose, load_program, project_unitary
from model import HRRBert, preset
from pipelines.cli import main
from pipelines.errors import PipelineError
from pipelines.ontology.explain import explain, explain_code, summary_lines
from pipelines.ontology.query import query, query_codes
from pipelines.ontology.query import summary_lines as query_lines
from pipelines.ontology.trained import (
    NameLookupError,
    NotHRRError,
    load_trained,
    model_folder,
    parse_pair,
    resolve_atom,
    resolve_code,
    resolve_relation,
)
from tests.helpers.synthetic_program import write_program

FINDING_SITE = 363698007
IS_A_SCTID = 116680003
# relations: 0 is_a, 1 description, 2 identity, 3 finding site
IS_A, DESC, IDENTITY, SITE = 0, 1, 2, 3
ATOM_KEYS = ["1001", "1002", "1003", "1004", "1005", "1006", "cyst", "heart", "kidney", "Kidney"]
ATOM_KINDS = ["concept"] * 6 + ["word"] * 4
A = {k: i for i, k in enumerate(ATOM_KEYS)}
CODES = ["E119", "E108", "N200", "I10", "Z999", "E109"]
EDGES = [
    (0, IS_A, A["1001"]),
    (0, DESC, A["cyst"]),
    (0, SITE, A["1003"]),
    (1, IS_A, A["1001"]),
    (1, DESC, A["heart"]),
    (1, SITE, A["1004"]),
    (2, IS_A, A["1002"]),
    (2, DESC, A["kidney"]),
    (2, DESC, A["cyst"]),
    (2, SITE, A["1005"]),
    (3, IS_A, A["1002"]),
    (3, SITE, A["1006"]),
    (5, IS_A, A["1001"]),
    (5, DESC, A["cyst"]),
    (5, SITE, A["1003"]),
]  # fmt: skip  (Z999, row 4, has no edges; E109, row 5, has E119's)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    c, r, a = (np.array(x) for x in zip(*EDGES, strict=True))
    root = write_program(
        tmp_path_factory.mktemp("ontology") / "program",
        n_concepts=len(CODES),
        n_atoms=len(ATOM_KEYS),
        n_relations=4,
        edges=(c, r, a),
        atom_keys=ATOM_KEYS,
        atom_kinds=ATOM_KINDS,
        relation_sctids=[IS_A_SCTID, None, None, FINDING_SITE],
        concept_codes=CODES,
    )
    return load_program(root)


def _save_model(program, folder, mode: str, seed: int = 0):
    torch.manual_seed(seed)
    config = preset("tiny", dim=256, n_heads=2, ffn_dim=32, max_len=8, max_segments=4, mode=mode)
    freq = torch.linspace(0, 3, program.n_concepts) if mode == "freq" else None
    model = HRRBert(config, program, log_frequency=freq)
    token = model.embeddings.token
    if token.atoms is not None:
        h = token.atoms.shape[1]
        with torch.no_grad():
            token.atoms.copy_(torch.randn_like(token.atoms) / math.sqrt(h))
            token.relations.copy_(project_unitary(torch.randn_like(token.relations)))
            if token.table is not None:
                token.table.copy_(0.05 * torch.randn_like(token.table))
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(program, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        mode: _save_model(program, root / mode, mode)
        for mode in ("base", "add", "cat", "freq", "unstructured")
    }


@pytest.fixture(scope="module")
def base(models):
    return load_trained(models["base"])


# --- names ------------------------------------------------------------------------------------------


def test_codes_resolve_dotted_dotless_and_with_a_vocabulary(program):
    assert (
        resolve_code(program, "E11.9")
        == resolve_code(program, "e119")
        == resolve_code(program, "ICD10CM:E11.9")
        == 0
    )
    with pytest.raises(NameLookupError, match=r"no code 'X99\.9' in any of its vocabularies \['ICD10CM'\]"):
        resolve_code(program, "X99.9")
    with pytest.raises(NameLookupError, match="ICD10CM code 'X999'"):
        resolve_code(program, "ICD10CM:X999")


def test_a_code_in_two_vocabularies_is_ambiguous(tmp_path):
    c, r, a = (np.array(x) for x in zip(*EDGES, strict=True))
    root = write_program(
        tmp_path / "p", n_concepts=len(CODES), n_atoms=10, n_relations=4, edges=(c, r, a), concept_codes=CODES
    )
    p = load_program(root)
    p.concept_vocabularies[1] = "ICD9CM"  # the same code E108 ... made to clash with another vocabulary
    p.concept_codes[1] = "E119"
    p._row_index = None
    with pytest.raises(NameLookupError, match=r"in several vocabularies: ICD10CM:E11\.9 .*; ICD9CM:E10\.8"):
        resolve_code(p, "E119")
    assert resolve_code(p, "icd9cm:E119") == 1


def test_relations_resolve_by_label_key_or_kind(program):
    assert resolve_relation(program, str(FINDING_SITE)) == SITE
    assert resolve_relation(program, "ATTRIBUTE 3") == SITE  # the synthetic label, any case
    assert resolve_relation(program, "is_a") == resolve_relation(program, "is a") == IS_A
    assert resolve_relation(program, "Description") == DESC
    with pytest.raises(
        NameLookupError, match=r"no relation 'causative agent'.*it has: is_a 0 \(116680003\); description"
    ):
        resolve_relation(program, "causative agent")


def test_atoms_resolve_by_key_or_label_and_ambiguity_is_named(program):
    assert resolve_atom(program, "1003") == A["1003"]
    assert resolve_atom(program, "atom 1004") == A["1004"]  # by label
    assert resolve_atom(program, "CYST") == A["cyst"]
    with pytest.raises(
        NameLookupError,
        match=r"'kidney' is ambiguous: atom kidney \(word kidney\); atom Kidney \(word Kidney\)",
    ):
        resolve_atom(program, "kidney")
    assert parse_pair(program, "description=kidney") == (DESC, A["kidney"])  # the one bound to description
    with pytest.raises(NameLookupError, match="no atom 'hart'.*close keys and labels: heart"):
        resolve_atom(program, "hart")
    with pytest.raises(NameLookupError, match="RELATION=ATOM"):
        parse_pair(program, "finding site")


# --- explain ----------------------------------------------------------------------------------------


def test_explain_recovers_every_edge_of_the_code(base):
    e = explain_code(base, "E11.9", top=3)
    assert (e.code, e.mode, e.row) == ("ICD10CM:E11.9", "base", 0)
    assert [r.relation_id for r in e.relations] == [IS_A, DESC, SITE]
    for r in e.relations:
        assert r.top[0].in_program and not any(h.in_program for h in r.top[1:])
        assert [(a.key, a.rank) for a in r.program_atoms] == [(r.top[0].key, 0)]
        assert r.top[0].similarity == pytest.approx(r.program_atoms[0].similarity)
    site = e.relations[2]
    assert (site.key, site.top[0].key, site.top[0].kind) == (str(FINDING_SITE), "1003", "concept")
    two = explain_code(base, "N20.0", relations=("attribute 3", "description"), top=4)
    assert [r.relation_id for r in two.relations] == [SITE, DESC]
    assert {h.key for h in two.relations[1].top[:2]} == {"kidney", "cyst"}
    assert all(h.in_program for h in two.relations[1].top[:2])
    every = explain_code(base, "I10", all_relations=True, top=2)
    assert [r.relation_id for r in every.relations] == [0, 1, 2, 3]
    assert every.relations[1].program_atoms == [] and not any(h.in_program for h in every.relations[1].top)


def test_explain_matches_a_brute_force_unbinding(base):
    e = explain_code(
        base, "E10.8", relations=(str(FINDING_SITE),), top=len(ATOM_KEYS), exact=True, any_atom=True
    )
    v = base.vectors[1].double()
    r = base.relations[SITE].double()
    q = torch.fft.irfft(torch.fft.rfft(v) / torch.fft.rfft(r), n=v.numel())  # unitary: exact inverse
    sims = torch.nn.functional.cosine_similarity(q.unsqueeze(0), base.atoms.double(), dim=1)
    order = torch.argsort(sims, descending=True)
    got = e.relations[0].top
    assert [h.atom_id for h in got] == order.tolist()
    np.testing.assert_allclose([h.similarity for h in got], sims[order].numpy(), atol=1e-5)
    # the default cleanup memory: only the atoms some code takes as a finding site, in the same order
    from hrr_kernel import relation_range

    fills = relation_range(base.program)[SITE]
    ranged = explain_code(base, "E10.8", relations=(str(FINDING_SITE),), top=len(ATOM_KEYS), exact=True)
    assert ranged.memory == "range" and e.memory == "all"
    assert [h.atom_id for h in ranged.relations[0].top] == [a for a in order.tolist() if fills[a]]


def test_a_code_without_edges_explains_nothing_unless_asked(base):
    e = explain_code(base, "Z99.9")
    assert e.relations == [] and "has no edges" in summary_lines(e)[-1]
    assert len(explain_code(base, "Z99.9", relations=("is a",)).relations) == 1


def test_drift_per_mode(models, program):
    assert explain(models["base"], "E11.9", drift=True).drift.cosine == 1.0
    for mode in ("add", "cat", "freq"):
        t = load_trained(models[mode])
        c, w = t.composition[2].double(), t.extra[2].double()
        share = float(w @ w / (c @ c + w @ w))
        d = explain_code(t, "N20.0", drift=True).drift
        assert d.mode == mode and d.beside_share == pytest.approx(share, rel=1e-6)
        if mode == "cat":
            assert d.cosine == pytest.approx(math.sqrt(1 - share), rel=1e-6)
            assert t.vectors.shape[1] == 128
            torch.testing.assert_close(t.vectors, compose(program, t.atoms, t.relations))
        else:
            e = c + w
            assert d.cosine == pytest.approx(float(e @ c / (e.norm() * c.norm())), rel=1e-6)
        if mode == "add":
            torch.testing.assert_close(t.vectors, t.composition + t.extra)


def test_the_trained_vector_is_the_embedding_row(models):
    model = HRRBert.from_pretrained(models["add"])
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(load_trained(models["add"]).vectors, model.token_matrix())


def test_unstructured_models_are_refused(models):
    with pytest.raises(NotHRRError, match="'unstructured'.*composes nothing"):
        explain(models["unstructured"], "E11.9")
    with pytest.raises(NotHRRError):
        query(models["unstructured"], ("attribute 3=1003",))


def test_run_folders_resolve_to_their_model(models, tmp_path):
    import shutil

    run = tmp_path / "finetune-run"
    shutil.copytree(models["base"], run / "trial-0" / "model")
    (run / "config.json").write_text("{}")
    assert model_folder(run) == run / "trial-0" / "model"
    shutil.copytree(models["base"], run / "trial-1" / "model")
    with pytest.raises(PipelineError, match="2 trials; pass one trial's model folder"):
        model_folder(run)


# --- query ------------------------------------------------------------------------------------------


def test_query_with_a_code_s_edges_finds_that_code(base):
    r = query_codes(base, ("is a=1002", "description=kidney", "description=cyst", "attribute 3=1005"), top=3)
    assert r.hits[0].code == "N200" and r.hits[0].similarity == pytest.approx(1.0, abs=1e-5)
    asked = {(IS_A, A["1002"]), (DESC, A["kidney"]), (DESC, A["cyst"]), (SITE, A["1005"])}
    one_pair = {
        CODES[c] for c in range(len(CODES)) if len({(r_, a) for c_, r_, a in EDGES if c_ == c} & asked) == 1
    }
    # E109 has E119's edges, so the two tie and float rounding orders them (differently on different CPUs)
    assert one_pair == {"E119", "I10", "E109"}
    assert r.hits[0].edges_held == 4 and r.hits[1].code in one_pair and r.hits[1].edges_held == 1
    assert "Z999" not in {
        h.code for h in query_codes(base, ("is a=1001",), top=10).hits
    }  # no edges: no vector
    lines = query_lines(r)
    assert "ICD10CM:N20.0" in lines[-3] and "[4/4 pairs]" in lines[-3]


def test_like_minus_plus_swaps_one_edge(base):
    r = query_codes(base, like="E11.9", minus=("attribute 3=1003",), plus=("attribute 3=1004",), top=4)
    assert r.like == "ICD10CM:E11.9" and r.minus and r.pairs
    assert not {"E119", "E109"} & {h.code for h in r.hits}  # the code and its twin (the same edges)
    assert r.hits[0].code == "E108" and r.hits[0].edges_held == 1
    assert r.hits[0].similarity == pytest.approx(2 / 3, abs=0.1)  # shares is_a and the site, not the word


def test_query_errors(base):
    with pytest.raises(PipelineError, match="nothing to query"):
        query_codes(base)
    with pytest.raises(PipelineError, match="give --like CODE"):
        query_codes(base, ("is a=1001",), minus=("is a=1001",))
    with pytest.raises(PipelineError, match="the query vector is zero"):
        query_codes(base, like="E11.9", minus=("is a=1001", "description=cyst", "attribute 3=1003"))
    with pytest.raises(NameLookupError, match="no relation 'site'"):
        query_codes(base, ("site=1003",))


# --- the commands -----------------------------------------------------------------------------------


def _run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_explain_command(models, tmp_path):
    res = _run(
        ["explain", str(models["base"]), "E11.9", "--relation", "attribute 3", "--top", "2", "--drift", "-q"]
    )
    assert res.exit_code == 0, res.output
    assert "ICD10CM:E11.9" in res.output and "* +" in res.output and "atom 1003 [concept 1003]" in res.output
    assert "drift: cosine with the composition 1.000" in res.output
    out = tmp_path / "e.json"
    res = _run(["explain", str(models["cat"]), "ICD10CM:N20.0", "--json", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == json.loads(out.read_text())
    assert json.loads(res.output)["mode"] == "cat"


def test_explain_command_errors(models):
    for args, message in (
        ([str(models["base"]), "X99.9"], "no code 'X99.9'"),
        ([str(models["base"]), "E11.9", "--relation", "nope"], "no relation 'nope'"),
        ([str(models["unstructured"]), "E11.9"], "'unstructured'"),
    ):
        res = _run(["explain", *args, "-q"])
        assert res.exit_code == 1 and res.output.startswith("Error: ") and message in res.output, res.output


def test_query_command(models):
    res = _run(["query", str(models["base"]), "attribute 3=1005", "description=cyst", "--top", "2", "-q"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[-2].split()[1] == "ICD10CM:N20.0"
    res = _run(
        [
            "query",
            str(models["base"]),
            "--like",
            "E11.9",
            "--minus",
            "attribute 3=1003",
            "--plus",
            "attribute 3=1004",
            "--json",
            "-q",
        ]
    )
    assert json.loads(res.output)["hits"][0]["code_dotted"] == "E10.8"
    res = _run(["query", str(models["base"]), "attribute 3=kidneys", "-q"])
    assert res.exit_code == 1 and "no atom 'kidneys'" in res.output
