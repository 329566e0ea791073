"""Setuptools hook; pyproject.toml holds the project's metadata.

A wheel carries the workflow (workflow/), the default config with its presets and robots.txt
snapshot (config/) and the profiles (profiles/) as package data under apertus/_pipeline/, so
that an installed `apertus` runs the pipeline without a checkout (apertus.core.REPO_ROOT). They
are copied at build time rather than kept inside the package: the checkout's layout is
Snakemake's standard one (snakemake-workflow-catalog), and wheels cannot hold symlinks.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIPPED = ("workflow", "config", "profiles")


class BuildWithPipeline(build_py):
    def run(self):
        super().run()
        if self.editable_mode:  # an editable install runs the checkout's own files
            return
        target = Path(self.build_lib) / "apertus" / "_pipeline"
        for name in SHIPPED:
            shutil.rmtree(target / name, ignore_errors=True)
            shutil.copytree(
                HERE / name, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )


setup(cmdclass={"build_py": BuildWithPipeline})
