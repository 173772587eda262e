import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from hrr_kernel import (
    SPECIAL_TOKENS,
    FormatVersionError,
    HashMismatchError,
    HRRKernelError,
    Program,
    ProgramError,
    load_program,
)
from hrr_kernel.program import sha256_file


def _rewrite_manifest(root, **changes):
    m = json.loads((root / "manifest.json").read_text())
    m.update(changes)
    (root / "manifest.json").write_text(json.dumps(m))


def _rehash(root, name):
    m = json.loads((root / "manifest.json").read_text())
    for f in m["files"]:
        if f["path"] == name:
            f["sha256"] = sha256_file(root / name)
    (root / "manifest.json").write_text(json.dumps(m))


def test_load_program_reads_counts_and_orders(make_program):
    root = make_program(n_concepts=9, n_atoms=6, n_relations=4, n_edges=40, seed=3)
    p = load_program(root)
    assert (p.n_concepts, p.n_atoms, p.n_relations, p.n_edges) == (9, 6, 4, 40)
    assert p.program_id == json.loads((root / "manifest.json").read_text())["program_id"]
    assert p.format_version == 1 and p.counts["edges"] == 40
    # stored order: (relation, slot, concept)
    key = p.edge_relation * 10_000 + p.edge_slot * 100 + p.edge_concept
    assert torch.all(key[1:] > key[:-1])
    by_c = p.edge_concept[p.order_by_concept]
    assert torch.all(by_c[1:] >= by_c[:-1])
    by_a = p.edge_atom[p.order_by_atom]
    assert torch.all(by_a[1:] >= by_a[:-1])
    assert sorted(p.order_by_concept.tolist()) == list(range(40))


def test_load_program_puts_tensors_on_the_device(make_program):
    p = load_program(make_program(), device="cpu")
    assert p.edge_atom.device.type == "cpu" and p.plan.pair_atom.device.type == "cpu"


def test_bad_hash_names_file_expected_and_found(make_program):
    root = make_program()
    expected = sha256_file(root / "edges.parquet")
    table = pq.read_table(root / "edges.parquet")
    pq.write_table(table.slice(0, 10), root / "edges.parquet")  # truncated after compilation
    found = sha256_file(root / "edges.parquet")
    with pytest.raises(HashMismatchError) as err:
        load_program(root)
    msg = str(err.value)
    assert "edges.parquet" in msg and expected in msg and found in msg
    assert err.value.expected == expected and err.value.found == found
    assert isinstance(err.value, HRRKernelError)


@pytest.mark.parametrize("version", [2, "2.0", 0, "one", None])
def test_unknown_major_format_version_is_refused(make_program, version):
    root = make_program()
    _rewrite_manifest(root, format_version=version)
    with pytest.raises(FormatVersionError, match="unsupported program format_version"):
        load_program(root)


def test_minor_version_of_format_1_is_accepted(make_program):
    root = make_program()
    _rewrite_manifest(root, format_version="1.3")
    assert load_program(root).format_version == 1


def test_missing_folder_and_manifest(tmp_path):
    with pytest.raises(ProgramError, match="does not exist"):
        load_program(tmp_path / "nope")
    with pytest.raises(ProgramError, match="manifest.json not found"):
        load_program(tmp_path)


def test_parquet_metadata_must_match_manifest(make_program):
    root = make_program()
    table = pq.read_table(root / "atoms.parquet")
    pq.write_table(
        table.replace_schema_metadata({b"program_id": b"other", b"format_version": b"1"}),
        root / "atoms.parquet",
    )
    _rehash(root, "atoms.parquet")
    with pytest.raises(ProgramError, match="program_id is 'other'"):
        load_program(root)


def test_negative_atom_id_is_refused(make_program):
    """The original code stored the identity atom at index -1; a program may not."""
    root = make_program()
    table = pq.read_table(root / "edges.parquet")
    atom = table.column("atom_id").to_numpy().copy()
    atom[0] = -1
    table = table.set_column(table.schema.get_field_index("atom_id"), "atom_id", [atom])
    pq.write_table(table, root / "edges.parquet")
    _rehash(root, "edges.parquet")
    with pytest.raises(ProgramError, match="atom_id has values in \\[-1"):
        load_program(root)


def test_unsorted_edges_are_refused(make_program):
    root = make_program(n_edges=30)
    table = pq.read_table(root / "edges.parquet")
    pq.write_table(table.take(np.arange(table.num_rows)[::-1].copy()), root / "edges.parquet")
    _rehash(root, "edges.parquet")
    with pytest.raises(ProgramError, match="not sorted by"):
        load_program(root)


def test_row_count_must_match_manifest(make_program):
    root = make_program()
    m = json.loads((root / "manifest.json").read_text())
    for f in m["files"]:
        if f["path"] == "concepts.parquet":
            f["rows"] += 1
    (root / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ProgramError, match="concepts.parquet has 7 rows, manifest says 8"):
        load_program(root)


def test_verify_all_files_hashes_extra_files(make_program):
    root = make_program()
    (root / "graph").mkdir()
    (root / "graph" / "icd_map.parquet").write_bytes(b"x")
    m = json.loads((root / "manifest.json").read_text())
    m["files"].append({"path": "graph/icd_map.parquet", "sha256": "0" * 64, "rows": 0})
    (root / "manifest.json").write_text(json.dumps(m))
    load_program(root)  # the kernel reads no graph/* file by default
    with pytest.raises(HashMismatchError, match="graph/icd_map.parquet"):
        load_program(root, verify_all_files=True)


def _with_codes(root, codes):
    """Rewrite the first concept codes (keeping the key-value metadata) and re-hash the file."""
    table = pq.read_table(root / "concepts.parquet")
    col = table.column("code").to_pylist()
    col[: len(codes)] = codes
    new = table.set_column(table.schema.get_field_index("code"), "code", pa.array(col))
    pq.write_table(new.replace_schema_metadata(table.schema.metadata), root / "concepts.parquet")
    _rehash(root, "concepts.parquet")
    return root


def test_special_id_gives_the_concept_of_a_special_token(make_program):
    root = _with_codes(make_program(n_concepts=9), ["X0", "[CLS]", "[PAD]"])
    p = load_program(root)
    assert p.special_id("[PAD]") == 2 and p.special_id("[CLS]") == 1
    assert Program.SPECIAL_TOKENS == SPECIAL_TOKENS and SPECIAL_TOKENS[0] == "[PAD]"
    twice = load_program(_with_codes(make_program(n_concepts=9), ["X0", "[PAD]", "[PAD]"]))
    assert twice.special_id("[PAD]") == 1  # the first concept with the code, as list.index


def test_special_id_names_the_token_and_the_program_when_absent(make_program):
    p = load_program(_with_codes(make_program(), ["[PAD]"]))
    with pytest.raises(ProgramError) as err:
        p.special_id("[MASK]")
    assert "[MASK]" in str(err.value) and p.program_id in str(err.value)
    with pytest.raises(ValueError, match="not a special token"):
        p.special_id("X00001")
