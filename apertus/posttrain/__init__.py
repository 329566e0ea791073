"""Post-training (RECIPE.md §7): supervised fine-tuning on chat conversations, then QRPO.

- `instructions`: the project's small multilingual instruction set (train conversations, QRPO
  and held-out prompts with reference answers) and the readers for user conversation data;
- `sft_data`: conversations -> token rows with a completion-only loss mask (no packing), the
  file the SFT run of `apertus.train` reads through `apertus.train.sft_loader`;
- `sampling`, `rewards`, `qrpo`, `training`: reference samples, rewards and the QRPO stage.
"""
