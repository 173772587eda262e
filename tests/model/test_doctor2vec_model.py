"""Doctor2Vec: shapes, masking of empty memory slots, the static ablation, errors, and that it learns."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from model.doctor2vec import Doctor2Vec, Doctor2VecConfig
from model.memory_network import memory_read

N_CODES, N_WORDS = 40, 12


def _batch(memory: list[list[int]], p: int = 6, t: int = 5, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    b = len(memory)
    codes = torch.randint(5, N_CODES, (p, t), generator=g)
    codes[:, 3:] = 0
    return {
        "patient_codes": codes,
        "patient_segments": torch.tensor([[0, 0, 1, 0, 0]]).expand(p, t).clone(),
        "patient_age": torch.tensor([30.0, 45, float("nan"), 70, 20, 55])[:p],
        "patient_sex": torch.tensor([1, 2, 0, 1, 2, 1])[:p],
        "memory": torch.tensor(memory),
        "conditions": torch.randint(5, N_CODES, (b, 2), generator=g),
        "excluded": torch.zeros(b, 1, dtype=torch.long),
        "age_band": torch.tensor([[18.0, 65.0]]).expand(b, 2).clone(),
        "sex": torch.zeros(b, dtype=torch.long),
        "category": torch.ones(b, dtype=torch.long),
        "text": torch.randint(2, N_WORDS, (b, 4), generator=g),
        "label": torch.tensor([1, 0, 1][:b]),
    }


@pytest.mark.parametrize("encoder", ["pooled", "visit-transformer"])
@pytest.mark.parametrize("doctor", ["dynamic", "static"])
def test_shapes_and_attention(encoder, doctor):
    torch.manual_seed(0)
    m = Doctor2Vec(Doctor2VecConfig(N_CODES, N_WORDS, dim=16, patient_encoder=encoder, doctor=doctor, hops=2))
    logits, att = m(_batch([[0, 1, -1], [2, 3, 4], [5, -1, -1]]))
    assert logits.shape == (3,) and att.shape == (3, 3)
    assert torch.allclose(att.sum(-1), torch.ones(3), atol=1e-6)
    assert att[0, 2] == 0 and att[2, 1] == 0 and att[2, 2] == 0
    if doctor == "static":
        assert torch.allclose(att[1], torch.full((3,), 1 / 3))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(2):  # the head's last layer starts at zero: the first step opens the path to the codes
        opt.zero_grad()
        loss, _ = m.loss(_batch([[0, 1, -1], [2, 3, 4], [5, -1, -1]]), pos_weight=2.0)
        loss.backward()
        opt.step()
    assert m.code.weight.grad is not None and m.code.weight.grad.abs().sum() > 0


def test_padding_slots_do_not_change_the_output():
    torch.manual_seed(0)
    m = Doctor2Vec(Doctor2VecConfig(N_CODES, N_WORDS, dim=16)).eval()
    a, att_a = m(_batch([[0, 1], [2, 3]]))
    b, att_b = m(_batch([[0, 1, -1, -1], [2, 3, -1, -1]]))
    assert torch.allclose(a, b, atol=1e-6)
    assert torch.allclose(att_a, att_b[:, :2], atol=1e-6) and (att_b[:, 2:] == 0).all()


def test_memory_order_does_not_matter():
    torch.manual_seed(0)
    m = Doctor2Vec(Doctor2VecConfig(N_CODES, N_WORDS, dim=16)).eval()
    a, _ = m(_batch([[0, 1, 2]]))
    b, _ = m(_batch([[2, 0, 1]]))
    assert torch.allclose(a, b, atol=1e-5)


def test_bad_input_errors():
    m = Doctor2Vec(Doctor2VecConfig(N_CODES, N_WORDS, dim=16, max_memories=3))
    with pytest.raises(ValueError, match="doctors with no patients"):
        m(_batch([[0, 1, -1], [-1, -1, -1]]))
    with pytest.raises(ValueError, match="exceed max_memories"):
        m(_batch([[0, 1, 2, 3]]))
    with pytest.raises(ValueError, match="memory indices must be <"):
        m(_batch([[0, 9]]))
    bad = _batch([[0, 1]])
    bad["conditions"] = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="no condition codes"):
        m(bad)
    bad = _batch([[0, 1]])
    bad["conditions"][0, 0] = N_CODES
    with pytest.raises(ValueError, match="code ids must lie"):
        m(bad)
    with pytest.raises(ValueError, match="doctor must be one of"):
        Doctor2VecConfig(N_CODES, N_WORDS, doctor="average")


def test_memory_read_empty_row_is_zero_not_nan():
    q = torch.randn(2, 4)
    k = torch.randn(2, 3, 4)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    o, p = memory_read(q, k, k, mask)
    assert torch.isfinite(o).all() and (o[1] == 0).all() and (p[1] == 0).all()
    assert p[0, 1] == 0 and torch.isclose(p[0].sum(), torch.tensor(1.0))


def _task(n_doctors: int, seed: int):
    """Doctors of 2-4 patients, each patient one code; a trial on code c fits a doctor with a c-patient.

    The 20 trials are one per code 5..24 (``pair_trial`` indexes them)."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(5, 25, (n_doctors * 4, 1), generator=g)
    sizes = torch.randint(2, 5, (n_doctors,), generator=g)
    memory = torch.full((n_doctors, 4), -1)
    for d in range(n_doctors):
        memory[d, : sizes[d]] = torch.arange(d * 4, d * 4 + int(sizes[d]))
    trial_code = torch.randint(5, 25, (n_doctors,), generator=g)
    # half the pairs get a trial on a code one of the doctor's patients has
    use = torch.rand(n_doctors, generator=g) < 0.5
    trial_code = torch.where(use, codes[memory[:, 0], 0], trial_code)
    label = torch.tensor(
        [bool((codes[memory[d][memory[d] >= 0], 0] == trial_code[d]).any()) for d in range(n_doctors)]
    )
    return {
        "patient_codes": codes,
        "memory": memory,
        "pair_trial": trial_code - 5,
        "conditions": torch.arange(5, 25).unsqueeze(1),
        "excluded": torch.zeros(20, 0, dtype=torch.long),
        "age_band": torch.tensor([[0.0, 200.0]]).expand(20, 2).clone(),
        "sex": torch.zeros(20, dtype=torch.long),
        "category": torch.zeros(20, dtype=torch.long),
        "text": torch.zeros(20, 0, dtype=torch.long),
        "label": label,
    }


@pytest.mark.parametrize("doctor", ["dynamic"])
def test_learns_which_doctor_has_the_trials_patients(doctor):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    m = Doctor2Vec(Doctor2VecConfig(30, 2, dim=32, doctor=doctor, dropout=0.0))
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    train, test = _task(512, 0), _task(256, 1)
    for _ in range(150):
        loss, _ = m.loss(train)
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    with torch.no_grad():
        logits, att = m(test)
    acc = ((logits > 0) == test["label"]).float().mean()
    assert acc > 0.85, acc
    # on positive pairs the attention's top patient is one carrying the trial's code
    pos = test["label"].nonzero().flatten()
    top = att[pos].argmax(-1)
    carried = test["patient_codes"][test["memory"][pos, top], 0] == test["pair_trial"][pos] + 5
    assert carried.float().mean() > 0.8


def test_hrr_code_embedding(tmp_path):
    from hrr_kernel import HRREmbedding, load_program
    from tests.helpers.synthetic_program import write_program

    rng = np.random.default_rng(0)
    n = 2 * (N_CODES - 1)
    edges = (np.arange(1, N_CODES).repeat(2), rng.integers(0, 3, n), rng.integers(0, 20, n))
    prog = load_program(
        write_program(tmp_path / "prog", n_concepts=N_CODES, n_atoms=20, n_relations=3, edges=edges)
    )
    emb = HRREmbedding(prog, 16, "base")
    m = Doctor2Vec(Doctor2VecConfig(N_CODES, N_WORDS, dim=16, code_mode="base"), emb)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        loss, _ = m.loss(_batch([[0, 1, -1], [2, 3, 4], [5, -1, -1]]))
        loss.backward()
        opt.step()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in emb.parameters())
    assert not isinstance(m.code, nn.Embedding)
