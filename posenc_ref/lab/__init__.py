"""Chapter 6's laboratory: tiny transformers trained on synthetic tasks, and the studies run with them.

- :mod:`~posenc_ref.lab.tasks`: the synthetic tasks, generated on the fly from a seed;
- :mod:`~posenc_ref.lab.models`: the tiny encoders and decoders, with any position kind;
- :mod:`~posenc_ref.lab.train`: training, the stopping rule, exact match and per-token accuracy;
- :mod:`~posenc_ref.lab.sweep`: a grid of independent runs that survives interruption, with its provenance;
- :mod:`~posenc_ref.lab.settings`: the grid and budget of the length-generalization study, and the settings
  the book runs;
- :mod:`~posenc_ref.lab.results`: that study's ``results.csv``, its tables and plots;
- :mod:`~posenc_ref.lab.length_generalization`: the study itself, train short and test long, as a sweep;
- :mod:`~posenc_ref.lab.extension`: chapter 5's context-extension rules applied to the study's trained rotary
  decoders;
- :mod:`~posenc_ref.lab.fit_tuning` and :mod:`~posenc_ref.lab.recipe_search`: the study's unfitted cells under
  one change of budget at a time, and each kind's training recipe chosen inside the training range;
- :mod:`~posenc_ref.lab.attention_maps`: a trained model's attention maps and their entropy;
- :mod:`~posenc_ref.lab.evidence`: intervals over seeds and the ranking sentences they support;
- :mod:`~posenc_ref.lab.cli` (run as ``python -m posenc_ref.lab``): the command line of the two studies.

Data flows one way, in the order of this list: tasks and models -> train -> the studies (sweep, settings,
results, length generalization, context extension, the searches for a budget) -> attention maps and evidence -> the command line. A
module imports only modules before it in that order, never one after it, so that the imports form no
circle; this file imports none of them, and nothing else in ``posenc_ref`` imports the lab
(``tests/test_lab_layout.py`` checks all three).
"""
