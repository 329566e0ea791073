"""The tokenization stage: tokenizer, token shards, held-out split, data phases
(RECIPE.md §1, §5).
"""
