"""Training on torchtitan: pretraining, long-context stages, SFT and QRPO (RECIPE.md §1-§7).

Laid out like torchtitan's ``components/``; from the stage config to the running trainer:
- ``config.py``: the ``pretrain:`` section, typed (``apertus.core.typed``);
- ``plan.py``: which pretraining stage follows which and how it continues (the Snakefile and
  ``stage.py`` both read it); ``stage.py``: the pretraining stage's entry point, which builds a
  ``RunSpec`` per stage and runs it (``train_and_record``, shared with SFT and QRPO);
- ``run_spec.py``: the typed run spec (spec.json) and the checks before any rank starts;
- ``launch.py`` (+ ``slurm.py``): torchrun, locally or across SLURM nodes;
- ``config_registry.py``: the torchtitan entry module, run spec -> ``Trainer.Config``;
- the components: ``dataloader.py`` (pretraining windows with the EOD and Goldfish masks),
  ``sft_loader.py``, ``qrpo_loader.py`` and ``qrpo_loss.py`` (QRPO's rows and its loss over
  completions), ``pretokenized.py`` (what the loaders share), ``optimizer.py``,
  ``lr_scheduler.py``, ``metrics.py``, ``checkpoint.py``, ``early_stop.py``, ``trainer.py``,
  ``cpu_workarounds.py``;
- the math, each formula in one function: ``ademamix.py``, ``schedule.py`` (WSD, batch ramp),
  ``goldfish.py`` (the loss masks).
"""
