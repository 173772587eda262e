"""model.carry_model: a carried HRRBert keeps every vocabulary-free weight, gives carried tokens with
unchanged edges exactly their embedding rows and MLM logits, and fills new rows by the documented rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from carry_fixtures import NEW_CODES, OLD_CODES, UNCHANGED, write_new_program, write_old_program

from hrr_kernel import load_program
from model import HRRBert, ModelError, bert_tiny, carry_model
from model.carry import TOKEN_TENSORS, unchanged_tokens
from tests.helpers.synthetic_program import random_edges, write_program

MODES = ("unstructured", "base", "freq", "add", "cat", "gram", "ancestors")
NEW_TOKENS = [i for i, c in enumerate(NEW_CODES) if c not in OLD_CODES]
UNK = OLD_CODES.index("[UNK]")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("model_carry")
    return load_program(write_old_program(root / "old")), load_program(write_new_program(root / "new"))


def trained_model(program, mode: str) -> HRRBert:
    """A float64 tiny model with every weight random (the MLM bias and layer norms too), in eval mode."""
    torch.manual_seed(0)
    logf = torch.randn(program.n_concepts) if mode == "freq" else None
    model = HRRBert(bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32, mode=mode), program, logf).double()
    with torch.no_grad():
        model.mlm.bias.normal_()
        model.embeddings.norm.weight.normal_()
    return model.eval()


def rows(codes, program_codes):
    return [program_codes.index(c) for c in codes]


@pytest.mark.parametrize("mode", MODES)
def test_unchanged_tokens_keep_rows_and_logits(pair, mode, one_thread):
    old, new = pair
    model = trained_model(old, mode)
    moved, report = carry_model(model, new)
    moved.eval()
    assert moved.program is new and moved.config == model.config
    assert next(moved.parameters()).dtype == torch.float64
    o, n = rows(UNCHANGED, OLD_CODES), rows(UNCHANGED, NEW_CODES)
    with torch.no_grad():
        torch.testing.assert_close(moved.token_matrix()[n], model.token_matrix()[o], rtol=0, atol=1e-12)
        seq = ["[CLS]", "A001", "[MASK]", "A001", "[SEP]"]
        segments = torch.tensor([[0, 0, 0, 1, 1]])
        mask = torch.tensor([[False, True, True, False, False]])
        before = model(torch.tensor([rows(seq, OLD_CODES)]), segments, mlm_mask=mask)  # (2, N_old)
        after = moved(torch.tensor([rows(seq, NEW_CODES)]), segments, mlm_mask=mask)  # (2, N_new)
    torch.testing.assert_close(after[:, n], before[:, o], rtol=0, atol=1e-12)
    assert report["mode"] == mode and report["carried_edges_unchanged"] == len(UNCHANGED)


@pytest.mark.parametrize("mode", MODES)
def test_vocabulary_free_weights_are_copied(pair, mode):
    old, new = pair
    model = trained_model(old, mode)
    moved, _ = carry_model(model, new)
    a, b = model.state_dict(), moved.state_dict()
    assert set(a) == set(b)
    for key in set(a) - set(TOKEN_TENSORS):
        assert torch.equal(a[key], b[key]), key


def test_new_rows_follow_the_rules(pair):
    old, new = pair
    for mode in MODES:
        model = trained_model(old, mode)
        moved, report = carry_model(model, new)
        bias = model.mlm.bias.detach()
        median = bias[len(OLD_CODES) - 3 :].median()  # the three codes; specials left out
        assert torch.equal(moved.mlm.bias.detach()[NEW_TOKENS], median.expand(len(NEW_TOKENS)))
        token, old_token = moved.embeddings.token, model.embeddings.token
        if mode in ("unstructured", "cat"):
            assert torch.equal(
                token.table.detach()[NEW_TOKENS], old_token.table.detach()[[UNK] * len(NEW_TOKENS)]
            )
        if mode in ("add", "gram", "ancestors"):  # gram, ancestors: a zero own vector beside the ancestors
            assert torch.count_nonzero(token.table.detach()[NEW_TOKENS]) == 0
        if mode == "freq":
            assert torch.equal(
                token.freq_encoding[NEW_TOKENS], old_token.freq_encoding[[UNK] * len(NEW_TOKENS)]
            )
        assert report["new_token_rows"]["count"] == len(NEW_TOKENS)
    # unstructured: a new code embeds exactly as the trained model embeds [UNK]
    model = trained_model(old, "unstructured")
    moved, _ = carry_model(model, new)
    torch.testing.assert_close(
        moved.token_matrix()[NEW_TOKENS], model.token_matrix()[[UNK] * len(NEW_TOKENS)]
    )


def test_new_atoms_follow_init(pair):
    old, new = pair
    model = trained_model(old, "base")
    zero, _ = carry_model(model, new, init="zero")
    c001 = NEW_CODES.index("C001")  # composed only of the new word "cough"
    assert torch.count_nonzero(zero.token_matrix().detach()[c001]) == 0
    r1, _ = carry_model(model, new, init="random", seed=1)
    r1b, _ = carry_model(model, new, init="random", seed=1)
    r2, _ = carry_model(model, new, init="random", seed=2)
    assert torch.equal(r1.embeddings.token.atoms, r1b.embeddings.token.atoms)
    assert not torch.equal(r1.embeddings.token.atoms, r2.embeddings.token.atoms)
    km, report = carry_model(model, new, init="kind_mean")
    assert torch.count_nonzero(km.token_matrix().detach()[c001]) > 0 and report["init"] == "kind_mean"


def test_report(pair):
    old, new = pair
    _, report = carry_model(trained_model(old, "cat"), new)
    assert report["tokens"] == {
        "carried": 7,
        "composed_trained": 1,
        "composed_some_new": 2,
        "entirely_new": 3,
    }
    assert (report["carried_edges_unchanged"], report["carried_edges_changed"]) == (6, 1)
    assert report["old_tokens_dropped"] == 1 and report["dropped_examples"] == ["ICD10CM:A00.2"]
    assert report["new_examples"][:2] == ["ICD10CM:B00.1", "ICD10CM:B00.2"]
    assert report["atoms"]["matched"] == 9 and report["atoms"]["new"] == 2
    assert report["relations"] == {"matched": 3, "new": 1}
    assert report["new_token_rows"]["rules"] == {
        "table": "[UNK] row",
        "mlm_bias": "median bias of the trained codes",
    }
    assert (report["old_program_id"], report["new_program_id"]) == (old.program_id, new.program_id)


def test_carry_leaves_the_global_rng_alone(pair):
    old, new = pair
    model = trained_model(old, "base")
    state = torch.random.get_rng_state()
    carry_model(model, new, init="random", seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_unchanged_tokens(pair):
    old, new = pair
    assert [NEW_CODES[i] for i in torch.nonzero(unchanged_tokens(old, new)).flatten()] == UNCHANGED


def test_table_mode_without_unk_is_refused(tmp_path):
    def program(root, n):
        return load_program(
            write_program(
                root,
                n_concepts=n,
                n_atoms=4,
                n_relations=3,
                edges=random_edges(np.random.default_rng(0), 4, 4, 3, 8),
            )
        )

    old, new = program(tmp_path / "o", 4), program(tmp_path / "n", 5)  # codes X00000.., one more in new
    for mode in ("unstructured", "cat", "freq"):
        with pytest.raises(ModelError, match=r"has no \[UNK\] token, but a '" + mode):
            carry_model(trained_model(old, mode), new)
    moved, report = carry_model(trained_model(old, "add"), new)  # add needs no [UNK]
    assert report["new_token_rows"]["count"] == 1


@pytest.mark.parametrize("mode", ("unstructured", "freq", "add", "cat"))
def test_carried_rows_follow_their_code(pair, mode):
    """A003 is row 7 of the old program and row 6 of the new one: its rows move with it."""
    old, new = pair
    model = trained_model(old, mode)
    moved, _ = carry_model(model, new)
    o, n = OLD_CODES.index("A003"), NEW_CODES.index("A003")
    assert o != n and torch.equal(moved.mlm.bias.detach()[n], model.mlm.bias.detach()[o])
    name = "freq_encoding" if mode == "freq" else "table"
    before, after = getattr(model.embeddings.token, name), getattr(moved.embeddings.token, name)
    assert torch.equal(after.detach()[n], before.detach()[o])
