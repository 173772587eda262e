"""HRRBert.settle_untrained: what no training reached is reset by mode (atoms and relations to their kind
mean, table rows to the trained codes' mean, add rows to zero), the record accumulates over trainings,
survives save and load, and is checked when read."""

from __future__ import annotations

import json

import pytest
import torch

from hrr_kernel import MODES, SETTLED_KINDS, SPECIAL_TOKENS, trained_parts
from model import HRRBert, PretrainedFileError, preset


def make(program, mode):
    torch.manual_seed(0)
    logf = torch.linspace(-8, -1, program.n_concepts) if mode == "freq" else None
    return HRRBert(preset("tiny", mode=mode), program, log_frequency=logf)


def held_out(program):
    """Trained tokens: all but the last third of the codes (the special tokens stay trained)."""
    trained = torch.ones(program.n_concepts, dtype=torch.bool)
    trained[2 * program.n_concepts // 3 :] = False
    special = torch.tensor([c in SPECIAL_TOKENS for c in program.concept_codes])
    return trained | special


@pytest.mark.parametrize("mode", MODES)
def test_settle_by_mode(program, mode):
    m = make(program, mode)
    tok = m.embeddings.token
    before = {k: v.detach().clone() for k, v in m.state_dict().items()}
    trained = held_out(program)
    counts = m.settle_untrained(trained)
    after = m.state_dict()
    assert m.untrained_tokens == torch.nonzero(~trained).flatten().tolist()
    assert counts["tokens_untrained"] == int((~trained).sum()) > 0
    for k in before:  # only the token embedding's parameters change
        if not k.startswith("embeddings.token."):
            assert torch.equal(before[k], after[k]), k
    if tok.atoms is not None:
        # gram, ancestors: only the ancestor edges reach a row (their words are nobody's, so never moved)
        reached, _ = trained_parts(program, trained, tok.spec.row_edges(program))
        atoms, atoms0 = after["embeddings.token.atoms"], before["embeddings.token.atoms"]
        assert torch.equal(atoms[reached], atoms0[reached])
        kinds = program.atom_kinds
        has_trained = {kinds[j] for j in range(program.n_atoms) if reached[j]}
        moved = [
            i
            for i in range(program.n_atoms)
            if not reached[i] and kinds[i] in SETTLED_KINDS and kinds[i] in has_trained
        ]
        assert counts["atoms_settled"] == len(moved) > 0
        for i in moved:
            same = [j for j in range(program.n_atoms) if kinds[j] == kinds[i] and reached[j]]
            assert torch.allclose(atoms[i], atoms0[same].mean(0), atol=1e-6)
    else:
        assert counts["atoms_settled"] == 0
    if tok.table is not None:
        table, table0 = after["embeddings.token.table"], before["embeddings.token.table"]
        assert torch.equal(table[trained], table0[trained])
        special = torch.tensor([c in SPECIAL_TOKENS for c in program.concept_codes])
        fill = tok.spec.untrained_fill
        if fill is None:  # gram, ancestors: the code keeps its own vector's draw
            assert torch.equal(table, table0) and counts["rows_settled"] == 0
        else:
            want = torch.zeros_like(table0[0]) if fill == "zero" else table0[trained & ~special].mean(0)
            assert torch.allclose(table[~trained], want.expand(int((~trained).sum()), -1), atol=1e-6)
            assert counts["rows_settled"] == int((~trained).sum())


def test_record_accumulates_and_survives_save_and_load(program, tmp_path):
    m = make(program, "base")
    first = held_out(program)
    m.settle_untrained(first)
    # a later training that held some of the untrained tokens, and none of the trained ones
    later = torch.zeros(program.n_concepts, dtype=torch.bool)
    later[m.untrained_tokens[:3]] = True
    m.settle_untrained(later)
    assert m.untrained_tokens == torch.nonzero(~(first | later)).flatten().tolist()
    m.save_pretrained(tmp_path / "m", card=False)
    back = HRRBert.from_pretrained(tmp_path / "m", program)
    assert back.untrained_tokens == m.untrained_tokens
    fresh = make(program, "base")
    fresh.save_pretrained(tmp_path / "f", card=False)
    assert HRRBert.from_pretrained(tmp_path / "f", program).untrained_tokens is None  # not recorded
    cfg = tmp_path / "m" / "config.json"
    meta = json.loads(cfg.read_text())
    meta["untrained_tokens"] = [program.n_concepts]
    cfg.write_text(json.dumps(meta))
    with pytest.raises(PretrainedFileError, match="untrained_tokens"):
        HRRBert.from_pretrained(tmp_path / "m", program)
    with pytest.raises(ValueError, match="bool tensor"):
        m.settle_untrained(torch.ones(program.n_concepts))
