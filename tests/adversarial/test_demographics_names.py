"""Doctor2Vec's demographics reader takes the file path as a bound parameter: quotes, braces and
semicolons in folder names are data, never SQL."""

from __future__ import annotations

import gzip
import os

import pytest

from pipelines.doctor2vec.read import read_demographics

HOSTILE = ["O'Brien", "it's {x}", "a'); COPY (SELECT 1) TO 'pwned.txt'; --", "Ménière"]


@pytest.mark.parametrize("folder", HOSTILE)
def test_hostile_folder_names_read_as_data(tmp_path, monkeypatch, folder):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / folder / "hosp" / "patients.csv.gz"
    f.parent.mkdir(parents=True)
    with gzip.open(f, "wt") as fh:
        fh.write(
            "subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod\n1,F,40,2100,2008 - 2010,\n2,M,70,2100,2008 - 2010,\n"
        )
    rows = read_demographics(f, "mimic-iv").to_pylist()
    assert rows == [{"subject_id": 1, "sex": "F", "age": 40}, {"subject_id": 2, "sex": "M", "age": 70}]
    assert not any("pwned" in name for _, _, files in os.walk(tmp_path) for name in files)
