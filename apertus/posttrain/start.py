"""Step `posttrain_start`: the released checkpoint a post-training-only run starts from
(``posttrain.init_from``; RECIPE.md §7 on a model this run did not pretrain).

    python -m apertus.posttrain.start --config JSON --manifest M --instructions DIR
        --output DIR --tokenizer DIR --heldout DIR

``--config`` is ``{"init_from": {"model", "revision"}, "flavor": ...}`` (``posttrain.init_from``
and ``pretrain.flavor``). The checkpoint is found where `apertus.model.hf_checkpoint.
resolve_hf_checkpoint` finds it (a local folder, or a Hub id at its revision, downloaded once
into the Hugging Face cache; offline, the cache only), checked against the flavor
(`check_hf_checkpoint`: an Apertus causal LM of the flavor's shape, every weight file there), and
the step writes:

- ``--output``: ``checkpoint/``, the checkpoint's files, hard links where the filesystem allows
  (no second copy of the weights), else copies; as this step's outputs, their bytes are checked
  against its manifest when SFT reads them (`apertus.core.provenance`), as any stage's. And
  ``run.json``, what SFT reads of the stage it continues (`apertus.posttrain.sft`): the flavor,
  the model overrides (the checkpoint's ``rope_theta``, and its vocabulary where it exceeds the
  flavor's), ``final_checkpoint`` (``checkpoint``, relative to the folder), ``checkpoint_format:
  hf``, and ``init_from``: the model, revision and commit, each weight file's sha256 and size,
  and what such a checkpoint does not hold;
- ``--tokenizer``: its tokenizer, loaded, checked (the special and chat tokens the data and the
  chat format need) and saved as the tokenization stage saves a Hub tokenizer
  (`apertus.tokenize.tokenizer.save_pretrained_from`): the SFT data and the exports use it;
- ``--heldout``: the held-out prompts of the instruction set (``DIR/heldout.jsonl``) with their
  reference answers as plain text, one ``<language>.jsonl`` each in the tokenization stage's
  held-out format: what the exports' verification and the project's evaluation tasks read in a
  run without a data stage.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apertus.core import ApertusError
from apertus.core.files import atomic_write_json, atomic_write_text, building_directory
from apertus.core.stage import StepRun, run_main, stage_parser

if TYPE_CHECKING:
    from apertus.model.hf_checkpoint import PosttrainInitFrom

__all__ = ["HELDOUT_SOURCE", "checkpoint_files", "heldout_texts", "link_or_copy", "run_record"]

# The `source` of the held-out documents made from the instruction set's held-out prompts.
HELDOUT_SOURCE = "instructions"


def link_or_copy(source: Path, target: Path) -> str:
    """`target` as a hard link to `source` (symlinks followed: the Hub cache's snapshot files
    are links to its blobs), else a copy; returns "link" or "copy"."""
    real = source.resolve()
    try:
        os.link(real, target)
        return "link"
    except OSError:
        shutil.copyfile(real, target)
        return "copy"


def checkpoint_files(folder: Path, weight_files: tuple[str, ...]) -> list[str]:
    """The files of `folder` a start keeps: those a Hub start downloads
    (`apertus.model.hf_checkpoint.HUB_PATTERNS`: config, index, generation config, tokenizer
    files), of the safetensors files only the weights the checkpoint is made of."""
    from apertus.model.hf_checkpoint import HUB_PATTERNS

    return sorted(
        path.name
        for path in folder.iterdir()
        if path.is_file()
        and any(fnmatch.fnmatch(path.name, pattern) for pattern in HUB_PATTERNS)
        and (not path.name.endswith(".safetensors") or path.name in weight_files)
    )


def heldout_texts(heldout: Path) -> dict[str, list[dict[str, str]]]:
    """The held-out prompts of ``heldout.jsonl`` (`apertus.posttrain.instructions`'s prompt
    format) as held-out documents by language: {"id", "text", "source"}, the text the prompt's
    messages and its reference answer, each on its own paragraph."""
    from apertus.posttrain.instructions import read_prompts

    by_language: dict[str, list[dict[str, str]]] = defaultdict(list)
    for prompt in read_prompts(heldout):
        parts = [message["content"] for message in prompt["messages"]] + [prompt["reference"]]
        by_language[str(prompt["language"])].append(
            {"id": prompt["id"], "text": "\n\n".join(parts), "source": HELDOUT_SOURCE}
        )
    if not by_language:
        raise ApertusError(f"{heldout}: no held-out prompt (posttrain.instructions.heldout)")
    return dict(by_language)


def run_record(
    checkpoint: Path, flavor: str, start: PosttrainInitFrom, commit: str | None
) -> dict[str, Any]:
    """run.json of the start (the module's docstring), from the checkpoint folder in the run."""
    from apertus.model.hf_checkpoint import check_hf_checkpoint, start_record
    from apertus.model.shapes import FLAVOR_SHAPES

    checked = check_hf_checkpoint(checkpoint, flavor, own_vocabulary=True)
    overrides: dict[str, Any] = {}
    if checked.rope_theta is not None:
        overrides["rope_theta"] = checked.rope_theta
    if checked.config["vocab_size"] != FLAVOR_SHAPES[flavor].vocab_size:
        overrides["vocab_size"] = int(checked.config["vocab_size"])
    return {
        "flavor": flavor,
        "model_overrides": overrides,
        "final_checkpoint": checkpoint.name,
        "checkpoint_format": "hf",
        "init_from": start_record(start, commit, checked),
    }


def main(argv=None):
    from apertus.data.lid_models import hub_offline
    from apertus.model.hf_checkpoint import (
        PosttrainInitFrom,
        check_hf_checkpoint,
        resolve_hf_checkpoint,
    )
    from apertus.tokenize.tokenizer import save_pretrained_from

    parser = stage_parser("posttrain", __doc__.splitlines()[0])
    parser.add_argument("--instructions", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, required=True)
    args = parser.parse_args(argv)
    start = PosttrainInitFrom.from_dict(args.config["init_from"])
    flavor = args.config["flavor"]
    prompts = args.instructions / "heldout.jsonl"
    with StepRun(
        "posttrain",
        "start",
        args.config,
        inputs=[prompts],
        outputs=[args.output, args.tokenizer, args.heldout],
        manifest=args.manifest,
    ) as step:
        documents = heldout_texts(prompts)
        folder, commit = resolve_hf_checkpoint(start.model, start.revision, offline=hub_offline())
        # Before any byte is written: the architecture and the shape, every weight file there,
        # the tokenizer (the same files the copy holds).
        checked = check_hf_checkpoint(folder, flavor, own_vocabulary=True)
        step.summary["tokenizer"] = save_pretrained_from(str(folder), args.tokenizer)
        with building_directory(args.output) as out:
            (out / "checkpoint").mkdir()
            names = checkpoint_files(folder, checked.weight_files)
            how = {link_or_copy(folder / name, out / "checkpoint" / name) for name in names}
            record = run_record(out / "checkpoint", flavor, start, commit)
            atomic_write_json(out / "run.json", record)
        with building_directory(args.heldout) as out:
            for language, rows in sorted(documents.items()):
                atomic_write_text(
                    out / f"{language}.jsonl",
                    "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                )
        step.summary.update(
            {
                "init_from": record["init_from"],
                "checkpoint_files": "hard links" if how == {"link"} else "copies",
                "heldout": {language: len(rows) for language, rows in sorted(documents.items())},
            }
        )


if __name__ == "__main__":
    run_main(main)
