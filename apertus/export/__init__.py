"""The export stage: a trained checkpoint as a Hugging Face folder (``hf``), checked by a
verification card (``verify``); ``stage`` is the entry point the workflow calls."""
