"""Entry points of the tokenization stage, one per rule of workflow/rules/tokenize.smk:

python -m apertus.tokenize.steps STEP --config JSON --manifest M --output PATH [inputs]

split      --corpus DIR                            held-out ids per language
tokenizer  --corpus DIR --heldout IDS              train (or fetch and check) the tokenizer
heldout    --corpus DIR --heldout IDS --tokenizer DIR          held-out texts per language
shards     --corpus DIR --heldout IDS --tokenizer DIR --source NAME   token shards
phase      --name PHASE --shards SOURCE=DIR ...    verify shards, build the phase index
"""

from __future__ import annotations

import json
from pathlib import Path

from apertus.core import ApertusError
from apertus.core.stage import StepRun, run_main, stage_parser


def _ids(path: Path) -> set[str]:
    return {i for ids in json.loads(Path(path).read_text())["ids"].values() for i in ids}


def split(args) -> None:
    from apertus.tokenize.shards import heldout_ids, read_corpus

    cfg = args.config["heldout"]
    with StepRun(
        "tokenize",
        "split",
        args.config,
        inputs=[args.corpus],
        outputs=[args.output],
        manifest=args.manifest,
        seed=cfg["seed"],
    ) as step:
        rows = [(row["id"], str(row["language"])) for row in read_corpus(args.corpus)]
        chosen = heldout_ids(
            rows,
            fraction=cfg["fraction"],
            min_documents=cfg["min_documents"],
            max_documents=cfg["max_documents"],
            seed=cfg["seed"],
        )
        by_language: dict[str, list[str]] = {}
        for doc_id, language in rows:
            if doc_id in chosen:
                by_language.setdefault(language, []).append(doc_id)
        from apertus.core.files import atomic_write_json

        atomic_write_json(
            args.output, {"ids": {k: sorted(v) for k, v in sorted(by_language.items())}}
        )
        step.summary.update(
            documents=len(rows),
            heldout={k: len(v) for k, v in sorted(by_language.items())},
        )


def tokenizer(args) -> None:
    from apertus.tokenize.shards import read_corpus
    from apertus.tokenize.tokenizer import save_pretrained_from, train_tokenizer

    cfg = args.config["tokenizer"]
    with StepRun(
        "tokenize",
        "tokenizer",
        args.config,
        inputs=[args.corpus, args.heldout],
        outputs=[args.output],
        manifest=args.manifest,
    ) as step:
        if cfg["source"] == "train":
            heldout = _ids(args.heldout)
            texts = (r["text"] for r in read_corpus(args.corpus) if r["id"] not in heldout)
            step.summary.update(
                train_tokenizer(
                    texts,
                    args.output,
                    vocab_size=cfg["vocab_size"],
                    min_frequency=cfg["min_frequency"],
                )
            )
        else:
            step.summary.update(
                save_pretrained_from(cfg["source"], args.output, revision=cfg["revision"])
            )


def heldout(args) -> None:
    from apertus.tokenize.shards import write_heldout

    with StepRun(
        "tokenize",
        "heldout",
        args.config,
        inputs=[args.corpus, args.heldout, args.tokenizer],
        outputs=[args.output],
        manifest=args.manifest,
    ) as step:
        args.output.mkdir(parents=True, exist_ok=True)
        step.summary.update(
            write_heldout(args.corpus, _ids(args.heldout), args.output, args.tokenizer)
        )


def shards(args) -> None:
    from apertus.tokenize.shards import write_token_shards

    cfg = args.config["shards"]
    with StepRun(
        "tokenize",
        f"shards:{args.source}",
        args.config,
        inputs=[args.corpus, args.heldout, args.tokenizer],
        outputs=[args.output],
        manifest=args.manifest,
        seed=cfg["seed"],
    ) as step:
        step.summary.update(
            write_token_shards(
                args.corpus,
                args.source,
                args.tokenizer,
                args.output,
                exclude_ids=_ids(args.heldout),
                seed=cfg["seed"],
                max_tokens_per_file=cfg["max_tokens_per_file"],
                workers=args.threads,
                tasks=args.threads,
                logging_dir=args.datatrove_logs,
            )
        )


def phase(args) -> None:
    from apertus.tokenize.phases import PhaseSpec, build_phase_index
    from apertus.tokenize.shards import verify_shards

    specs = {p["name"]: p for p in args.config["phases"]}
    if args.name not in specs:
        raise ApertusError(f"no phase named {args.name!r}; configured: {', '.join(specs)}")
    spec = specs[args.name]
    shard_dirs = dict(item.split("=", 1) for item in args.shards)
    with StepRun(
        "tokenize",
        f"phase:{args.name}",
        args.config,
        inputs=[Path(d) for d in shard_dirs.values()],
        outputs=[args.output],
        manifest=args.manifest,
        seed=spec["seed"],
    ) as step:
        for directory in shard_dirs.values():
            verify_shards(Path(directory))  # a corrupt shard fails here, naming the file
        step.summary.update(
            build_phase_index(
                PhaseSpec(
                    spec["name"],
                    spec["tokens"],
                    spec["seed"],
                    spec["weights"],
                    spec.get("select") or {},
                ),
                {name: Path(d) for name, d in shard_dirs.items()},
                args.output,
            )
        )


def main(argv=None):
    parser = stage_parser("tokenize", "Steps of the tokenization stage.")
    parser.add_argument("step", choices=["split", "tokenizer", "heldout", "shards", "phase"])
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--heldout", type=Path)
    parser.add_argument("--tokenizer", type=Path)
    parser.add_argument("--source")
    parser.add_argument("--name")
    parser.add_argument("--shards", nargs="*", default=[], metavar="SOURCE=DIR")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--datatrove-logs", type=Path)
    args = parser.parse_args(argv)
    {"split": split, "tokenizer": tokenizer, "heldout": heldout, "shards": shards, "phase": phase}[
        args.step
    ](args)


if __name__ == "__main__":
    run_main(main)
