"""posenc_ref.lab.models: shapes, causality, where each position kind enters, and parameter counts."""

import math

import pytest
import torch

from posenc_ref.attention import POSITION_KINDS
from posenc_ref.lab.models import MODEL_KINDS, TinyTransformer, build_model, is_absolute

KINDS = list(POSITION_KINDS)
VOCABULARY, D_MODEL, HEADS, LAYERS = 11, 16, 2, 2


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make(position, causal, **options):
    if position == "learned":
        options.setdefault("max_len", 32)
    torch.manual_seed(0)
    return TinyTransformer(VOCABULARY, position=position, causal=causal, d_model=D_MODEL, num_heads=HEADS,
                           num_layers=LAYERS, **options).eval()


def tokens(batch, seq, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(VOCABULARY, (batch, seq), generator=generator)


def test_the_registry_holds_the_seven_kinds_of_the_course():
    assert set(KINDS) == {"none", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope"}
    assert MODEL_KINDS == {"encoder": False, "decoder": True}


@pytest.mark.parametrize("position", KINDS)
@pytest.mark.parametrize("model", ["encoder", "decoder"])
def test_every_kind_builds_both_models_with_logits_per_token(position, model):
    options = {"max_len": 12} if position == "learned" else {}
    network = build_model(model, VOCABULARY, position, d_model=D_MODEL, num_heads=HEADS, num_layers=1, **options)
    assert network.causal is (model == "decoder")
    logits = network(tokens(3, 7))
    assert tuple(logits.shape) == (3, 7, VOCABULARY)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("position", KINDS)
def test_decoder_outputs_before_a_changed_token_do_not_change(position):
    model = make(position, causal=True)
    inputs = tokens(2, 9)
    changed = inputs.clone()
    changed[:, 6] = (changed[:, 6] + 1) % VOCABULARY
    with torch.no_grad():
        before, after = model(inputs), model(changed)
    torch.testing.assert_close(before[:, :6], after[:, :6])
    assert not torch.allclose(before[:, 6:], after[:, 6:])


@pytest.mark.parametrize("position", KINDS)
def test_encoder_outputs_everywhere_depend_on_the_last_token(position):
    model = make(position, causal=False)
    inputs = tokens(2, 9)
    changed = inputs.clone()
    changed[:, -1] = (changed[:, -1] + 1) % VOCABULARY
    with torch.no_grad():
        difference = (model(inputs) - model(changed)).abs().amax(dim=(0, 2))  # (seq,)
    assert (difference > 1e-6).all()


def test_encoder_without_positions_is_permutation_equivariant_and_with_positions_is_not():
    inputs = tokens(2, 8)
    permutation = torch.tensor([3, 0, 7, 1, 6, 2, 5, 4])
    with torch.no_grad():
        for position, equivariant in (("none", True), ("sinusoidal", False), ("rope", False)):
            model = make(position, causal=False)
            permuted_output = model(inputs[:, permutation])
            output_permuted = model(inputs)[:, permutation]
            assert torch.allclose(permuted_output, output_permuted, atol=1e-5) is equivariant, position


def test_is_absolute_names_the_kinds_that_are_added_to_the_input():
    assert {kind for kind in KINDS if is_absolute(kind)} == {"sinusoidal", "learned"}
    with pytest.raises(ValueError, match="position must be one of"):
        is_absolute("xpos")


@pytest.mark.parametrize("position", KINDS)
def test_absolute_kinds_enter_once_at_the_input_and_the_others_in_every_layer(position):
    model = make(position, causal=True)
    layer_kinds = [block.attention.position_name for block in model.blocks]
    if position in ("sinusoidal", "learned"):
        assert model.input_position is not None and layer_kinds == ["none"] * LAYERS
    else:
        assert model.input_position is None and layer_kinds == [position] * LAYERS


def test_sinusoidal_model_feeds_embedding_plus_the_paper_table_to_the_first_block():
    model = make("sinusoidal", causal=False)
    inputs = tokens(1, 6)
    seen = {}
    model.blocks[0].register_forward_pre_hook(lambda module, arguments: seen.setdefault("x", arguments[0]))
    with torch.no_grad():
        model(inputs)
    table = torch.zeros(6, D_MODEL)
    for p in range(6):
        for i in range(D_MODEL // 2):
            angle = p / 10000 ** (2 * i / D_MODEL)
            table[p, 2 * i], table[p, 2 * i + 1] = math.sin(angle), math.cos(angle)
    expected = model.embedding.weight[inputs[0]] + table
    torch.testing.assert_close(seen["x"][0], expected, atol=1e-5, rtol=1e-5)


def test_token_embeddings_and_the_learned_table_start_on_one_scale():
    torch.manual_seed(0)
    model = TinyTransformer(500, position="learned", causal=True, d_model=64, max_len=500)
    embedding_std = model.embedding.weight.std().item()
    table_std = model.input_position.embedding.weight.std().item()
    assert abs(embedding_std - 1.0) < 0.05 and abs(table_std - 1.0) < 0.05


@pytest.mark.parametrize(("position", "options", "expected"), [
    ("none", {}, 0),
    ("sinusoidal", {}, 0),
    ("alibi", {}, 0),
    ("rope", {}, 0),
    ("learned", {"max_len": 30}, 30 * D_MODEL),
    ("shaw", {"max_distance": 5}, LAYERS * 2 * (2 * 5 + 1) * (D_MODEL // HEADS)),
    ("t5", {"num_buckets": 8, "max_distance": 20}, LAYERS * 8 * HEADS),
])
def test_position_parameter_count_matches_the_size_of_each_kinds_tables(position, options, expected):
    assert make(position, causal=False, **options).position_parameter_count() == expected


def test_t5_buckets_are_bidirectional_in_the_encoder_and_one_way_in_the_decoder():
    encoder, decoder = make("t5", causal=False), make("t5", causal=True)
    assert encoder.blocks[0].attention.position.bias.bidirectional is True
    assert decoder.blocks[0].attention.position.bias.bidirectional is False
    explicit = make("t5", causal=True, bidirectional=True)
    assert explicit.blocks[1].attention.position.bias.bidirectional is True


def test_learned_model_refuses_inputs_longer_than_its_table_and_names_max_len():
    model = make("learned", causal=True, max_len=10)
    model(tokens(1, 10))
    with pytest.raises(ValueError, match="max_len is 10"):
        model(tokens(1, 11))


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: make("none", True)(tokens(1, 4).float()), TypeError, "tokens must be an int64"),
    (lambda: make("none", True)(torch.full((1, 4), VOCABULARY)), ValueError, r"tokens must be ids in \[0, 11\)"),
    (lambda: make("none", True)(tokens(4, 1)[0]), ValueError, "tokens must have 2 dimensions"),
    (lambda: make("xpos", True), ValueError, "position must be one of"),
    (lambda: make("learned", True, max_len=None), TypeError, "max_len"),
    (lambda: TinyTransformer(0, position="none", causal=True), ValueError, "vocabulary_size"),
    (lambda: TinyTransformer(5, position="none", causal=1), TypeError, "causal must be a bool"),
    (lambda: TinyTransformer(5, position="none", causal=True, num_layers=0), ValueError, "num_layers"),
    (lambda: TinyTransformer(5, position="none", causal=True, d_model=10, num_heads=4), ValueError,
     "divisible by num_heads"),
    (lambda: build_model("seq2seq", 5, "none"), ValueError, "model must be one of"),
    (lambda: make("shaw", False, buckets=3), TypeError, "position='shaw'"),
])
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


# Explicit and randomized positions (Ruoss et al., 2023): absolute and rotary kinds only.


def test_explicit_positions_feed_the_paper_table_rows_at_those_positions():
    model = make("sinusoidal", causal=False)
    inputs, positions = tokens(1, 4), torch.tensor([2, 9, 10, 40])
    seen = {}
    model.blocks[0].register_forward_pre_hook(lambda module, arguments: seen.setdefault("x", arguments[0]))
    with torch.no_grad():
        model(inputs, positions)
    table = torch.zeros(4, D_MODEL)
    for row, p in enumerate(positions.tolist()):
        for i in range(D_MODEL // 2):
            angle = p / 10000 ** (2 * i / D_MODEL)
            table[row, 2 * i], table[row, 2 * i + 1] = math.sin(angle), math.cos(angle)
    torch.testing.assert_close(seen["x"][0], model.embedding.weight[inputs[0]] + table, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position", ["none", "sinusoidal", "learned", "rope"])
@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_positions_zero_to_n_minus_one_are_the_default(position, backend):
    model, inputs = make(position, causal=True, backend=backend), tokens(2, 7)
    # Explicit positions rotate with apply_rope; the fast path's own rotation may round differently.
    tolerance = 0 if backend == "reference" else 1e-5
    with torch.no_grad():
        torch.testing.assert_close(model(inputs, torch.arange(7)), model(inputs), atol=tolerance, rtol=tolerance)


def test_rope_logits_depend_on_position_differences_only():
    model, inputs = make("rope", causal=False), tokens(2, 5)
    positions = torch.tensor([0, 3, 4, 11, 12])
    with torch.no_grad():
        shifted, base = model(inputs, positions + 17), model(inputs, positions)
        stretched = model(inputs, positions * 2)
    torch.testing.assert_close(shifted, base, atol=1e-4, rtol=1e-4)
    assert (stretched - base).abs().max() > 1e-2  # other gaps, other logits


@pytest.mark.parametrize("position", ["shaw", "t5", "alibi"])
def test_relative_kinds_refuse_explicit_and_random_positions(position):
    with pytest.raises(ValueError, match="takes no explicit positions"):
        make(position, causal=True)(tokens(1, 4), torch.tensor([0, 2, 4, 6]))
    with pytest.raises(ValueError, match="random_positions needs a kind that takes explicit positions"):
        make(position, causal=True, random_positions=32)


def test_random_positions_are_a_fresh_sorted_subset_of_the_range_at_every_pass():
    model = make("rope", causal=True, random_positions=40)
    torch.manual_seed(3)
    draws = [model.draw_positions(10) for _ in range(50)]
    for draw in draws:
        assert draw.dtype == torch.int64 and draw.shape == (10,)
        assert (draw[1:] > draw[:-1]).all() and 0 <= int(draw[0]) and int(draw[-1]) < 40
    assert len({tuple(draw.tolist()) for draw in draws}) == 50
    assert max(int(draw[-1]) for draw in draws) >= 35  # the whole range is used, not 0 .. 9
    inputs = tokens(2, 10)
    with torch.no_grad():
        torch.manual_seed(0)
        first = model(inputs)
        torch.manual_seed(0)
        again = model(inputs)
        different = model(inputs)
    torch.testing.assert_close(first, again, atol=0, rtol=0)  # torch's generator decides the draw
    assert (different - first).abs().max() > 1e-4


def test_random_positions_range_is_checked():
    with pytest.raises(ValueError, match="max_len >= 64"):
        make("learned", causal=True, random_positions=64, max_len=32)
    model = make("learned", causal=True, random_positions=8, max_len=8)
    with pytest.raises(ValueError, match="random_positions=8"):
        model(tokens(1, 9))
    with pytest.raises(ValueError, match="positions reach 40"):
        make("learned", causal=True)(tokens(1, 3), torch.tensor([0, 1, 40]))
    with pytest.raises(ValueError, match="without random_positions"):
        make("rope", causal=True).draw_positions(3)
