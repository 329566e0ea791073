"""Post-training (RECIPE.md §7): supervised fine-tuning on chat conversations, then QRPO.

- `instructions`: the project's small multilingual instruction set (train conversations, QRPO
  and held-out prompts with reference answers) and the readers for user conversation data;
- `sft_data`: conversations -> token rows with a completion-only loss mask (no packing), the
  file the SFT run of `apertus.train` reads through `apertus.train.sft_loader`;
- `sft`: the SFT run, the pretraining trainer of `apertus.train` on those rows;
- `rewards`: the pointwise rewards (chrF, a reward model, an LLM judge);
- `sampling`: QRPO's reference samples, their rewards and reference log-probs, and the reward
  report comparing the SFT and aligned models;
- `qrpo`: the QRPO loss; `qrpo_train`: QRPO training from the SFT weights.
"""
