"""The training stage's math: the AdEMAMix optimizer, the Warmup-Stable-Decay learning-rate
schedule and batch-size ramp, and the loss masks (EOD transition and Goldfish)
(RECIPE.md §1-§4, §6).
"""
