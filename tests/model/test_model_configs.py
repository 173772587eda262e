"""The config behaviour every model shares (model/common.py): dict round trip, unknown keys, sizes."""

from __future__ import annotations

import pytest

from model import Doctor2VecConfig, HRRBertSettings, MemN2NConfig, MemNNConfig, VisitTransformerConfig

CONFIGS = [
    (HRRBertSettings, {}, "n_layers"),
    (MemN2NConfig, {"n_words": 5, "n_codes": 4, "n_answers": 3}, "max_question_len"),
    (MemNNConfig, {"n_words": 5, "n_codes": 4, "n_answers": 3}, "hops"),
    (VisitTransformerConfig, {"n_codes": 9}, "ffn_dim"),
    (Doctor2VecConfig, {"n_codes": 9, "n_words": 4}, "hidden"),
]


@pytest.mark.parametrize(("cls", "required", "size"), CONFIGS)
def test_config_round_trips_and_refuses_unknown_keys_and_sizes_below_one(cls, required, size):
    cfg = cls(**required)
    assert cls.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match=rf"unknown {cls.__name__} key\(s\) \['bogus'\]"):
        cls.from_dict({**cfg.to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match=rf"{size} must be >= 1, got 0"):
        cls(**{**required, size: 0})
