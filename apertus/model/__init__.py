"""The Apertus model: a dense decoder-only transformer (RECIPE §1), in torchtitan's layout.

- ``model.py``: the modules (``ApertusModel`` with its nested ``Config``, attention with QK-norm
  and Llama-3.1-scaled RoPE, the non-gated xIELU MLP, RMSNorm) and the name mapping to the
  Hugging Face ``ApertusForCausalLM`` state dict (``hf_key`` / ``apertus_key``).
- ``config_registry.py``: the flavors (``tiny``, ``debug``, ``1b``, ``8b``, ``70b``), ``flavor()``
  and ``num_params()``.
"""
