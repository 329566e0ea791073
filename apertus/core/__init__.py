"""What every stage shares: validated configuration (`config`) typed into dataclasses (`typed`),
atomic files, manifests, progress lines, job resources, the torch device, the stage runner.

Stages import from here and nowhere else in the package for these concerns, so the contract
(outputs under ``results/{run}/<stage>/``, one ``manifest.json`` per step, atomic writes, clear
errors) is implemented exactly once.
"""

from pathlib import Path


class ApertusError(Exception):
    """An error the user can fix (bad config, bad input file): printed as one line, no traceback."""


# Where the workflow (workflow/), the default config and presets (config/) and the profiles
# (profiles/) live: beside the package in a checkout; inside it (apertus/_pipeline/, copied by
# setup.py at build time) when installed from a wheel.
_PACKAGE = Path(__file__).resolve().parents[1]
REPO_ROOT = (
    _PACKAGE.parent
    if (_PACKAGE.parent / "workflow" / "Snakefile").is_file()
    else _PACKAGE / "_pipeline"
)
