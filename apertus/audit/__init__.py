"""Auditing what the pipeline produced, and explaining what it would re-run.

- :mod:`apertus.audit.checksums`: ``apertus audit PATH`` re-hashes every file a release folder's
  ``RELEASE-MANIFEST.json`` or a run directory's step manifests list, and names each mismatch.
- :mod:`apertus.audit.rerun`: ``apertus audit RUN_DIR --rerun STEP`` starts one recorded step
  again into a scratch directory and compares what it writes with what was recorded.
- :mod:`apertus.audit.explain`: ``apertus explain`` reads Snakemake's dry run and says which
  jobs a config change would re-run, and why.
- :mod:`apertus.audit.status`: ``apertus status`` says where a run stands, stage by stage.
- :mod:`apertus.audit.steps`: reading step manifests and mapping the paths they recorded onto
  the run directory as it is now (it may have moved since).
"""
