#!/usr/bin/env bash
# The README quickstart. Sets up the project's virtual environment (.venv, once, and again
# whenever pyproject.toml changes), then
#   bash workflow/quickstart.sh run   [snakemake args]   runs the whole pipeline on the embedded default
#   bash workflow/quickstart.sh test  [pytest args]      runs the test suite
# Environment: PYTHON (interpreter to build .venv from, default python3.11 or python3),
# APERTUS_VENV (where the environment lives, default .venv).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,8s/^# \{0,1\}//p' "$0" >&2; }
what=${1:-}
case "$what" in
  run | test) shift ;;
  *) usage; exit 2 ;;
esac

venv=${APERTUS_VENV:-.venv}
stamp="$venv/.apertus-installed"
want=$(sha256sum pyproject.toml | cut -d' ' -f1)

if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python=${PYTHON:-$(command -v python3.11 || command -v python3 || true)}
  if [ -z "$python" ] || ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "error: Python 3.11 is required; set PYTHON=/path/to/python3.11" >&2
    exit 1
  fi
  echo "setting up $venv with $python (first run takes a few minutes)" >&2
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  # torch first and pinned, so that a machine carrying the CPU wheel takes it and pip never
  # pulls the newest CUDA build; then the project with its test tools and the packages of
  # lm-eval's instruct tasks (IFEval, MATH, RULER), which the rehearsal's tests run.
  torch=$(grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')
  "$venv/bin/python" -m pip install --quiet "$torch"
  "$venv/bin/python" -m pip install --quiet -e ".[test,instruct-eval]"
  echo "$want" >"$stamp"
fi

# The tests marked `slurm` start a one-node SLURM cluster (profiles/slurm-local/cluster.sh);
# as root, install its Debian packages when they are missing (else those tests are skipped).
if [ "$what" = test ] && [ "$(id -u)" = 0 ] && ! command -v slurmctld >/dev/null; then
  bash profiles/slurm-local/cluster.sh install ||
    echo "warning: slurm-wlm and munge could not be installed; the SLURM tests will skip" >&2
fi

# The report tests open the HTML report in headless Chromium (tests/report/browser.py); as root,
# install Debian's chromium when it is missing (else those tests are skipped).
if [ "$what" = test ] && [ "$(id -u)" = 0 ] && ! command -v chromium >/dev/null; then
  install=(apt-get install -y -q --no-install-recommends chromium)
  # A fresh machine may have no package lists yet: update once and retry.
  { DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null; }; } ||
    echo "warning: chromium could not be installed; the browser tests will skip" >&2
fi

# Byte-compile the package (after the first time, only changed files): where
# PYTHONDONTWRITEBYTECODE is set, Python writes no .pyc files and compiles the modules it imports
# again in every process: each pipeline step, SLURM job and test subprocess.
"$venv/bin/python" -m compileall -q apertus >/dev/null || true

export PATH="$(cd "$venv" && pwd)/bin:$PATH"
case "$what" in
  # Through `apertus run`: dotted --config keys, which Snakemake refuses with a traceback, are
  # named first (the config itself is checked by the workflow, as with plain `snakemake`).
  run) exec python -m apertus run -- "$@" ;;
  test) exec python -m pytest "$@" ;;
esac
