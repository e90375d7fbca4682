"""posenc_ref.lab.extension: the scaling rules applied to trained decoders, and the resumable study."""

import csv
import dataclasses
import json
import math

import pytest
import torch

from posenc_ref.lab.cli import main
from posenc_ref.lab.extension import (
    EXTENSION_METHODS,
    ExtensionSettings,
    model_input_length,
    rope_extension,
    run_context_extension,
    with_rope_extension,
)
from posenc_ref.lab.length_generalization import load_trained_model, run_length_generalization
from posenc_ref.lab.models import TinyTransformer
from posenc_ref.lab.settings import QUICK_SETTINGS, Run

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rope_model():
    torch.manual_seed(0)
    return TinyTransformer(20, position="rope", causal=True, d_model=32, num_heads=4, num_layers=2).eval()


def frequencies(model, seq_len):
    return model.blocks[0].attention.position.attention_params(seq_len)["inv_freq"].double()


def test_each_rule_changes_the_frequencies_as_its_formula_says():
    model, head_dim, s = rope_model(), 8, 2.5
    trained = torch.tensor([10000.0 ** (-2 * i / head_dim) for i in range(head_dim // 2)], dtype=torch.float64)
    none = with_rope_extension(model, "none", factor=s, original_length=10)
    torch.testing.assert_close(frequencies(none, 25), trained, rtol=1e-6, atol=0)
    pi = with_rope_extension(model, "pi", factor=s, original_length=10)
    torch.testing.assert_close(frequencies(pi, 25), trained / s, rtol=1e-6, atol=0)
    ntk = with_rope_extension(model, "ntk", factor=s, original_length=10)
    divided = torch.tensor([s ** (2 * i / (head_dim - 2)) for i in range(head_dim // 2)], dtype=torch.float64)
    torch.testing.assert_close(frequencies(ntk, 25), trained / divided, rtol=1e-6, atol=0)
    dynamic = with_rope_extension(model, "dynamic", factor=s, original_length=10)
    torch.testing.assert_close(frequencies(dynamic, 10), trained, rtol=1e-6, atol=0)  # unchanged up to L'
    at_25 = torch.tensor([(10000.0 * 2.5 ** (head_dim / (head_dim - 2))) ** (-2 * i / head_dim)
                          for i in range(head_dim // 2)], dtype=torch.float64)
    torch.testing.assert_close(frequencies(dynamic, 25), at_25, rtol=1e-6, atol=0)
    yarn = with_rope_extension(model, "yarn", factor=s, original_length=10)
    params = yarn.blocks[0].attention.position.attention_params(25)
    assert params["attention_factor"] == pytest.approx(0.1 * math.log(s) + 1)
    assert (params["inv_freq"].double() <= trained * (1 + 1e-6)).all()
    assert (params["inv_freq"].double() >= trained / s * (1 - 1e-6)).all()


def test_the_copy_keeps_the_weights_and_leaves_the_original_alone():
    model = rope_model()
    tokens = torch.randint(20, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(tokens)
        unchanged = with_rope_extension(model, "none", factor=2, original_length=6)(tokens)
        interpolated = with_rope_extension(model, "pi", factor=2, original_length=6)(tokens)
    torch.testing.assert_close(unchanged, before, atol=0, rtol=0)
    assert (interpolated - before).abs().max() > 1e-3
    torch.testing.assert_close(model(tokens).detach(), before, atol=0, rtol=0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="method"):
        rope_extension("xpos", factor=2, original_length=8, head_dim=8)
    with pytest.raises(ValueError, match="factor"):
        rope_extension("pi", factor=0.5, original_length=8, head_dim=8)
    torch.manual_seed(0)
    alibi = TinyTransformer(20, position="alibi", causal=True, d_model=16, num_heads=2)
    with pytest.raises(ValueError, match="rotary models"):
        with_rope_extension(alibi, "pi", factor=2, original_length=8)
    with pytest.raises(ValueError, match="factors"):
        ExtensionSettings(factors=(1,))
    with pytest.raises(ValueError, match="references"):
        ExtensionSettings(references=("rope",))


def test_model_input_length_is_what_the_decoder_reads():
    assert model_input_length("bites", 8, causal=True) == 8 + 1 + 2 - 1
    assert model_input_length("copy", 5, causal=False) == 5 + 1 + 5


SWEEP = dataclasses.replace(QUICK_SETTINGS, positions=("none", "alibi", "rope"), models=("decoder",), tasks=("bites",),
                            seeds=(0,), max_steps=40, eval_examples=32, eval_lengths=(4, 8, 16), min_train_length=8)


def test_the_study_reads_the_sweep_models_and_scores_every_rule(tmp_path):
    sweep_rows = run_length_generalization(SWEEP, out_dir=tmp_path / "sweep", progress=False, verbose=False,
                                           plots=False, save_models=True)
    loaded = load_trained_model(tmp_path / "sweep", SWEEP, Run("bites", "decoder", "rope", False, 0))
    assert isinstance(loaded, TinyTransformer) and not loaded.training
    extension = ExtensionSettings(factors=(2,), finetune_steps=3)
    rows = run_context_extension(SWEEP, models_dir=tmp_path / "sweep", out_dir=tmp_path / "ext",
                                 extension=extension, progress=False)
    keys = {(row["position"], row["method"], row["finetuned"], row["length"]) for row in rows}
    expected = {("rope", method, finetuned, length) for method in EXTENSION_METHODS
                for finetuned in (False, True) for length in (8, 16)}
    expected |= {(kind, "none", finetuned, length) for kind in ("alibi", "none")
                 for finetuned in (False, True) for length in (8, 16)}
    assert keys == expected and len(rows) == len(expected)
    # Unscaled and not fine-tuned, each decoder scores what the sweep measured, on the same examples.
    for row in rows:
        if row["method"] == "none" and not row["finetuned"]:
            measured = next(r for r in sweep_rows if r["position"] == row["position"] and r["length"] == row["length"])
            assert row["accuracy"] == measured["accuracy"]
    with open(tmp_path / "ext" / "extension.csv", newline="") as file:
        assert len(list(csv.DictReader(file))) == len(rows)
    provenance = json.loads((tmp_path / "ext" / "provenance.json").read_text())
    assert [entry["runs_computed"] for entry in provenance["invocations"]] == [3]  # rope, alibi, none: one entry
    assert provenance["settings"]["extension"]["factors"] == [2]


def test_the_command_line_reads_the_sweep_settings(tmp_path, capsys):
    main(["length-generalization", "--quick", "--device", "cpu", "--positions", "none,alibi,rope",
          "--models", "decoder", "--max-steps", "2", "--eval-examples", "4", "--no-progress", "--jobs", "1",
          "--save-models", "--out", str(tmp_path / "sweep")])
    rows = main(["context-extension", "--models", str(tmp_path / "sweep"), "--out", str(tmp_path / "ext"),
                 "--factors", "2", "--finetune-steps", "1", "--device", "cpu", "--jobs", "1", "--no-progress"])
    assert {row["factor"] for row in rows} == {2} and "extension.csv" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["context-extension", "--models", str(tmp_path / "nothing"), "--out", str(tmp_path / "ext2")])


def test_a_run_without_saved_weights_is_trained_again_to_the_same_model(tmp_path):
    settings = dataclasses.replace(SWEEP, positions=("rope",), max_steps=30)
    rows = run_length_generalization(settings, out_dir=tmp_path, progress=False, verbose=False, plots=False,
                                     save_models=True)
    run = Run("bites", "decoder", "rope", False, 0)
    saved = load_trained_model(tmp_path, settings, run).state_dict()
    (tmp_path / "runs" / f"{run.key}.pt").unlink()
    with pytest.raises(FileNotFoundError, match="save_models"):
        load_trained_model(tmp_path, settings, run)
    again = load_trained_model(tmp_path, settings, run, retrain=True).state_dict()
    for name, tensor in saved.items():
        torch.testing.assert_close(again[name], tensor, atol=0, rtol=0)
    assert rows  # the sweep's results are untouched
