"""posenc_ref.lab.train: the sequence layouts, exact match, training steps for every kind, evaluation, errors."""

import pytest
import torch
from torch import nn

from posenc_ref.attention import POSITION_KINDS
from posenc_ref.lab import train as train_module
from posenc_ref.lab.models import build_model
from posenc_ref.lab.tasks import BLANK, TASKS, TaskBatch, make_batch, vocabulary_size
from posenc_ref.lab.train import (
    TrainSettings,
    answer_logits,
    evaluate,
    exact_match,
    learning_rate_factor,
    model_inputs,
    resolve_device,
    score,
    train_model,
)

SYMBOLS = 8
VOCABULARY = vocabulary_size(SYMBOLS)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(model, position, **options):
    torch.manual_seed(0)
    return build_model(model, VOCABULARY, position, d_model=16, num_heads=2, num_layers=1, **options)


def hand_batch():
    prompts = torch.tensor([[5, 6, 7, 0], [8, 9, 10, 0]])  # (2, 4): three symbols and the separator
    answers = torch.tensor([[5, 6, 7], [8, 9, 10]])  # (2, 3)
    return TaskBatch("copy", 3, prompts, answers)


def test_decoder_reads_the_prompt_then_the_answer_without_its_last_token():
    assert model_inputs(hand_batch(), causal=True).tolist() == [[5, 6, 7, 0, 5, 6], [8, 9, 10, 0, 8, 9]]


def test_encoder_reads_the_prompt_then_one_blank_per_answer_token():
    expected = [[5, 6, 7, 0, BLANK, BLANK, BLANK], [8, 9, 10, 0, BLANK, BLANK, BLANK]]
    assert model_inputs(hand_batch(), causal=False).tolist() == expected


class PositionEcho(nn.Module):
    """Stand-in model whose logits at position t are a one-hot of t: the arg-max says which position spoke."""

    def __init__(self, causal):
        super().__init__()
        self.causal = causal

    def forward(self, tokens):
        batch, seq = tokens.shape
        return torch.eye(seq, 16).expand(batch, seq, 16)  # (batch, seq, 16)


@pytest.mark.parametrize(("causal", "positions"), [(True, [3, 4, 5]), (False, [4, 5, 6])])
def test_answer_logits_come_from_the_positions_that_predict_the_answer(causal, positions):
    logits = answer_logits(PositionEcho(causal), hand_batch())
    assert tuple(logits.shape) == (2, 3, 16)
    assert logits.argmax(dim=-1).tolist() == [positions, positions]


def test_exact_match_needs_every_answer_token_right():
    answers = torch.tensor([[1, 2], [1, 2], [3, 3]])
    predicted = torch.tensor([[1, 2], [1, 0], [0, 0]])
    logits = nn.functional.one_hot(predicted, 4).float()  # (3, 2, 4)
    assert exact_match(logits, answers).tolist() == [True, False, False]


class CopyOracle(nn.Module):
    """Stand-in encoder that solves copy by construction: slot i gets a one-hot of prompt token i."""

    causal = False

    def forward(self, tokens):
        batch, seq = tokens.shape
        length = (seq - 1) // 2
        logits = torch.zeros(batch, seq, VOCABULARY)
        for row in range(batch):
            for i in range(length):
                logits[row, length + 1 + i, tokens[row, i]] = 1.0
        return logits


class AlwaysSeparator(CopyOracle):
    def forward(self, tokens):
        logits = torch.zeros(*tokens.shape, VOCABULARY)
        logits[..., 0] = 1.0
        return logits


def test_evaluate_scores_an_oracle_one_and_a_constant_model_zero():
    assert evaluate(CopyOracle(), "copy", 6, num_examples=20, batch_size=7, num_symbols=SYMBOLS) == 1.0
    assert evaluate(AlwaysSeparator(), "copy", 6, num_examples=20, num_symbols=SYMBOLS) == 0.0


def test_evaluate_uses_the_same_examples_for_a_seed():
    model = tiny("decoder", "rope")
    first = evaluate(model, "bites", 5, num_examples=64, seed=3, num_symbols=SYMBOLS)
    assert first == evaluate(model, "bites", 5, num_examples=64, seed=3, num_symbols=SYMBOLS)


@pytest.mark.parametrize("position", list(POSITION_KINDS))
@pytest.mark.parametrize("model_kind", ["encoder", "decoder"])
def test_every_kind_trains_a_step_and_evaluates_on_longer_inputs(position, model_kind):
    task, train_length, long_length = "bites", 5, 15
    options = {"max_len": TASKS[task].sequence_length(long_length)} if position == "learned" else {}
    model = tiny(model_kind, position, **options)
    before = [parameter.detach().clone() for parameter in model.parameters()]
    settings = TrainSettings(min_length=3, max_length=train_length, max_steps=2, batch_size=8,
                             check_every=1, check_examples=8, num_symbols=SYMBOLS)
    result = train_model(model, task, settings, progress=False)
    assert result.steps in (1, 2) and result.loss == result.loss  # a number, not NaN
    changed = [not torch.equal(old, new) for old, new in zip(before, model.parameters(), strict=True)]
    assert sum(changed) >= len(changed) - 1  # every weight moves (a zero-gradient table row aside)
    accuracy = evaluate(model, task, long_length, num_examples=16, num_symbols=SYMBOLS)
    assert 0.0 <= accuracy <= 1.0


def test_learned_table_sized_for_training_fails_beyond_it_with_its_clear_error():
    train_length = 5
    model = tiny("decoder", "learned", max_len=TASKS["copy"].sequence_length(train_length))
    settings = TrainSettings(min_length=1, max_length=train_length, max_steps=1, batch_size=4,
                             num_symbols=SYMBOLS)
    train_model(model, "copy", settings, progress=False)
    assert 0.0 <= evaluate(model, "copy", train_length, num_examples=8, num_symbols=SYMBOLS) <= 1.0
    with pytest.raises(ValueError, match="a learned table has no rows beyond max_len"):
        evaluate(model, "copy", train_length + 1, num_examples=8, num_symbols=SYMBOLS)


def test_training_is_reproducible_for_a_seed():
    settings = TrainSettings(min_length=1, max_length=4, max_steps=3, batch_size=8, num_symbols=SYMBOLS)
    weights = []
    for _ in range(2):
        model = tiny("decoder", "alibi")
        train_model(model, "reverse", settings, seed=4, progress=False)
        weights.append(torch.cat([parameter.detach().flatten() for parameter in model.parameters()]))
    torch.testing.assert_close(weights[0], weights[1], rtol=0, atol=0)


def test_training_learns_a_short_copy_and_stops_at_the_target():
    model = tiny("decoder", "rope")
    settings = TrainSettings(min_length=1, max_length=2, max_steps=400, batch_size=32, learning_rate=1e-2,
                             target_accuracy=0.95, check_every=10, num_symbols=4)
    result = train_model(model, "copy", settings, progress=False)
    assert result.reached_target and result.accuracy >= 0.95 and result.steps < 400
    assert evaluate(model, "copy", 2, num_examples=200, num_symbols=4) >= 0.9


def test_progress_bar_goes_to_stderr_only_when_asked(capfd):
    settings = TrainSettings(min_length=1, max_length=3, max_steps=2, batch_size=4, num_symbols=SYMBOLS)
    train_model(tiny("encoder", "none"), "copy", settings, progress=False)
    quiet = capfd.readouterr()
    assert quiet.err == "" and quiet.out == ""
    train_model(tiny("encoder", "none"), "copy", settings, progress=True, description="copy run")
    assert "copy run" in capfd.readouterr().err


def test_resolve_device_accepts_cpu_and_auto_and_rejects_others():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device type must be one of"):
        resolve_device("meta")
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("gpu")


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"min_length": 0}, ValueError, "min_length must be an int >= 1"),
    ({"max_length": 2, "min_length": 3}, ValueError, "max_length must be an int >= 3"),
    ({"max_steps": 0}, ValueError, "max_steps"),
    ({"learning_rate": 0}, ValueError, "learning_rate must be > 0"),
    ({"target_accuracy": 0.0}, ValueError, "target_accuracy must be in"),
    ({"target_accuracy": 1.0}, ValueError, "target_accuracy must be in"),
    ({"weight_decay": -1}, ValueError, "weight_decay must be"),
    ({"check_examples": 0}, ValueError, "check_examples"),
    ({"patience": 0}, ValueError, "patience must be an int >= 1"),
    ({"schedule": "linear"}, ValueError, "schedule must be one of"),
    ({"final_learning_rate_factor": 0.0}, ValueError, "final_learning_rate_factor must be in"),
])
def test_bad_settings_are_named(options, error, match):
    with pytest.raises(error, match=match):
        TrainSettings(**{"min_length": 1, "max_length": 4, **options})


def test_training_rejects_a_length_range_the_task_does_not_allow():
    settings = TrainSettings(min_length=1, max_length=4, max_steps=1)
    with pytest.raises(ValueError, match="length must be an int >= 3"):
        train_model(tiny("decoder", "none"), "bites", settings, progress=False)
    with pytest.raises(ValueError, match="task must be one of"):
        train_model(tiny("decoder", "none"), "sort", settings, progress=False)


def test_make_batch_on_the_training_device_matches_the_model():
    batch = make_batch("copy", 3, 2, rng=0, device="cpu")
    assert batch.prompts.device.type == "cpu" and batch.prompts.dtype == torch.int64


# The stopping rule: held-out checks at every training length, patience; the schedule; per-token accuracy.

class ScriptedChecks:
    """Stand-in for the held-out check: returns the next ``{length: accuracy}`` of a script and records the
    lengths it was asked about."""

    def __init__(self, script):
        self.script, self.calls = list(script), []

    def __call__(self, model, task, settings, rng, device):
        lengths = list(range(settings.min_length, settings.max_length + 1))
        self.calls.append(lengths)
        return {length: value for length, value in zip(lengths, self.script.pop(0))}


@pytest.mark.parametrize(("script", "patience", "stops_after_check"), [
    # Every length passes from the first check: stops after `patience` checks.
    ([[1.0, 1.0, 1.0]] * 5, 1, 1),
    ([[1.0, 1.0, 1.0]] * 5, 3, 3),
    # The longest length passes while a shorter one fails: no stop until every length passes.
    ([[0.5, 1.0, 1.0], [0.5, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], 2, 4),
    # One lucky check between failures resets the count.
    ([[1.0, 1.0, 1.0], [1.0, 0.9, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], 2, 4),
])
def test_training_stops_only_after_every_length_passes_on_patience_checks_in_a_row(
        monkeypatch, script, patience, stops_after_check):
    checks = ScriptedChecks(script + [[0.0, 0.0, 0.0]] * 10)
    monkeypatch.setattr(train_module, "_held_out_check", checks)
    settings = TrainSettings(min_length=2, max_length=4, max_steps=40, batch_size=4, check_every=2,
                             patience=patience, num_symbols=SYMBOLS)
    result = train_model(tiny("decoder", "none"), "copy", settings, progress=False)
    assert result.reached_target and result.steps == 2 * stops_after_check
    assert checks.calls[0] == [2, 3, 4]
    assert result.accuracy == min(script[stops_after_check - 1])


def test_training_that_never_passes_runs_the_whole_budget_and_reports_the_lowest_length(monkeypatch):
    monkeypatch.setattr(train_module, "_held_out_check", ScriptedChecks([[1.0, 0.25, 1.0]] * 10))
    settings = TrainSettings(min_length=2, max_length=4, max_steps=10, batch_size=4, check_every=2,
                             patience=1, num_symbols=SYMBOLS)
    result = train_model(tiny("decoder", "none"), "copy", settings, progress=False)
    assert not result.reached_target and result.steps == 10 and result.accuracy == 0.25


def test_the_held_out_check_scores_every_training_length_on_its_own_examples():
    model = tiny("decoder", "none")
    settings = TrainSettings(min_length=2, max_length=5, check_examples=16, num_symbols=SYMBOLS)
    import random
    accuracies = train_module._held_out_check(model, "copy", settings, random.Random(0), torch.device("cpu"))
    assert sorted(accuracies) == [2, 3, 4, 5] and all(0 <= value <= 1 for value in accuracies.values())
    assert model.training


def test_learning_rate_factor_warms_up_then_follows_the_half_cosine():
    cosine = TrainSettings(min_length=1, max_length=2, max_steps=110, warmup_steps=10, schedule="cosine",
                           final_learning_rate_factor=0.1)
    assert [learning_rate_factor(step, cosine) for step in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    # Halfway through the decay the cosine term is 1/2: 0.1 + 0.9 * 0.5.
    assert learning_rate_factor(60, cosine) == pytest.approx(0.55)
    assert learning_rate_factor(110, cosine) == pytest.approx(0.1)
    assert learning_rate_factor(35, cosine) == pytest.approx(0.1 + 0.9 * (2 + 2 ** 0.5) / 4)  # cos(pi/4)
    constant = TrainSettings(min_length=1, max_length=2, max_steps=110, warmup_steps=10)
    assert [learning_rate_factor(step, constant) for step in (9, 60, 110)] == [1.0, 1.0, 1.0]


def test_the_optimiser_uses_the_schedule(monkeypatch):
    seen = []
    original = torch.optim.AdamW.step

    def recording_step(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    settings = TrainSettings(min_length=1, max_length=2, max_steps=6, warmup_steps=2, schedule="cosine",
                             final_learning_rate_factor=0.5, learning_rate=1.0, batch_size=2,
                             num_symbols=SYMBOLS, check_every=100)
    train_model(tiny("decoder", "none"), "copy", settings, progress=False)
    expected = [learning_rate_factor(step, settings) for step in range(6)]
    assert seen == pytest.approx(expected) and expected[1] == 1.0 and expected[-1] < 1.0


class ScriptedAnswers(nn.Module):
    """Stand-in model that answers each example by a fixed rule: right, or wrong at chosen answer slots."""

    causal = False

    def __init__(self, wrong_slots_by_row):
        super().__init__()
        self.wrong_slots_by_row = wrong_slots_by_row
        self.batch = None

    def forward(self, tokens):
        batch = self.batch
        logits = torch.nn.functional.one_hot(batch.answers, 16).float()  # (batch, answer_len, 16)
        for row, slots in enumerate(self.wrong_slots_by_row[:len(logits)]):
            for slot in slots:
                logits[row, slot] = torch.nn.functional.one_hot((batch.answers[row, slot] + 1) % 16, 16)
        prompt_len = batch.prompts.shape[1]
        padding = torch.zeros(len(logits), prompt_len, 16)
        return torch.cat((padding, logits), dim=1)  # (batch, prompt + answer, 16)


def test_score_counts_whole_answers_and_answer_tokens(monkeypatch):
    # Four copy examples of 5 tokens: one wrong at 2 slots, one wrong at 1, two right.
    # Exact match 2/4; per-token accuracy (20 - 3) / 20.
    model = ScriptedAnswers([[0, 4], [2], [], []])
    original = train_module.make_batch

    def remembered_batch(*args, **kwargs):
        model.batch = original(*args, **kwargs)
        return model.batch

    monkeypatch.setattr(train_module, "make_batch", remembered_batch)
    scores = score(model, "copy", 5, num_examples=4, num_symbols=SYMBOLS)
    assert (scores.exact_match, scores.token_accuracy, scores.examples) == (0.5, 17 / 20, 4)
    assert evaluate(model, "copy", 5, num_examples=4, num_symbols=SYMBOLS) == 0.5
