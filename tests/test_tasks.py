"""posenc_ref.lab.tasks: every target is checked by a plain-Python reading of the prompt, written here."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_ref.lab.tasks import (
    BLANK,
    NUM_SPECIAL_TOKENS,
    SEPARATOR,
    TASKS,
    VERB,
    make_batch,
    vocabulary_size,
)


def rows(tensor):
    return [list(map(int, row)) for row in tensor.tolist()]


def is_symbol(token, num_symbols):
    return 3 <= token < 3 + num_symbols


SEEDS = st.integers(min_value=0, max_value=2**31)


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, length=st.integers(1, 20), num_symbols=st.integers(1, 30))
def test_copy_answer_is_the_input_before_the_separator(seed, length, num_symbols):
    batch = make_batch("copy", length, 4, rng=seed, num_symbols=num_symbols)
    for prompt, answer in zip(rows(batch.prompts), rows(batch.answers), strict=True):
        assert len(prompt) == length + 1 and prompt[-1] == SEPARATOR
        assert answer == prompt[:-1]
        assert all(is_symbol(token, num_symbols) for token in answer)


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, length=st.integers(1, 20))
def test_reverse_answer_is_the_input_read_backwards(seed, length):
    batch = make_batch("reverse", length, 4, rng=seed)
    for prompt, answer in zip(rows(batch.prompts), rows(batch.answers), strict=True):
        assert prompt[-1] == SEPARATOR
        expected = []
        for index in range(length - 1, -1, -1):
            expected.append(prompt[index])
        assert answer == expected


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, length=st.integers(3, 25), num_symbols=st.integers(2, 20))
def test_bites_answer_is_the_symbol_before_and_the_symbol_after_the_single_verb(seed, length, num_symbols):
    batch = make_batch("bites", length, 6, rng=seed, num_symbols=num_symbols)
    for prompt, answer in zip(rows(batch.prompts), rows(batch.answers), strict=True):
        assert len(prompt) == length + 1 and prompt[-1] == SEPARATOR
        sentence = prompt[:-1]
        verbs = [index for index, token in enumerate(sentence) if token == VERB]
        assert len(verbs) == 1
        verb = verbs[0]
        assert 1 <= verb <= length - 2
        assert all(is_symbol(token, num_symbols) for index, token in enumerate(sentence) if index != verb)
        agent, patient = sentence[verb - 1], sentence[verb + 1]
        assert answer == [agent, patient]
        assert agent != patient  # "man bites dog" always has another answer than "dog bites man"


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, length=st.integers(1, 16))
def test_recall_answer_is_the_value_right_after_the_asked_key(seed, length):
    batch = make_batch("recall", length, 6, rng=seed, num_symbols=16)
    for prompt, answer in zip(rows(batch.prompts), rows(batch.answers), strict=True):
        assert len(prompt) == 2 * length + 2 and prompt[-2] == SEPARATOR
        keys = [prompt[index] for index in range(0, 2 * length, 2)]
        assert len(set(keys)) == length
        asked = prompt[-1]
        assert asked in keys
        value = None
        for index in range(0, 2 * length, 2):
            if prompt[index] == asked:
                value = prompt[index + 1]
        assert answer == [value]


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, length=st.integers(1, 24))
def test_lookup_answer_is_the_value_after_the_asked_key_and_keys_and_values_never_share_a_symbol(seed, length):
    batch = make_batch("lookup", length, 6, rng=seed, num_symbols=32)
    for prompt, answer in zip(rows(batch.prompts), rows(batch.answers), strict=True):
        assert len(prompt) == 2 * length + 2 and prompt[-2] == SEPARATOR
        keys, values = prompt[0:2 * length:2], prompt[1:2 * length:2]
        assert len(set(keys)) == length
        assert all(3 <= key < 3 + 24 for key in keys) and all(3 + 24 <= value < 3 + 32 for value in values)
        asked = prompt[-1]
        assert prompt.count(asked) == 2  # as a key, and as the query: never as a value
        assert answer == [values[keys.index(asked)]]


def test_recall_lets_a_value_be_the_asked_key_and_lookup_never_does():
    def share(task):
        batch = make_batch(task, 8, 2000, rng=7, num_symbols=32)
        return sum(prompt[-1] in prompt[1:16:2] for prompt in rows(batch.prompts)) / 2000

    # P(the asked key is among 8 values drawn from 32 symbols) = 1 - (31/32)^8 = 0.224.
    assert abs(share("recall") - (1 - (31 / 32) ** 8)) < 0.03
    assert share("lookup") == 0


def test_bites_puts_the_verb_everywhere_it_may_stand_and_uses_every_symbol():
    batch = make_batch("bites", 6, 400, rng=3, num_symbols=5)
    verb_positions = {prompt.index(VERB) for prompt in rows(batch.prompts)}
    assert verb_positions == {1, 2, 3, 4}
    agents = {answer[0] for answer in rows(batch.answers)}
    assert agents == set(range(3, 8))


@pytest.mark.parametrize("task", list(TASKS))
def test_the_same_seed_gives_the_same_batch_and_another_seed_another(task):
    first = make_batch(task, 5, 8, rng=11)
    again = make_batch(task, 5, 8, rng=11)
    other = make_batch(task, 5, 8, rng=12)
    assert rows(first.prompts) == rows(again.prompts) and rows(first.answers) == rows(again.answers)
    assert rows(first.prompts) != rows(other.prompts)


def test_a_random_generator_is_advanced_so_consecutive_batches_differ_but_replay_identically():
    rng = random.Random(5)
    first, second = make_batch("copy", 6, 4, rng=rng), make_batch("copy", 6, 4, rng=rng)
    assert rows(first.prompts) != rows(second.prompts)
    replay = random.Random(5)
    assert rows(make_batch("copy", 6, 4, rng=replay).prompts) == rows(first.prompts)
    assert rows(make_batch("copy", 6, 4, rng=replay).prompts) == rows(second.prompts)


@pytest.mark.parametrize(("task", "length", "prompt", "answer"), [
    ("copy", 7, 8, 7), ("reverse", 7, 8, 7), ("bites", 7, 8, 2), ("recall", 7, 16, 1), ("lookup", 7, 16, 1),
])
def test_sizes_of_prompt_answer_and_sequence(task, length, prompt, answer):
    spec = TASKS[task]
    assert spec.prompt_size(length) == prompt and spec.answer_size(length) == answer
    assert spec.sequence_length(length) == prompt + answer
    batch = make_batch(task, length, 3, rng=0)
    assert tuple(batch.prompts.shape) == (3, prompt) and tuple(batch.answers.shape) == (3, answer)


def test_tokens_stay_inside_the_vocabulary_and_never_use_blank():
    assert vocabulary_size(10) == 13 and NUM_SPECIAL_TOKENS == 3
    for task in TASKS:
        batch = make_batch(task, 8, 16, rng=1, num_symbols=16)
        tokens = rows(batch.prompts) + rows(batch.answers)
        assert all(0 <= token < 19 and token != BLANK for row in tokens for token in row)


@pytest.mark.parametrize(("arguments", "error", "match"), [
    ({"task": "sort"}, ValueError, "task must be one of"),
    ({"task": "bites", "length": 2}, ValueError, "length must be an int >= 3"),
    ({"task": "recall", "length": 17}, ValueError, "'recall' needs length <= 16"),
    ({"task": "lookup", "length": 9}, ValueError, "'lookup' needs length <= 8"),
    ({"task": "lookup", "num_symbols": 8}, ValueError, "num_symbols must be an int >= 9"),
    ({"task": "copy", "length": 2.0}, TypeError, "length must be an int"),
    ({"task": "copy", "batch_size": 0}, ValueError, "batch_size must be an int >= 1"),
    ({"task": "copy", "num_symbols": 0}, ValueError, "num_symbols must be an int >= 1"),
    ({"task": "bites", "num_symbols": 1}, ValueError, "num_symbols must be an int >= 2"),
    ({"task": "copy", "rng": "seed"}, TypeError, "rng must be a random.Random or an int"),
])
def test_bad_arguments_are_named(arguments, error, match):
    call = {"task": "copy", "length": 4, "batch_size": 2, "rng": 0, "num_symbols": 16, **arguments}
    with pytest.raises(error, match=match):
        make_batch(call.pop("task"), call.pop("length"), call.pop("batch_size"), **call)
