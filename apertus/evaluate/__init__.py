"""The evaluation stage: lm-evaluation-harness 0.4.13 on exported Hugging Face models
(RECIPE.md §8).

- ``tasks``: lm-eval tasks built from the project's own held-out documents: a multilingual
  continuation cloze (``apertus_mc_<lang>``, group ``apertus_mc``) and per-language perplexity
  (``apertus_ppl_<lang>``, group ``apertus_ppl``), from the YAML templates in ``task_templates/``.
- ``lmeval``: one model folder through ``lm_eval.simple_evaluate`` with a configured suite, writing
  lm-eval's results JSON and the ``lm_eval`` command line that reproduces them.
- ``memorization``: how much of each planted probe a model reproduces, per exposure count.
- ``table``: one table (CSV, Markdown) and plot across checkpoints.
- ``stage``: the entry points of workflow/rules/evaluate.smk.
"""
