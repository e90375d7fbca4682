"""posenc_ref.lab.attention_maps: maps are the softmax the layers compute; entropy against closed forms."""

import math

import pytest
import torch

from posenc_ref.lab.attention_maps import attention_entropy, attention_maps, entropy_by_length
from posenc_ref.lab.models import TinyTransformer
from posenc_ref.relative import alibi_slopes

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make(position, causal, **options):
    torch.manual_seed(0)
    if position == "learned":
        options.setdefault("max_len", 64)
    return TinyTransformer(20, position=position, causal=causal, d_model=16, num_heads=4, num_layers=2, **options)


@pytest.mark.parametrize("position", ["none", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope"])
@pytest.mark.parametrize("causal", [False, True])
def test_maps_are_distributions_over_the_visible_keys(position, causal):
    model = make(position, causal)
    tokens = torch.randint(20, (3, 9), generator=torch.Generator().manual_seed(1))
    maps = attention_maps(model, tokens)
    assert maps.shape == (2, 3, 4, 9, 9)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 3, 4, 9))
    if causal:
        assert (maps.triu(diagonal=1) == 0).all()


def test_alibi_maps_with_blind_queries_are_the_closed_form_penalty():
    # Zero query and key weights: the logits are ALiBi's bias alone, -m_h (i - j) for j <= i.
    model = make("alibi", causal=True)
    for block in model.blocks:
        for projection in (block.attention.query, block.attention.key):
            torch.nn.init.zeros_(projection.weight)
            torch.nn.init.zeros_(projection.bias)
    maps = attention_maps(model, torch.zeros(1, 6, dtype=torch.int64))
    slopes = alibi_slopes(4).tolist()
    for head, slope in enumerate(slopes):
        for i in range(6):
            weights = [math.exp(-slope * (i - j)) for j in range(i + 1)]
            expected = [w / sum(weights) for w in weights] + [0.0] * (5 - i)
            torch.testing.assert_close(maps[:, 0, head, i], torch.tensor([expected, expected]), atol=1e-6,
                                       rtol=1e-5)


def test_identical_tokens_without_positions_spread_evenly():
    model = make("none", causal=False)
    tokens = torch.full((1, 7), 3, dtype=torch.int64)
    entropy = attention_entropy(attention_maps(model, tokens))
    torch.testing.assert_close(entropy, torch.full_like(entropy, math.log(7)))


def test_entropy_of_known_rows():
    weights = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.25, 0.25, 0.5]])
    expected = torch.tensor([0.0, math.log(2), 1.5 * math.log(2)])
    torch.testing.assert_close(attention_entropy(weights), expected)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        attention_entropy(torch.ones(3))


def test_randomized_models_map_the_draw_their_forward_pass_used():
    model = make("rope", causal=True, random_positions=40)
    tokens = torch.randint(20, (2, 8), generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([1, 5, 6, 9, 20, 21, 30, 39])
    first, second = attention_maps(model, tokens, positions=positions), attention_maps(model, tokens,
                                                                                          positions=positions)
    torch.testing.assert_close(first, second, atol=0, rtol=0)
    torch.testing.assert_close(attention_maps(model, tokens, positions=positions + 100)[0], first[0], atol=1e-5,
                               rtol=1e-5)  # rotary: only the gaps matter


def test_entropy_by_length_reports_the_uniform_reference():
    model = make("alibi", causal=True)
    result = entropy_by_length(model, "copy", [3, 6], num_examples=4)
    for length, values in result.items():
        seq = 2 * length + 1 - 1  # copy: the sentence, the separator, the answer slots minus the last one
        assert values["uniform"] == pytest.approx(sum(math.log(i + 1) for i in range(seq)) / seq)
        assert 0.0 < values["entropy"] <= values["uniform"] + 1e-6
    with pytest.raises(ValueError, match="lengths"):
        entropy_by_length(model, "copy", [])
