"""The compiler's own reader of the ICD-10-CM tabular list agrees with ``simple-icd-10-cm`` on every node."""

from __future__ import annotations

import pytest

from ontology_compiler.errors import InputFileError
from ontology_compiler.icd10cm_tabular import load_tabular
from ontology_compiler.icd10cm_tree import icd10cm_tabular as tabular

cm = pytest.importorskip("simple_icd_10_cm")


def test_every_node_as_the_package_reads_it():
    t = tabular()
    codes = cm.get_all_codes(with_dots=True)
    assert set(codes) == set(t.index)
    differ = []
    for code in codes:
        for form in {code, code.replace(".", "")}:
            for blocks in (False, True):
                ours = (t.ancestors(form, blocks), t.description(form, blocks), t.is_leaf(form, blocks))
                theirs = (
                    cm.get_ancestors(form, prioritize_blocks=blocks),
                    cm.get_description(form, prioritize_blocks=blocks),
                    cm.is_leaf(form, prioritize_blocks=blocks),
                )
                if ours != theirs:
                    differ.append((form, blocks, ours, theirs))
    assert not differ, differ[:5]


def test_hand_checked_nodes():
    t = tabular()
    # a seventh-character code with placeholders: its parent is the leaf it extends
    assert t.ancestors("S0000XA") == ["S00.00", "S00.0", "S00", "S00-S09", "19"]
    assert t.is_valid_item("S00.00XA") and t.is_leaf("S00.00XA") and not t.is_leaf("S00.00")
    # a block holding a single category shares its name: the name is the category, the block its parent
    assert t.ancestors("B99") == ["B99", "1"]
    assert t.description("B99", prioritize_blocks=True) != t.description("B99")
    assert t.ancestors("E1165") == ["E11.6", "E11", "E08-E13", "4"]
    for bad in ("E14.9", "E149", "XYZ", ""):
        assert not t.is_valid_item(bad)
    with pytest.raises(ValueError, match="does not exist"):
        t.ancestors("E14.9")


def test_a_broken_file_is_named(tmp_path):
    xml, codes = tmp_path / "tabular.xml", tmp_path / "codes.txt"
    xml.write_text("<ICD10CM.tabular><version>2026</version><chapter>", encoding="utf-8")
    codes.write_text("A00 Cholera\n", encoding="utf-8")
    with pytest.raises(InputFileError, match="tabular.xml.*not well-formed XML"):
        load_tabular(xml, codes)
    xml.write_text(
        "<ICD10CM.tabular><version>2026</version><introduction/></ICD10CM.tabular>", encoding="utf-8"
    )
    with pytest.raises(InputFileError, match="no chapters"):
        load_tabular(xml, codes)
