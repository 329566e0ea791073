"""The report stage: figures (apertus.report.figures) and tables (apertus.report.tables, rendered
by apertus.report.html) for `snakemake --report`, made by the steps of apertus.report.steps; and
the README's diagram of the workflow (apertus.report.rulegraph)."""
