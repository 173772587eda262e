"""HRRBERT: shapes in every embedding mode, the tied decoder, post-LN, masking of padding, persistence."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from hrr_kernel import MODES
from model import HRRBert, HRRBertSettings, PretrainedFileError, ProgramMismatchError, bert_base, preset


def make(program, mode="base", **kw):
    torch.manual_seed(0)
    logf = torch.linspace(-8, -1, program.n_concepts) if mode == "freq" else None
    return HRRBert(preset("tiny", mode=mode, **kw), program, log_frequency=logf)


def batch(program, b=3, t=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, program.n_concepts, (b, t), generator=g)
    ids[:, 0] = 1  # [CLS]
    seg = torch.arange(t).div(3, rounding_mode="floor").expand(b, t).clone()
    att = torch.ones(b, t, dtype=torch.bool)
    att[0, 6:] = False
    ids[0, 6:] = 0
    return ids, seg, att


def test_presets():
    c = bert_base()
    assert (c.n_layers, c.dim, c.n_heads, c.ffn_dim, c.max_len, c.max_segments) == (
        12,
        768,
        12,
        3072,
        128,
        100,
    )
    assert preset("small").dim == 256 and preset("tiny").n_layers == 2
    with pytest.raises(ValueError, match="divisible"):
        HRRBertSettings(dim=10, n_heads=3)
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("huge")


@pytest.mark.parametrize("mode", MODES)
def test_forward_shapes_and_backward(program, mode):
    m = make(program, mode)
    ids, seg, att = batch(program)
    mlm = torch.zeros_like(ids, dtype=torch.bool)
    mlm[:, 2] = mlm[1, 4] = True
    logits = m(ids, seg, att, mlm_mask=mlm)
    assert logits.shape == (4, program.n_concepts)
    logits.logsumexp(1).sum().backward()
    tok = m.embeddings.token
    grads = [p.grad for p in (tok.atoms, tok.relations, tok.table) if p is not None]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)
    for task, n in (("mortality", 1), ("chapters", 22)):
        assert m(ids, seg, att, task=task).shape == (3, n)


def test_decoder_is_tied_to_the_embedding_matrix(program):
    m = make(program, "add").eval()
    ids, seg, att = batch(program)
    mlm = torch.zeros_like(ids, dtype=torch.bool)
    mlm[1, 3] = True
    with torch.no_grad():
        e = m.token_matrix()
        h = m.encode(ids, seg, att, token_matrix=e)[1, 3]
        ref = m.mlm.norm(nn.functional.gelu(m.mlm.dense(h))) @ e.t() + m.mlm.bias
        got = m(ids, seg, att, mlm_mask=mlm)[0]
        # row lookup composing only the rows present equals the full-matrix lookup
        assert torch.allclose(m.encode(ids, seg, att), m.encode(ids, seg, att, token_matrix=e), atol=1e-5)
    torch.testing.assert_close(got, ref)
    assert not any(p.shape == (program.n_concepts, m.config.dim) for n, p in m.mlm.named_parameters())


@pytest.mark.parametrize("spectral", [False, True])
def test_one_composition_per_mlm_step(program, monkeypatch, spectral):
    """Matrix decoder: the matrix is built once and serves the lookup and the decoder; spectral decoder
    (the default of base): the half spectra are composed once and nothing builds the signal-domain matrix."""
    m = make(program, "base", spectral_decoder=spectral)
    calls = {"matrix": 0, "spectrum": 0}
    cls = type(m.embeddings.token)
    for name in calls:
        orig = getattr(cls, name)
        monkeypatch.setattr(
            cls, name, lambda self, _n=name, _o=orig: calls.__setitem__(_n, calls[_n] + 1) or _o(self)
        )
    ids, seg, att = batch(program)
    m(ids, seg, att, mlm_mask=att)
    assert calls == ({"matrix": 0, "spectrum": 1} if spectral else {"matrix": 1, "spectrum": 0})
    # the default: spectral where the decoder stays one matmul (base), the matrix where a table adds one
    assert make(program, "base").config.uses_spectral_decoder
    assert not any(
        make(program, m).config.uses_spectral_decoder for m in ("unstructured", "add", "cat", "freq")
    )


def test_post_layer_norm_and_padding_is_ignored(program):
    m = make(program, "unstructured").eval()
    ids, seg, att = batch(program)
    with torch.no_grad():
        h = m.encode(ids, seg, att)
        # post-LN: every output vector is LayerNorm-ed (weight 1, bias 0 at init)
        torch.testing.assert_close(h.mean(-1), torch.zeros(h.shape[:2]), atol=1e-5, rtol=0)
        ids2 = ids.clone()
        ids2[0, 6:] = 7  # change padded positions only
        h2 = m.encode(ids2, seg, att)
    torch.testing.assert_close(h[0, :6], h2[0, :6])


def test_bad_inputs(program):
    m = make(program)
    ids, seg, att = batch(program)
    with pytest.raises(ValueError, match="segment_ids shape"):
        m(ids, seg[:, :4], att, task="mortality")
    with pytest.raises(ValueError, match="exactly one"):
        m(ids, seg, att)
    with pytest.raises(ValueError, match="unknown task"):
        m(ids, seg, att, task="sepsis")
    long = torch.ones(1, 129, dtype=torch.long)
    with pytest.raises(ValueError, match="max_len 128"):
        m(long, torch.zeros_like(long), task="mortality")


@pytest.mark.parametrize("mode", ["base", "freq", "cat"])
def test_save_and_load_roundtrip(program, tmp_path, mode):
    m = make(program, mode).eval()
    m.save_pretrained(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    assert meta["program_id"] == program.program_id and meta["config"]["mode"] == mode
    with open(tmp_path / "m" / "model.safetensors", "rb") as f:
        assert program.program_id.encode() in f.read(4096)  # in the safetensors header metadata
    m2 = HRRBert.from_pretrained(tmp_path / "m", program).eval()
    ids, seg, att = batch(program)
    with torch.no_grad():
        torch.testing.assert_close(m(ids, seg, att, task="chapters"), m2(ids, seg, att, task="chapters"))
        torch.testing.assert_close(m(ids, seg, att, mlm_mask=att), m2(ids, seg, att, mlm_mask=att))


def test_load_with_other_program_names_both_ids(program, other_program, tmp_path):
    make(program).save_pretrained(tmp_path / "m")
    with pytest.raises(ProgramMismatchError) as e:
        HRRBert.from_pretrained(tmp_path / "m", other_program)
    assert program.program_id in str(e.value) and other_program.program_id in str(e.value)


def test_missing_or_corrupt_files_are_named(program, tmp_path):
    with pytest.raises(PretrainedFileError, match="config.json"):
        HRRBert.from_pretrained(tmp_path / "nothing", program)
    make(program).save_pretrained(tmp_path / "m")
    w = tmp_path / "m" / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(PretrainedFileError, match="model.safetensors"):
        HRRBert.from_pretrained(tmp_path / "m", program)
    w.unlink()
    with pytest.raises(PretrainedFileError, match="model.safetensors"):
        HRRBert.from_pretrained(tmp_path / "m", program)


@pytest.mark.parametrize("mode", MODES)
def test_eval_forward_keeps_the_state_dict_clean(program, mode):
    m = make(program, mode)
    keys = set(m.state_dict())
    ids, seg, att = batch(program)
    m.eval()
    with torch.no_grad():
        m(ids, seg, att, mlm_mask=att)
        m(ids, seg, att, task="mortality")
    assert set(m.state_dict()) == keys


def test_pad_id_is_the_programs_pad_concept_or_zero(program, other_program):
    assert make(program).pad_id == program.special_id("[PAD]")
    assert "[PAD]" not in other_program.concept_codes and make(other_program).pad_id == 0


@pytest.mark.parametrize("mode", [m for m in MODES if m != "unstructured"])
def test_spectral_decoder_gives_the_same_mlm_logits_and_gradients(program, mode):
    ids, seg, att = batch(program)
    mlm = torch.zeros_like(att)
    mlm[:, 2] = mlm[1:, 5] = True
    out = {}
    for spectral in (False, True):
        model = make(program, mode, spectral_decoder=spectral).double().eval()
        logits = model(ids, seg, att, mlm_mask=mlm)
        grads = torch.autograd.grad(logits.square().mean(), list(model.parameters()), allow_unused=True)
        out[spectral] = (logits, grads)
    torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-10, atol=1e-10)
    for a, b in zip(out[True][1], out[False][1], strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("mode", ["base", "cat"])
def test_spectral_atoms_train_the_same_function_and_save_a_plain_folder(program, tmp_path, mode):
    ids, seg, att = batch(program)
    mlm = torch.zeros_like(att)
    mlm[:, 2] = True
    plain = make(program, mode).double().eval()
    spec = make(program, mode, spectral_atoms=True, spectral_decoder=True).double().eval()
    assert spec.embeddings.token.atoms is None and spec.embeddings.token.atoms_spectrum.requires_grad
    # the same draws: the same logits at initialisation, and one optimizer's worth of gradient
    torch.testing.assert_close(spec(ids, seg, att, mlm_mask=mlm), plain(ids, seg, att, mlm_mask=mlm))
    spec(ids, seg, att, mlm_mask=mlm).square().mean().backward()
    assert float(spec.embeddings.token.atoms_spectrum.grad.abs().sum()) > 0
    # the saved folder holds signal-domain atoms under the usual keys; loading converts them back
    spec.save_pretrained(tmp_path / "m", card=False)
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "m" / "model.safetensors")
    assert "embeddings.token.atoms" in saved and not any(k.endswith("_spectrum") for k in saved)
    back = HRRBert.from_pretrained(tmp_path / "m", program).double().eval()
    assert back.config.spectral_atoms and back.embeddings.token.atoms is None
    torch.testing.assert_close(back(ids, seg, att, mlm_mask=mlm), spec(ids, seg, att, mlm_mask=mlm))
    with torch.no_grad():
        back.embeddings.token.atoms_spectrum.mul_(0)
    assert not torch.allclose(back(ids, seg, att, mlm_mask=mlm), spec(ids, seg, att, mlm_mask=mlm))


def test_cls_mean_pooling_reads_cls_plus_the_mean_of_real_positions(program):
    assert HRRBertSettings().pooling == "cls"  # BERT's, and what configs saved before the field load as
    with pytest.raises(ValueError, match="pooling must be one of"):
        preset("tiny", pooling="max")
    m = make(program, pooling="cls+mean").eval()
    ids, seg, att = batch(program)
    with torch.no_grad():
        h = m.encode(ids, seg, att)
        real = h[0, :6]  # patient 0 has 6 real positions, then padding
        torch.testing.assert_close(m.pool_states(h, att)[0], h[0, 0] + real.mean(0))
        torch.testing.assert_close(m.pool_states(h, None), h[:, 0] + h.mean(1))
        got = m(ids, seg, att, task="chapters")
        alone = m(ids[:1, :6], seg[:1, :6], att[:1, :6], task="chapters")  # the same patient, unpadded
        torch.testing.assert_close(got[:1], alone)
        plain = make(program).eval()  # same weights (same seed), cls pooling: other logits
        assert plain.config.pooling == "cls"
        torch.testing.assert_close(
            plain(ids, seg, att, task="chapters"), plain.heads(plain.encode(ids, seg, att)[:, 0], "chapters")
        )
        assert not torch.allclose(plain(ids, seg, att, task="chapters"), got)
