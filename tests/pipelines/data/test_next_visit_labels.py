"""Next-visit labels (:mod:`pipelines.data.next_visit`) on a hand-built cohort: ICD-10-CM and ICD-9-CM
categories (E and V codes included) kept apart, the last visit as the target, the history's visit counts
and recency, a patient with one visit left out."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pipelines.data.next_visit import CategorySpace, category_of, next_visit_set, visit_categories
from pipelines.errors import PipelineError

# concept id -> (vocabulary, code)
CONCEPTS = [("SPECIAL", "[PAD]"), ("SPECIAL", "[CLS]"), ("ICD10CM", "I10"), ("ICD10CM", "E119"),
            ("ICD10CM", "E1165"), ("ICD9CM", "4019"), ("ICD9CM", "25000"), ("ICD9CM", "E8809"),
            ("ICD9CM", "V4581"), ("ICD10CM", "J45909"), ("ICD9CM", "E8490")]  # fmt: skip
SPACE = CategorySpace.of_program([v for v, _ in CONCEPTS], [c for _, c in CONCEPTS])


def _cat(name: str) -> int:
    return int(SPACE.index([name])[0])


def _patients(with_start: bool = True) -> pa.Table:
    """Four patients, visits as lists of concept ids ([CLS] first, segment = visit number)."""
    people = {
        1: [[5, 7], [2, 4, 3], [2, 9]],  # ICD-9 visit, then ICD-10 ones; E1165 and E119 in one visit
        2: [[2]],  # one visit: no history
        3: [[8, 6], [10, 6], [8]],  # V and E codes of ICD-9-CM
        4: [[2], [3]],
    }
    ids, segs, starts = [], [], []
    for visits in people.values():
        i, s = [1], [0]
        for v, codes in enumerate(visits):
            if v == len(visits) - 1:
                starts.append(len(i))
            i += codes
            s += [v] * len(codes)
        ids.append(i)
        segs.append(s)
    cols = {
        "subject_id": pa.array(list(people), pa.int64()),
        "input_ids": pa.array(ids, pa.list_(pa.int32())),
        "segment_ids": pa.array(segs, pa.list_(pa.int16())),
    }
    if with_start:
        cols["last_visit_start"] = pa.array(starts, pa.int32())
    return pa.table(cols)


def test_categories_of_icd10_and_icd9_codes():
    assert category_of("ICD10CM", "E1165") == "E11" and category_of("ICD-10-CM", "J45.909") == "J45"
    assert category_of("ICD9CM", "4019") == "401" and category_of("ICD9CM", "250.00") == "250"
    assert category_of("ICD9CM", "E8809") == "E880" and category_of("ICD9CM", "V4581") == "V45"
    assert category_of("SPECIAL", "[CLS]") is None and category_of("ICD9CM", "E88") is None
    assert list(SPACE.names) == ["ICD10CM:E11", "ICD10CM:I10", "ICD10CM:J45", "ICD9CM:250", "ICD9CM:401",
                                 "ICD9CM:E849", "ICD9CM:E880", "ICD9CM:V45"]  # fmt: skip
    assert SPACE.of_concept[:2].tolist() == [-1, -1]  # special tokens have none
    assert SPACE.of_concept[3] == SPACE.of_concept[4] == _cat("ICD10CM:E11")
    assert _cat("ICD9CM:401") != _cat("ICD10CM:I10") and SPACE.index(["ICD10CM:Z99"]).tolist() == [-1]


@pytest.mark.parametrize("with_start", [True, False])
def test_next_visit_labels_of_a_hand_built_cohort(with_start):
    s = next_visit_set(_patients(with_start), np.arange(4), SPACE, "test")
    assert s.subject_id.tolist() == [1, 3, 4]  # patient 2 has one visit
    assert s.counts == {"patients": 4, "kept": 3, "no_history": 1, "no_target": 0}
    assert s.keep.tolist() == [True, False, True, True]
    names = [[SPACE.names[c] for c in t] for t in s.target_sets()]
    assert names == [["ICD10CM:I10", "ICD10CM:J45"], ["ICD9CM:V45"], ["ICD10CM:E11"]]
    visits, last = s.history_visits.toarray(), s.history_last.toarray()
    # patient 1: 401 and E880 at visit 0, I10 and E11 (two codes, one visit) at visit 1
    for name, n, latest in (("ICD9CM:401", 1, 1), ("ICD9CM:E880", 1, 1), ("ICD10CM:I10", 1, 2),
                            ("ICD10CM:E11", 1, 2)):  # fmt: skip
        assert (visits[0, _cat(name)], last[0, _cat(name)]) == (n, latest), name
    assert visits[0].sum() == 4 and visits[0, _cat("ICD10CM:J45")] == 0  # the target is not history
    # patient 3: 250 at both history visits, V45 at the first, E849 at the second
    assert (visits[1, _cat("ICD9CM:250")], last[1, _cat("ICD9CM:250")]) == (2, 2)
    assert (visits[1, _cat("ICD9CM:V45")], last[1, _cat("ICD9CM:V45")]) == (1, 1)
    assert (visits[1, _cat("ICD9CM:E849")], last[1, _cat("ICD9CM:E849")]) == (1, 2)
    assert visits[2].nonzero()[0].tolist() == [_cat("ICD10CM:I10")]


def test_visit_categories_and_subsets():
    vc = visit_categories(_patients(), np.array([2, 0]), SPACE)  # rows in the order given
    assert vc.subject_id.tolist() == [3, 1]
    entries = zip(vc.patient, vc.visit, vc.category, vc.target, strict=True)
    p3 = [(int(v), SPACE.names[c], bool(t)) for p, v, c, t in entries if p == 0]
    assert p3 == [(0, "ICD9CM:250", False), (0, "ICD9CM:V45", False), (1, "ICD9CM:250", False),
                  (1, "ICD9CM:E849", False), (2, "ICD9CM:V45", True)]  # fmt: skip
    s = next_visit_set(_patients(), np.arange(4), SPACE)
    sub = s.subset(np.array([False, True, True]))
    assert sub.subject_id.tolist() == [3, 4] and sub.keep.tolist() == [False, False, True, True]
    assert sub.target.shape == (2, len(SPACE))
    with pytest.raises(PipelineError, match="lacks column"):
        visit_categories(_patients().drop_columns(["segment_ids"]), np.arange(4), SPACE)
