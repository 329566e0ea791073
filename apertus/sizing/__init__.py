"""Sizing a run before it runs (`apertus plan`): every GPU job of the DAG with its layout, peak
memory per GPU by part, FLOPs, throughput, wall-clock, GPU-hours and checkpoints.

- ``memory.py``: the memory formulas (no torch), from the model's shape and a job's layout.
- ``jobs.py``: the jobs of a config and their figures (`run_plan`), and the fit check that
  `apertus config check` runs (`fit_problems`).
- ``render.py``: the terminal table.

It reads every stage's config section, as `apertus.plan_check` does, and lives beside it above
the stages' packages; nothing below imports it.
"""
