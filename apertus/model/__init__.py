"""The Apertus model: a dense decoder-only transformer (RECIPE §1), in torchtitan's layout
(``torchtitan/models/llama3/``).

- ``model.py``: the modules (``ApertusModel`` with its nested ``Config``, attention with QK-norm
  and Llama-3.1-scaled RoPE, the non-gated xIELU MLP, RMSNorm).
- ``flavors.py``: the shapes (``tiny``, ``debug``, ``1b``, ``8b``, ``70b``), ``flavor()`` and
  ``num_params()``.
- ``parallelize.py``: tensor parallelism, activation checkpointing, compile and FSDP2, and the
  world-size-invariant initial weights on the CPU.
- ``state_dict_adapter.py``: the one key map to and from Hugging Face's ``ApertusForCausalLM``,
  its ``config.json`` and our state dict under its keys (used by export and the tests).
- ``spec.py``: ``model_spec()``, the torchtitan ``ModelSpec`` of a flavor.
"""
