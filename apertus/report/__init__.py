"""The report stage: figures and tables for `snakemake --report` (apertus.report.steps), and
the README's diagram of the workflow (apertus.report.rulegraph)."""
