"""The parameters of each position kind: names, defaults, and the errors for bad values."""

from __future__ import annotations

import pytest
import torch

from posenc_ref.fast.params import POSITION_PARAMS, resolve_query_offset, validate_position_params

HEADS, HEAD_DIM = 4, 8
Q = torch.zeros(2, HEADS, 3, HEAD_DIM)
K = torch.zeros(2, HEADS, 5, HEAD_DIM)


def valid_params(position: str) -> dict:
    return {
        "none": {},
        "rope": {"inv_freq": torch.ones(HEAD_DIM // 2)},
        "alibi": {"slopes": torch.ones(HEADS)},
        "t5": {"bias_table": torch.zeros(32, HEADS)},
        "shaw": {"rel_k_table": torch.zeros(5, HEAD_DIM), "rel_v_table": torch.zeros(5, HEAD_DIM)},
    }[position]


def test_position_params_lists_every_kind_of_the_contract():
    assert set(POSITION_PARAMS) == {"none", "rope", "alibi", "t5", "shaw"}
    assert POSITION_PARAMS["shaw"].required == ("rel_k_table", "rel_v_table")
    assert POSITION_PARAMS["rope"].optional == {"layout": "interleaved", "attention_factor": 1.0}
    assert POSITION_PARAMS["t5"].optional == {"bidirectional": True, "max_distance": 128}


@pytest.mark.parametrize("position", list(POSITION_PARAMS))
def test_validate_fills_every_default_and_keeps_given_values(position):
    given = valid_params(position)
    filled = validate_position_params(position, dict(given), q=Q, k=K)
    assert set(filled) == set(POSITION_PARAMS[position].allowed)
    for name, value in given.items():
        assert filled[name] is value
    for name, default in POSITION_PARAMS[position].optional.items():
        assert filled[name] == default


def test_validate_keeps_an_explicit_optional_value():
    filled = validate_position_params("rope", {"inv_freq": torch.ones(4), "layout": "half"}, q=Q, k=K)
    assert filled["layout"] == "half"


@pytest.mark.parametrize("position", list(POSITION_PARAMS))
def test_unknown_parameter_is_named(position):
    with pytest.raises(ValueError, match="unknown parameter.*bogus"):
        validate_position_params(position, {**valid_params(position), "bogus": 1}, q=Q, k=K)


@pytest.mark.parametrize("position", ["rope", "alibi", "t5", "shaw"])
def test_missing_required_parameter_is_named(position):
    required = POSITION_PARAMS[position].required
    params = valid_params(position)
    del params[required[-1]]
    with pytest.raises(ValueError, match=f"requires parameter.*{required[-1]}"):
        validate_position_params(position, params, q=Q, k=K)


def test_unknown_position_is_named():
    with pytest.raises(ValueError, match="position must be one of"):
        validate_position_params("sinusoidal", {}, q=Q, k=K)


@pytest.mark.parametrize(
    ("position", "params", "error", "message"),
    [
        ("rope", {"inv_freq": torch.ones(3)}, ValueError, r"inv_freq must have shape \(4,\)"),
        ("rope", {"inv_freq": torch.ones(4, dtype=torch.int64)}, TypeError, "inv_freq must have a floating"),
        ("rope", {"inv_freq": torch.ones(4), "layout": "neox"}, ValueError, "layout must be one of"),
        ("rope", {"inv_freq": torch.ones(4), "attention_factor": 0.0}, ValueError, "attention_factor"),
        ("rope", {"inv_freq": torch.ones(4, device="meta")}, ValueError, "inv_freq is on meta"),
        ("alibi", {"slopes": torch.ones(HEADS + 1)}, ValueError, r"slopes must have shape \(4,\)"),
        ("alibi", {"slopes": [0.5] * HEADS}, TypeError, "slopes must be a torch.Tensor"),
        ("t5", {"bias_table": torch.zeros(32, HEADS + 1)}, ValueError, "bias_table must have shape"),
        ("t5", {"bias_table": torch.zeros(31, HEADS)}, ValueError, "num_buckets"),
        ("t5", {"bias_table": torch.zeros(32, HEADS), "max_distance": 4}, ValueError, "max_distance"),
        ("t5", {"bias_table": torch.zeros(32, HEADS), "bidirectional": 1}, TypeError, "bidirectional"),
        ("shaw", {"rel_k_table": torch.zeros(4, HEAD_DIM), "rel_v_table": torch.zeros(4, HEAD_DIM)},
         ValueError, "rel_k_table must have shape .2k\\+1"),
        ("shaw", {"rel_k_table": torch.zeros(5, HEAD_DIM), "rel_v_table": torch.zeros(5, HEAD_DIM + 2)},
         ValueError, "rel_v_table must have shape"),
        ("shaw", {"rel_k_table": torch.zeros(5, HEAD_DIM), "rel_v_table": torch.zeros(7, HEAD_DIM)},
         ValueError, "same shape"),
        ("shaw", {"rel_k_table": torch.zeros(5, HEAD_DIM, dtype=torch.float64),
                  "rel_v_table": torch.zeros(5, HEAD_DIM)}, TypeError, "rel_k_table has dtype"),
    ],
)
def test_bad_parameter_value_raises_naming_it(position, params, error, message):
    with pytest.raises(error, match=message):
        validate_position_params(position, params, q=Q, k=K)


def test_rope_with_odd_head_dim_is_rejected():
    q = torch.zeros(1, HEADS, 3, 7)
    with pytest.raises(ValueError, match="even head_dim"):
        validate_position_params("rope", {"inv_freq": torch.ones(3)}, q=q, k=q)


@pytest.mark.parametrize(("q_len", "k_len", "offset", "expected"), [(3, 5, None, 2), (4, 4, None, 0), (3, 5, 7, 7)])
def test_resolve_query_offset_puts_queries_last_unless_given(q_len, k_len, offset, expected):
    assert resolve_query_offset(q_len, k_len, offset) == expected


@pytest.mark.parametrize(
    ("q_len", "k_len", "offset", "error", "message"),
    [(5, 3, None, ValueError, "query_offset"), (3, 5, -1, ValueError, "query_offset"),
     (3, 5, 1.0, TypeError, "query_offset"), (0, 5, None, ValueError, "q_len")],
)
def test_resolve_query_offset_rejects_bad_input(q_len, k_len, offset, error, message):
    with pytest.raises(error, match=message):
        resolve_query_offset(q_len, k_len, offset)
