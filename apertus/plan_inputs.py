"""Plan-time checks of every input a run's config names: refused before the first job, not when
the job that reads it starts (a training stage lost per typo at scale).

:func:`input_problems` finds, on a validated config (defaults filled), each input a job of the
run will read and that the pipeline does not make itself, resolved as that job resolves it (its
own function where it has one) and relative to the working directory the jobs run in, and
names the key of every one that is not there:

- files and folders: the data sources' paths (`apertus.data.steps.sources_of`; a folder's `glob`
  must match a file), `data.robots.directory` and the judge's rubric and template files (as the
  jobs find them, `apertus.core.config.shipped_path`), the language-ID `model_path`
  (`apertus.data.lid_models.model_path_for`), the classifiers' labels and heads, user
  conversations (`posttrain.instructions.source.jsonl`), lm-eval's `include_path` and
  `data_home` (`apertus.evaluate.lmeval.include_dirs`, `data_home_env`);
- models and tokenizers named by a folder or a Hub id (`tokenize.tokenizer.source`, the xlmr
  `encoder`s, the reward model and judge, GlotLID): a folder must hold the files the loader
  reads; a Hub id, while the run is offline (config `offline: true`, or `HF_HUB_OFFLINE` set
  here), must be in the Hugging Face cache (`huggingface_hub.try_to_load_from_cache`; no
  request is made). Online, a Hub id is taken as it is: plan time never reaches the network.
  Hub datasets are read streaming (`hf://` paths, the huggingface reader, Hub labels), which
  offline cannot work, and are refused there;
- the rewards: a `reward_model` or `judge` kind without a model (`RewardConfig.check`);
- lm-eval task names, each against lm-eval's own task index (`apertus.evaluate.lmeval`:
  `task_manager`, `unknown_tasks`, `missing_packages`) over the built-in tasks when
  `include_defaults` and the `include_path`, besides the project's own tasks (`apertus_mc`,
  `apertus_ppl` and their per-language tasks, made by the run); the names are kept in the
  user's cache (:func:`lm_eval_task_names`), so that each Snakemake start does not index
  14,700 YAML files again;
- the restart checkpoint (`apertus.train.run_spec.resolve_initial_checkpoint`);
- the release's upload (`release.hub.repo_id`), which an offline run refuses at its end.

Only what an enabled part of the run reads is asked for (the classifiers when enabled, the
post-training inputs with `posttrain.enabled`). Outputs of earlier rules (the sample corpus and
its labels, trained tokenizers and heads, the project's task folder) are never asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.config import key_path, shipped_path

__all__ = ["attempt", "hub_datasets", "input_problems", "lm_eval_task_names", "lm_eval_tasks"]

# What a loader reads first in a folder: transformers' AutoTokenizer and AutoModel.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
MODEL_FILES = ("config.json",)
# Bump when the stored form of the task-name cache changes.
NAMES_FORMAT = 2


def attempt(where: str, check: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, list]:
    """`check(*args, **kwargs)`, with an ApertusError or ValueError it raises as a problem
    prefixed by `where` (a key path)."""
    try:
        return check(*args, **kwargs), []
    except (ApertusError, ValueError) as e:
        message = str(e)
        return None, [message if message.startswith(("key ", where)) else f"{where}: {message}"]


def input_problems(
    config: Mapping[str, Any], directory: str | os.PathLike[str] | None = None
) -> list[str]:
    """Every input of the validated `config` that its job would not find, one message each
    naming its key; relative paths from `directory` (default: the working directory), where
    Snakemake runs the jobs."""
    with contextlib.chdir(directory) if directory is not None else contextlib.nullcontext():
        offline = _offline(config)
        if config["posttrain"]["init_from"] is None:
            problems = [
                *_data_problems(config["data"], offline),
                *_tokenizer_problems(config["tokenize"], offline),
                *_restart_problems(config["pretrain"]),
                *_init_from_problems(config["pretrain"], config["tokenize"], offline),
            ]
        else:  # post-training only: no data, tokenization or pretraining job reads a thing
            problems = _posttrain_start_problems(config, offline)
        problems += _evaluate_problems(config)
        if config["posttrain"]["enabled"]:
            problems += _posttrain_problems(config["posttrain"], offline)
        problems += _release_problems(config["release"], offline)
    return problems


def _offline(config: Mapping[str, Any]) -> bool:
    """Whether the jobs may not reach the Hub: config `offline` (common.smk sets the variables
    for every job) or the variables already set here (the jobs inherit them)."""
    from apertus.data.lid_models import hub_offline

    return bool(config["offline"]) or hub_offline()


# --- folders, Hub ids and the Hugging Face cache ------------------------------------------------


def _is_hub_id(value: str) -> bool:
    """Whether `value` can name a Hub repository (what from_pretrained tries when no such
    folder exists): `name` or `owner/name`."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if value.count("/") > 1 or value.startswith((".", "~")):
        return False
    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


def _hub_cache() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _in_hub_cache(repo_id: str, files: Sequence[str], revision: str | None = None) -> bool:
    """Whether one of `files` of the model `repo_id` (at `revision`; None: main) is in the
    Hugging Face cache (no request)."""
    from huggingface_hub import try_to_load_from_cache

    return any(
        isinstance(try_to_load_from_cache(repo_id, name, revision=revision), str) for name in files
    )


def _offline_hub_message(key: str, value: str, what: str, repo_type: str = "model") -> str:
    kind = "" if repo_type == "model" else f" --repo-type {repo_type}"
    return (
        f"key '{key}' is {value!r}: no such folder ({Path(value).absolute()}), and as a Hub id "
        f"the {what} is not in the Hugging Face cache ({_hub_cache()}) while the run is offline "
        "(config `offline: true` or HF_HUB_OFFLINE): download it once with network access "
        f"(`hf download{kind} {value}`), or name a local copy"
    )


def _model_location(
    key: str,
    value: str,
    offline: bool,
    files: Sequence[str],
    what: str,
    revision: str | None = None,
):
    """A model or tokenizer given as a local folder or a Hub id, as transformers'
    from_pretrained finds it: the folder when there is one (holding one of `files`), else the
    Hub repository at `revision` (offline: in the cache)."""
    path = Path(value)  # as the jobs take it: no `~` expansion
    if path.is_dir():
        if not any((path / name).is_file() for name in files):
            return [
                f"key '{key}' is {value!r}: the folder {path.absolute()} holds no "
                f"{' or '.join(files)}, so it is not the folder of a {what}"
            ]
        return []
    if path.exists():
        return [
            f"key '{key}' is {value!r}: {path.absolute()} is a file, not the folder of a {what}"
        ]
    if not _is_hub_id(value):
        return [f"key '{key}' is {value!r}: {path.absolute()} does not exist (nor is it a Hub id)"]
    if offline and not _in_hub_cache(value, files, revision):
        return [_offline_hub_message(key, value, what)]
    return []  # online: the job downloads it (plan time makes no request)


def _local_path(key: str, value: str, what: str, *, folder_ok: bool = True) -> list[str]:
    path = Path(value)  # as the jobs take it: no `~` expansion
    if path.is_file() or (folder_ok and path.is_dir()):
        return []
    if path.exists():
        return [f"key '{key}' is {value!r}: {path.absolute()} is a folder, not a {what} file"]
    return [f"key '{key}' is {value!r}: {path.absolute()} does not exist ({what})"]


def _streamed_offline(key: str, value: str, what: str) -> str:
    return (
        f"key '{key}' is {value!r}: {what} is streamed from the Hugging Face Hub, but the run "
        "is offline (config `offline: true` or HF_HUB_OFFLINE); set `offline: false`, or point "
        "to a local copy"
    )


# --- data ---------------------------------------------------------------------------------------


def _data_problems(data: Mapping[str, Any], offline: bool) -> list[str]:
    from apertus.data.config import DataConfig

    try:
        cfg = DataConfig.from_dict(data)
    except (ApertusError, ValueError):
        return []  # the typed section's own check names the key
    return _source_problems(cfg, offline) + _data_model_problems(data, offline)


def _source_problems(cfg: Any, offline: bool) -> list[str]:
    """Each source's path as the data jobs read it (`sources_of`): the sample corpus (made by
    the run) only under one of its names, a local file or folder that exists (a folder's `glob`
    matching a file), a Hub dataset only online (read streaming)."""
    from apertus.data.make_sample import SAMPLE_SOURCES
    from apertus.data.steps import sources_of

    problems = []
    for i, source in enumerate(cfg.sources):
        where = key_path(["data", "sources", i, "path"])
        if source.is_sample and source.name in SAMPLE_SOURCES:
            continue  # the run makes it (data_sample)
        hub = source.reader == "huggingface" or source.path.startswith("hf://")
        if hub:
            local = source.reader == "huggingface" and Path(source.path).is_dir()
            if local:
                continue
            if not source.path.startswith("hf://") and not _is_hub_id(source.path):
                problems.append(
                    f"key '{where}' is {source.path!r}: {Path(source.path).absolute()} does "
                    "not exist (nor is it a Hub dataset id, which the huggingface reader takes)"
                )
            elif offline:
                problems.append(_streamed_offline(where, source.path, "the source"))
            continue
        one = dataclasses.replace(cfg, sources=(source,))
        found, problem = attempt(where, sources_of, one, None)
        problems += problem
        pattern = source.glob or "**/*"  # as local_files reads a folder, to the first file
        if found and Path(source.path).is_dir() and not _any_file(Path(source.path), pattern):
            problems.append(
                f"key '{where}' is {source.path!r}: no file under it matches the glob "
                f"{pattern!r} (data.sources[{i}].glob), so the source reads nothing"
            )
    return problems


def _any_file(folder: Path, pattern: str) -> bool:
    return any(path.is_file() for path in folder.glob(pattern))


def _data_model_problems(data: Mapping[str, Any], offline: bool) -> list[str]:
    """The robots.txt folder, the language-ID model and the quality and toxicity classifiers'
    encoders, heads and labels."""
    from apertus.data.lid_models import GLOTLID_FILE, GLOTLID_REPO, model_path_for

    problems = []
    robots = data["robots"]
    if robots["enabled"] and robots["directory"] is not None:
        folder = shipped_path(robots["directory"])  # as apertus.data.robots_snapshot finds it
        if not folder.is_dir():
            problems.append(
                f"key 'data.robots.directory' is {robots['directory']!r}: no such folder "
                f"({folder.absolute()}, nor in the workflow's checkout); null fetches the "
                "robots.txt files from the web"
            )
    language = data["language"]
    if language["model_path"] is not None:
        problems += attempt(
            "data.language.model_path", model_path_for, language["backend"], language["model_path"]
        )[1]
    elif language["backend"] == "glotlid":
        if offline and not _in_hub_cache(GLOTLID_REPO, [GLOTLID_FILE]):
            problems.append(
                f"key 'data.language.backend' is 'glotlid': {GLOTLID_REPO}/{GLOTLID_FILE} is "
                f"not in the Hugging Face cache ({_hub_cache()}) while the run is offline: "
                f"download it once (`hf download {GLOTLID_REPO} {GLOTLID_FILE}`), or set "
                "data.language.model_path to a local copy"
            )
    else:
        problems += attempt("data.language.backend", model_path_for, language["backend"])[1]
    for task in ("quality", "toxicity"):
        problems += _classifier_problems(task, data[task], offline)
    return problems


def _classifier_problems(task: str, spec: Mapping[str, Any], offline: bool) -> list[str]:
    from apertus.data.train_classifiers import HUB_PREFIX

    if not spec["enabled"]:
        return []
    where = f"data.{task}"
    problems = []
    if spec["backend"] == "xlmr":
        problems += _model_location(
            f"{where}.encoder", spec["encoder"], offline, MODEL_FILES, "XLM-R encoder"
        )
        if spec["head"] is not None:
            problems += _local_path(f"{where}.head", spec["head"], "MLP head weights")
    trained = spec["backend"] == "ngram" or spec["head"] is None  # DataConfig's `trained`
    labels = spec["labels"]
    if trained and labels != "sample":  # `sample`: made by the run (data_sample)
        if labels.startswith(HUB_PREFIX):
            if offline:
                problems.append(_streamed_offline(f"{where}.labels", labels, "the labelled data"))
        else:
            # A JSONL file; for the xlmr heads also a local folder in a Hub dataset's layout.
            folder_ok = spec["backend"] == "xlmr"
            problems += _local_path(f"{where}.labels", labels, "labelled data", folder_ok=folder_ok)
    return problems


# --- tokenizer and training ---------------------------------------------------------------------


def _tokenizer_problems(tokenize: Mapping[str, Any], offline: bool) -> list[str]:
    source, revision = tokenize["tokenizer"]["source"], tokenize["tokenizer"]["revision"]
    if source == "train":  # trained by the run
        if revision is not None:
            return [
                f"key 'tokenize.tokenizer.revision' is {revision!r}, but the run trains its "
                "tokenizer (tokenize.tokenizer.source: train); set it to null"
            ]
        return []
    if revision is not None and Path(source).is_dir():
        return [_folder_revision("tokenize.tokenizer.revision", revision, source)]
    where = "tokenize.tokenizer.source"
    return _model_location(where, source, offline, TOKENIZER_FILES, "tokenizer", revision)


def _restart_problems(pretrain: Mapping[str, Any]) -> list[str]:
    """The restart checkpoint as the restarted stage's launcher resolves it (a `step-N`
    checkpoint, or a checkpoint folder's last complete one; loadable)."""
    from apertus.train.run_spec import resolve_initial_checkpoint

    restart = pretrain["restart"]
    if restart is None:
        return []
    try:
        resolve_initial_checkpoint(restart["checkpoint"])
    except ApertusError as e:
        reason = str(e).removeprefix("checkpoint.initial ")
        return [f"key 'pretrain.restart.checkpoint' is {restart['checkpoint']!r}: {reason}"]
    return []


def _init_from_problems(
    pretrain: Mapping[str, Any], tokenize: Mapping[str, Any], offline: bool
) -> list[str]:
    """The released checkpoint the first phase starts from: where the stage finds it (a
    folder; a Hub id, offline in the cache), its config.json against the flavor when it is at
    hand (a folder, the cache), and the tokenizer the run tokenizes with, which must be its."""
    start = pretrain.get("init_from")
    if start is None:
        return []
    model, revision = start["model"], start.get("revision")
    where = "pretrain.init_from.model"
    problems = []
    source = tokenize["tokenizer"]["source"]
    if source != model:
        problems.append(
            f"key 'tokenize.tokenizer.source' is {source!r}: a run that starts from "
            f"{model!r} (pretrain.init_from) tokenizes with its tokenizer; set "
            f"tokenize.tokenizer.source to {model!r}"
        )
    elif tokenize["tokenizer"]["revision"] != revision:
        problems.append(
            f"key 'tokenize.tokenizer.revision' is {tokenize['tokenizer']['revision']!r}: a run "
            f"that starts from {model!r} at revision {revision or 'main'!r} (pretrain.init_from) "
            "tokenizes with that revision's tokenizer; set tokenize.tokenizer.revision to "
            + ("null" if revision is None else repr(revision))
        )
    elif Path(model).is_dir() and not _model_location(
        "tokenize.tokenizer.source", source, offline, TOKENIZER_FILES, "tokenizer"
    ):
        # Loaded and checked as the tokenization job will (the special-token ids the data and
        # the chat format need): a released model's tokenizer is the user's to get right.
        from apertus.tokenize.tokenizer import load_tokenizer

        problems += attempt(
            f"key 'tokenize.tokenizer.source' is {source!r}", load_tokenizer, source
        )[1]
    return problems + _start_checkpoint(where, model, revision, pretrain["flavor"], offline)[1]


def _start_checkpoint(
    where: str, model: str, revision: str | None, flavor: str, offline: bool
) -> tuple[Path | None, list[str]]:
    """A released checkpoint a stage starts from: where its job finds it (a folder; a Hub id,
    offline in the cache), and its config.json against `flavor` where it is at hand now.
    Returns the folder (None: not at hand, e.g. online and not cached: the job downloads and
    checks it) and the problems."""
    folder, problems = _start_folder(where, model, revision, offline)
    if folder is None or problems:
        return folder, problems
    from apertus.model.hf_checkpoint import check_hf_checkpoint

    return folder, attempt(
        f"key '{where}' is {model!r}", check_hf_checkpoint, folder, flavor, own_vocabulary=True
    )[1]


def _folder_revision(key: str, revision: str, folder: str) -> str:
    """A revision given for a local folder (a Hub id's only)."""
    return f"key '{key}' is {revision!r}: a revision is for a Hub id; {folder!r} is a local folder"


def _start_folder(
    where: str, model: str, revision: str | None, offline: bool
) -> tuple[Path | None, list[str]]:
    from apertus.model.hf_checkpoint import CONFIG_FILE, SINGLE_FILE

    folder = Path(model)
    if folder.is_dir():
        if revision is not None:
            return None, [
                _folder_revision(f"{where.removesuffix('.model')}.revision", revision, model)
            ]
        return folder, []
    found = _model_location(
        where, model, offline, [CONFIG_FILE, SINGLE_FILE], "checkpoint", revision
    )
    if found:  # no folder, no Hub id, or (offline) not in the cache
        return None, found
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model, CONFIG_FILE, revision=revision)
    return (Path(cached).parent if isinstance(cached, str) else None), []


def _posttrain_start_problems(config: Mapping[str, Any], offline: bool) -> list[str]:
    """A post-training-only run (``posttrain.init_from``): the checkpoint where its job finds
    it, its config.json against ``pretrain.flavor`` and its tokenizer (the special and chat
    tokens the SFT data and the chat format need) when it is at hand; and the keys that name
    what such a run does not have."""
    post = config["posttrain"]
    start = post["init_from"]
    model, revision = start["model"], start.get("revision")
    where = "posttrain.init_from.model"
    problems = []
    if config["pretrain"]["init_from"] is not None:
        problems.append(
            "key 'pretrain.init_from' is set, but posttrain.init_from makes the run post-training "
            "only: there is no pretraining to start; set pretrain.init_from to null"
        )
    replay = post["sft_data"]["replay"]["documents"]
    if replay:
        problems.append(
            f"key 'posttrain.sft_data.replay.documents' is {replay}: a run post-training "
            f"{model!r} (posttrain.init_from) has no pretraining data to replay; set it to 0"
        )
    if not post["enabled"]:
        problems.append(
            "key 'posttrain.enabled' is false, but posttrain.init_from names a checkpoint to "
            "post-train: the run would do nothing; set posttrain.enabled to true"
        )
    from apertus.evaluate.tasks import MC_GROUP

    for suite in ("suite", "instruct"):
        for i, entry in enumerate(config["evaluate"][suite]["tasks"]):
            if entry["task"].startswith(MC_GROUP):
                problems.append(
                    f"key 'evaluate.{suite}.tasks[{i}].task' is {entry['task']!r}: the project's "
                    "cloze tasks are cut from held-out documents long enough for a context and "
                    "a continuation (evaluate.tasks.mc), and a post-training-only run's "
                    "held-out documents are its held-out prompts, too short; use its "
                    "perplexity tasks or lm-eval's"
                )
    folder, found = _start_checkpoint(where, model, revision, config["pretrain"]["flavor"], offline)
    problems += found
    if folder is not None and not found:
        from apertus.tokenize.tokenizer import load_tokenizer

        problems += attempt(f"key '{where}' is {model!r}", load_tokenizer, str(folder))[1]
    return problems


# --- evaluation ---------------------------------------------------------------------------------


def _evaluate_problems(config: Mapping[str, Any]) -> list[str]:
    from apertus.evaluate.stage import EvaluateConfig

    try:
        cfg = EvaluateConfig.from_dict(config["evaluate"])
    except (ApertusError, ValueError):
        return []  # the typed section's own check names it
    offline = _offline(config)
    problems = _suite_problems("evaluate.suite", cfg.suite, cfg, offline)
    if config["posttrain"]["enabled"] and cfg.instruct.tasks:
        problems += _suite_problems("evaluate.instruct", cfg.instruct, cfg, offline)
    return problems


def _own_task(name: str, cfg: Any) -> bool:
    """Whether `name` is one of the project's tasks (`apertus.evaluate.tasks`), which the run
    writes: the groups, and a language's task when the language may be held out (any, where
    the task options list none)."""
    from apertus.evaluate.tasks import MC_GROUP, PPL_GROUP

    for group, options in ((MC_GROUP, cfg.tasks.mc), (PPL_GROUP, cfg.tasks.ppl)):
        if name == group:
            return True
        if name.startswith(f"{group}_"):
            language = name.removeprefix(f"{group}_")
            return options.languages is None or language in options.languages
    return False


def _suite_problems(where: str, options: Any, cfg: Any, offline: bool) -> list[str]:
    from types import SimpleNamespace

    from apertus.evaluate.lmeval import data_home_env, include_dirs, missing_packages, unknown_tasks
    from apertus.evaluate.tasks import MC_GROUP, PPL_GROUP

    problems = []
    if options.data_home is not None:
        problems += attempt(f"{where}.data_home", data_home_env, options.data_home)[1]
    if options.include_path is not None:
        missing = attempt(f"{where}.include_path", include_dirs, None, options.include_path)[1]
        if missing:
            return problems + missing  # the task names may be in the folder that is not there
    entries = list(options.tasks)
    others = [entry.task for entry in entries if not _own_task(entry.task, cfg)]
    known = {MC_GROUP, PPL_GROUP, *(entry.task for entry in entries if _own_task(entry.task, cfg))}
    summary = None
    if others and (options.include_defaults or options.include_path is not None):
        try:
            summary = lm_eval_tasks(options.include_defaults, options.include_path)
        except Exception as e:  # the job's TaskManager would fail the same way
            key = "include_path" if options.include_path is not None else "include_defaults"
            return [f"{where}.{key}: lm-eval cannot index the tasks ({type(e).__name__}: {e})"]
        known |= set(summary["names"])
    # unknown_tasks reads the index's names only (`all_tasks`).
    unknown = unknown_tasks(entries, SimpleNamespace(all_tasks=sorted(known)), where)
    problems += unknown + missing_packages(entries, where)
    if summary is not None and not unknown and (offline or options.offline):
        problems += _offline_dataset_problems(where, entries, summary, offline)
    return problems


def _offline_dataset_problems(where: str, entries: Sequence[Any], summary, offline) -> list[str]:
    """Offline (config `offline`, or the suite's own `offline`, which lm-eval runs with), each
    task's Hub datasets must be in the Hugging Face cache: lm-eval loads them when the task
    starts (`datasets.load_dataset`)."""
    problems = []
    switch = "config `offline: true` or HF_HUB_OFFLINE" if offline else f"{where}.offline: true"
    for i, entry in enumerate(entries):
        missing: dict[str, list[str]] = {}  # dataset -> the leaf tasks reading it
        for task, dataset in sorted(hub_datasets(entry.task, summary).items()):
            if not _dataset_cached(dataset):
                missing.setdefault(dataset, []).append(task)
        if missing:
            listed = ", ".join(
                f"{dataset} ({tasks[0]}{f' and {len(tasks) - 1} more' if len(tasks) > 1 else ''})"
                for dataset, tasks in sorted(missing.items())[:3]
            )
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            problems.append(
                f"{where}.tasks[{i}] is {entry.task!r}: lm-eval runs offline ({switch}), and "
                f"its dataset(s) {listed}{more} are not in the Hugging Face cache "
                f"({_hub_cache()}): download them once with network access, set {where}.offline "
                "and offline to false, or stand the tasks in with local rows (include_path)"
            )
    return problems


def lm_eval_tasks(include_defaults: bool, include_path: str | None) -> dict[str, Any]:
    """What the plan needs of lm-eval's task index over its built-in tasks (when
    `include_defaults`) and `include_path`, as `apertus.evaluate.lmeval.task_manager` builds it
    for the evaluation job: ``names`` (every task, group and tag), ``datasets`` (each YAML
    task's ``dataset_path``) and ``members`` (each group's tasks and each tag's). Kept in the
    user's cache (`APERTUS_LMEVAL_CACHE`, as lm-eval's built-in index) under a key of lm-eval's
    version and location, the Python version, the modification time of every folder of its
    built-in tasks (a task file added, removed or renamed) and the path, size and modification
    time of every file under `include_path`: reading it costs milliseconds, indexing seconds."""
    from apertus.core.diskcache import user_cache
    from apertus.evaluate.lmeval import task_manager

    cache = user_cache("lm-eval-names", "APERTUS_LMEVAL_CACHE")
    key = _names_key(include_defaults, include_path)
    if cache is not None and key is not None:
        stored = cache.get(key)
        if isinstance(stored, dict) and set(stored) == {"names", "datasets", "members"}:
            return stored
    index = task_manager(None, include_defaults, None, include_path)._index
    summary: dict[str, Any] = {"names": sorted(index), "datasets": {}, "members": {}}
    for name, entry in index.items():
        cfg, kind = entry.cfg or {}, entry.kind.name
        if kind == "TASK" and isinstance(cfg.get("dataset_path"), str):
            summary["datasets"][name] = cfg["dataset_path"]
        elif kind == "TAG":
            summary["members"][name] = sorted(entry.tags)
        elif kind == "GROUP":
            members = []
            for child in cfg.get("task") or []:
                if isinstance(child, dict):  # a task written inline, or one with overrides
                    child_name = child.get("task") or child.get("group")
                    if isinstance(child.get("dataset_path"), str) and isinstance(child_name, str):
                        summary["datasets"].setdefault(child_name, child["dataset_path"])
                    child = child_name
                if isinstance(child, str):
                    members.append(child)
            summary["members"][name] = members
    if cache is not None and key is not None:
        cache.put(key, summary)
    return summary


def lm_eval_task_names(include_defaults: bool, include_path: str | None) -> list[str]:
    """The task, group and tag names of lm-eval's index (:func:`lm_eval_tasks`)."""
    return lm_eval_tasks(include_defaults, include_path)["names"]


# Dataset builders of the `datasets` library that read local files (`dataset_kwargs`), not the Hub.
LOCAL_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow", "pandas"})


def hub_datasets(task: str, summary: Mapping[str, Any]) -> dict[str, str]:
    """The Hub datasets the leaf tasks of `task` (a task, group or tag) read: leaf task ->
    `dataset_path`, for those whose dataset is neither a local builder nor a local folder."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    todo = [task]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += summary["members"].get(name, [])
        dataset = summary["datasets"].get(name)
        if dataset and dataset not in LOCAL_BUILDERS and not Path(dataset).is_dir():
            found[name] = dataset
    return found


def _names_key(include_defaults: bool, include_path: str | None) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    spec = importlib.util.find_spec("lm_eval")  # located, not imported (that takes a second)
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        lm_eval_version = version("lm_eval")
    except PackageNotFoundError:
        return None
    root = Path(spec.submodule_search_locations[0]) / "tasks"
    head = f"{NAMES_FORMAT} {lm_eval_version} {sys.version_info[:2]} {root} {include_defaults}"
    digest = hashlib.sha256(f"{head}\n".encode())
    if include_defaults:
        for folder, subfolders, _ in os.walk(root):
            subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
            digest.update(f"{folder} {os.stat(folder).st_mtime_ns}\n".encode())
    if include_path is not None:
        top = Path(include_path).absolute()
        digest.update(f"include {top}\n".encode())
        for folder, subfolders, files in os.walk(top):
            subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
            for name in sorted(files):
                stat = os.stat(os.path.join(folder, name))
                digest.update(f"{folder}/{name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


# --- post-training ------------------------------------------------------------------------------


def _posttrain_problems(posttrain: Mapping[str, Any], offline: bool) -> list[str]:
    problems = _instruction_problems(posttrain["instructions"]["source"], offline)
    sampling = posttrain["qrpo_data"]
    rewards = [("posttrain.qrpo_data.reward", sampling["reward"])]
    rewards += [
        (key_path(["posttrain", "qrpo_data", "rewards_by_category", category]), reward)
        for category, reward in sampling["rewards_by_category"].items()
    ]
    for where, reward in rewards:
        problems += _reward_problems(where, reward, offline)
    return problems


def _instruction_problems(source: Mapping[str, Any] | None, offline: bool) -> list[str]:
    """User conversations: a JSONL file, or a Hub dataset (`datasets.load_dataset`: a local
    dataset folder, or offline one already in the Hub's or the datasets' cache)."""
    if source is None:
        return []
    if "jsonl" in source:
        where = "posttrain.instructions.source.jsonl"
        return _local_path(where, source["jsonl"], "conversations JSONL", folder_ok=False)
    name = source.get("hub")
    if not isinstance(name, str) or Path(name).is_dir():
        return []  # a bad shape: InstructionConfig names it
    where = "posttrain.instructions.source.hub"
    if not _is_hub_id(name):
        return [f"key '{where}' is {name!r}: {Path(name).absolute()} does not exist (nor is it "
                "a Hub id)"]  # fmt: skip
    if not offline or _dataset_cached(name):
        return []  # online: the job downloads it
    return [_offline_hub_message(where, name, "dataset", "dataset")]


def _dataset_cached(name: str) -> bool:
    """Whether the Hub dataset `name` is in the Hugging Face cache (its repository's folder) or
    in the datasets library's (its prepared copy), where `datasets.load_dataset` finds it
    offline."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    hub = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=name, repo_type="dataset")
    datasets_cache = os.environ.get("HF_DATASETS_CACHE") or os.path.join(
        constants.HF_HOME, "datasets"
    )
    prepared = Path(datasets_cache) / name.replace("/", "___")
    return (hub / "snapshots").is_dir() or prepared.is_dir()


def _reward_problems(where: str, reward: Mapping[str, Any], offline: bool) -> list[str]:
    """A reward's model (a reward model or judge: a folder or Hub id its kind needs) and the
    judge's rubric and template files, as the scoring job builds it (`RewardConfig.check`,
    `load_rubric`, `load_judge_template`). chrF, the default, needs none of them; the others
    bring torch in with the module that builds them."""
    if reward["kind"] == "chrf" and not any(
        reward[k] is not None for k in ("model", "rubric", "rubric_file", "template_file")
    ):
        return []
    from apertus.posttrain.reward_config import RewardConfig, load_judge_template, load_rubric

    cfg, problems = attempt(where, RewardConfig.from_dict, reward)
    if cfg is None:
        return problems
    problems += attempt(where, cfg.check, where)[1]
    if problems:
        return problems
    if cfg.model is not None:
        what = "judge" if cfg.kind == "judge" else "reward model"
        problems += _model_location(f"{where}.model", cfg.model, offline, MODEL_FILES, what)
    if cfg.kind == "judge":
        problems += attempt(where, load_rubric, cfg, where)[1]
        problems += attempt(where, load_judge_template, cfg, where)[1]
    return problems


# --- release ------------------------------------------------------------------------------------


def _release_problems(release: Mapping[str, Any], offline: bool) -> list[str]:
    """The upload `release.hub.repo_id` asks for, which offline refuses at the run's end
    (`apertus.release.hub.upload_release`; a dry run sends nothing and may run offline)."""
    hub = release["hub"]
    if not release["enabled"] or hub["repo_id"] is None or hub["dry_run"] or not offline:
        return []
    return [
        f"key 'release.hub.repo_id' is {hub['repo_id']!r}: the upload needs the Hub, but the "
        "run is offline (config `offline: true` or HF_HUB_OFFLINE); set `offline: false` to "
        "upload, `release.hub.dry_run: true`, or repo_id null"
    ]
