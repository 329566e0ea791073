"""``python -m apertus.rehearsal DIR``: write the rehearsal's local stand-ins under DIR (the
overlays in config/rehearsal/ read them from ``rehearsal-inputs/``): the preset's Hub data
sources in their own formats (`apertus.rehearsal.data`), and its tokenizer, GlotLID, XLM-R,
reward model, judge, instruction data and lm-eval tasks (`apertus.rehearsal.models`).
Deterministic: the same DIR contents on every machine, without the network."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from apertus.core import ApertusError
from apertus.rehearsal import data, models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apertus.rehearsal", description=__doc__)
    parser.add_argument("out", type=Path, help="folder to write (e.g. rehearsal-inputs)")
    args = parser.parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        data.build(args.out)
        models.build(args.out)
    except (ApertusError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"rehearsal stand-ins written under {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
