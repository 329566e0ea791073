"""What every stage shares: validated configuration (`config`) typed into dataclasses (`typed`),
atomic files, manifests, progress lines, job resources, the torch device, the stage runner.

Stages import from here and nowhere else in the package for these concerns, so the contract
(outputs under ``results/{run}/<stage>/``, one ``manifest.json`` per step, atomic writes, clear
errors) is implemented exactly once.
"""

from pathlib import Path


class ApertusError(Exception):
    """An error the user can fix (bad config, bad input file): printed as one line, no traceback."""


# The checkout this package runs from: the workflow, schema and config live beside the package.
REPO_ROOT = Path(__file__).resolve().parents[2]
