"""One model folder through lm-evaluation-harness 0.4.13 (``lm_eval.simple_evaluate``, model
``hf``), with the numbers written as lm-eval writes them and the command line that gives them
again outside the pipeline.

A suite is a list of ``{task, num_fewshot, limit, add_bos_token}``. ``lm_eval`` takes one
few-shot count and one limit per call, so entries are grouped into *invocations* (same few-shot,
limit and BOS setting, in suite order); each invocation writes ``lm_eval/results-<k>.json``
(``json.dumps(results, indent=2, default=handle_non_serializable)``, as lm-eval's CLI does,
without the date in the file name and the tracker's bookkeeping keys such as ``task_hashes``)
and one line of ``command.sh``.

BOS, and why ``add_bos_token`` is chosen per task. lm-eval's ``hf`` model encodes contexts with
the tokenizer's own special tokens unless told otherwise. Our tokenizer adds ``<s>`` alone, as
Hub causal LMs do (apertus/tokenize/tokenizer.py), but a tokenizer from elsewhere may also
append ``</s>``, and then a context would end in ``</s>`` and lm-eval's context/continuation
split (encode both, cut at the context length) would score the wrong tokens. So
``add_bos_token`` is always set, and ``transformers`` 5 rebuilds the post-processor to add
``<s>`` alone (True) or nothing (False), never ``</s>``. lm-eval then does:

- ``loglikelihood`` / ``multiple_choice``: ``add_bos_token=True`` gives ``<s> context`` and
  scores exactly the continuation's tokens, as the model saw documents in training.
- ``loglikelihood_rolling``: lm-eval puts its prefix token (BOS) in front of the encoded text
  itself, so ``add_bos_token=True`` would also score ``<s>`` after ``<s>`` (lm-eval issue
  #3333); ``add_bos_token=False`` gives log p(text | <s>), windows of the model's max length
  each conditioned on the last token of the previous one.

So ``add_bos_token: null`` (the default) means False for rolling tasks and True for the others,
found from the tasks' ``output_type``; a task or group mixing both needs an explicit value.

The instruct suite (``evaluate.instruct``, :class:`InstructOptions`) is the same run on the chat
models (SFT, QRPO) with lm-eval's ``apply_chat_template`` (few-shot examples as turns,
``fewshot_as_multiturn``): every request is rendered by the export's own chat template, which
starts with ``<s>`` (lm-eval then adds no second one, whatever ``add_bos_token`` says). A chat
export's ``generation_config.json`` ends generation at ``<|assistant_end|>`` as well as ``</s>``
(apertus.export); ``transformers``' ``generate``, which lm-eval's ``hf`` model calls without an
``eos_token_id`` of its own, stops there, and the token is dropped from the decoded answer, so
a generative task's answer is the assistant's turn, cut further by the task's own ``until``
strings. A run of the instruct suite on a model whose generation does not end at the
end-of-turn is refused before the model is loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from apertus.core import ApertusError
from apertus.core.device import bf16_matmuls_in_fp32, resolve_device
from apertus.core.diskcache import user_cache
from apertus.core.files import atomic_write_text
from apertus.core.typed import Config

log = logging.getLogger(__name__)

RESULTS_DIR = "lm_eval"
COMMAND_FILE = "command.sh"
ROLLING = "loglikelihood_rolling"
LM_EVAL_VERSION = "0.4.13"

# Environment of every run: no Hub or dataset download (PLATFORM.md "lm-eval 0.4.13 offline");
# lm-eval's CLI also turns tokenizer threads off.
# `evaluate` (HumanEval's and MBPP's code_eval metric) has an offline switch of its own.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
}
COMMON_ENV = {"TOKENIZERS_PARALLELISM": "false"}
# What HumanEval and MBPP's `code_eval` metric (Hugging Face `evaluate`) asks for before it
# executes a model's code, set with confirm_run_unsafe_code.
UNSAFE_CODE_ENV = {"HF_ALLOW_CODE_EVAL": "1"}
# lm-eval's side data under `data_home` (``evaluate.suite.data_home``), each folder named by the
# variable that points its reader there: Hugging Face `evaluate`'s cached metric modules
# (``modules/evaluate_modules/metrics/evaluate-metric--code_eval/<hash>/code_eval.py``, found
# by `evaluate.load("code_eval")` when the Hub cannot be reached) and NLTK's data
# (``nltk_data/tokenizers/punkt_tab/<language>/``, IFEval's sentence splitter).
DATA_HOME_DIRS = {"HF_MODULES_CACHE": "modules", "NLTK_DATA": "nltk_data"}
# The token that ends an assistant turn in the chat template (apertus.tokenize.tokenizer).
END_OF_TURN = "<|assistant_end|>"


@dataclass(frozen=True)
class SuiteEntry(Config, key="evaluate.suite.tasks[]"):
    """One task (or group, or tag) of a suite. The optional keys default here: the schema
    leaves them out of the config when they are not given.

    task: an lm-eval task, group or tag name (ours: apertus_mc, apertus_ppl, apertus_mc_de...).
    num_fewshot: few-shot examples, or None for the task's own default (0 when it has none).
    limit: at most this many documents per task (a fraction when < 1), or None for all.
    add_bos_token: lm-eval's ``hf`` model argument; None picks it from the task's output type
        (see the module doc).
    """

    task: str
    num_fewshot: int | None = None
    limit: int | float | None = None
    add_bos_token: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.task, str) or not self.task.strip():
            raise ApertusError(f"suite task must be a task name, got {self.task!r}")
        if self.num_fewshot is not None and (
            isinstance(self.num_fewshot, bool)
            or not isinstance(self.num_fewshot, int)
            or self.num_fewshot < 0
        ):
            raise ApertusError(
                f"suite task {self.task}: num_fewshot must be an integer >= 0 or null, "
                f"got {self.num_fewshot!r}"
            )
        if self.limit is not None and (
            isinstance(self.limit, bool)
            or not isinstance(self.limit, int | float)
            or self.limit <= 0
            or (isinstance(self.limit, float) and self.limit >= 1 and not self.limit.is_integer())
        ):
            raise ApertusError(
                f"suite task {self.task}: limit must be a count >= 1, a fraction in (0, 1) or "
                f"null, got {self.limit!r}"
            )
        if self.add_bos_token is not None and not isinstance(self.add_bos_token, bool):
            raise ApertusError(
                f"suite task {self.task}: add_bos_token must be true, false or null, "
                f"got {self.add_bos_token!r}"
            )


@dataclass(frozen=True)
class LmEvalOptions(Config, key="evaluate.suite"):
    """How a model is run: the ``evaluate.suite`` section (and, as :class:`InstructOptions`,
    ``evaluate.instruct``: the same keys).

    tasks: the suite, a list of :class:`SuiteEntry` (``{task, num_fewshot, limit,
        add_bos_token}``).
    batch_size: lm-eval's batch size: an integer, "auto" or "auto:N".
    device: torch device for the model ("cpu", "cuda", "cuda:0").
    dtype: the model's dtype ("float32", "bfloat16", "float16" or "auto").
    model_args: further ``hf`` model arguments (e.g. {"max_length": 4096}).
    include_defaults: also index lm-eval's built-in tasks (needed for ARC, HellaSwag...; ~10 s).
    include_path: a further folder of task YAMLs, indexed last, so that its tasks, groups and
        tags replace built-in ones of the same names (the rehearsal's stand-ins), or None.
    seed: lm-eval's python, numpy, torch and few-shot seeds.
    offline: forbid Hub and dataset downloads (built-in tasks need false the first time).
    log_samples: also write every scored request (``lm_eval/samples-<k>/<task>.jsonl``).
    confirm_run_unsafe_code: let tasks that execute the model's code run (HumanEval, MBPP:
        lm-eval's ``confirm_run_unsafe_code``, and ``HF_ALLOW_CODE_EVAL=1``).
    metadata: lm-eval's task metadata (``--metadata``), on top of the model arguments lm-eval
        passes itself, e.g. RULER's ``{"max_seq_lengths": [4096, 8192]}``.
    gen_kwargs: generation settings over each generating task's own (``--gen_kwargs``), e.g.
        ``{"max_gen_toks": 256}``; empty: the tasks' own.
    data_home: a folder of the side data lm-eval's task code loads besides the datasets
        (:data:`DATA_HOME_DIRS`: `evaluate` metric modules, NLTK data), given to lm-eval as
        ``HF_MODULES_CACHE`` and ``NLTK_DATA``; None: the user's own caches.

    chat_template (class attribute): requests go through the model's chat template.
    off_when_empty (class attribute): an empty task list turns the suite off rather than being
        a mistake.
    """

    chat_template: ClassVar[bool] = False
    off_when_empty: ClassVar[bool] = False

    tasks: tuple[SuiteEntry, ...]
    batch_size: int | str
    device: str
    dtype: str
    model_args: dict[str, Any]
    include_defaults: bool
    include_path: str | None
    seed: int
    offline: bool
    log_samples: bool
    confirm_run_unsafe_code: bool
    metadata: dict[str, Any]
    gen_kwargs: dict[str, Any]
    data_home: str | None

    def __post_init__(self) -> None:
        key = self.config_key
        if not self.tasks and not self.off_when_empty:
            raise ApertusError(f"{key}.tasks is empty: name at least one task")
        bs = self.batch_size
        if isinstance(bs, bool) or not (
            (isinstance(bs, int) and bs >= 1)
            or (isinstance(bs, str) and (bs == "auto" or _is_auto_n(bs)))
        ):
            raise ApertusError(f"{key}.batch_size must be >= 1, 'auto' or 'auto:N', got {bs!r}")
        if self.dtype not in ("float32", "bfloat16", "float16", "auto"):
            raise ApertusError(
                f"{key}.dtype must be float32, bfloat16, float16 or auto, got {self.dtype!r}"
            )
        if not isinstance(self.device, str) or not self.device:
            raise ApertusError(f"{key}.device must be a torch device name, got {self.device!r}")
        if not isinstance(self.model_args, dict):
            raise ApertusError(f"{key}.model_args must be a mapping, got {self.model_args!r}")
        reserved = {"pretrained", "dtype", "add_bos_token", "device", "batch_size"}
        if clash := reserved & set(self.model_args):
            raise ApertusError(
                f"{key}.model_args sets {', '.join(sorted(clash))}: those come from "
                f"the model folder, {key}.dtype / device / batch_size and each task's "
                "add_bos_token"
            )
        for name, value in self.model_args.items():
            if not isinstance(value, str | int | float | bool) or value is None:
                raise ApertusError(
                    f"{key}.model_args.{name} must be a string, number or boolean, got {value!r}"
                )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ApertusError(f"{key}.seed must be an integer >= 0, got {self.seed!r}")
        for name in ("include_defaults", "offline", "log_samples", "confirm_run_unsafe_code"):
            if not isinstance(getattr(self, name), bool):
                raise ApertusError(f"{key}.{name} must be true or false")
        if not isinstance(self.metadata, dict):
            raise ApertusError(f"{key}.metadata must be a mapping, got {self.metadata!r}")
        if not isinstance(self.gen_kwargs, dict):
            raise ApertusError(f"{key}.gen_kwargs must be a mapping, got {self.gen_kwargs!r}")
        for name, value in self.gen_kwargs.items():
            if not isinstance(value, str | int | float | bool):
                raise ApertusError(
                    f"{key}.gen_kwargs.{name} must be a string, number or boolean, got {value!r}"
                )
        if self.include_path is not None and (
            not isinstance(self.include_path, str) or not self.include_path
        ):
            raise ApertusError(
                f"{key}.include_path must be a folder of task YAMLs or null, "
                f"got {self.include_path!r}"
            )
        if self.data_home is not None and (
            not isinstance(self.data_home, str) or not self.data_home
        ):
            raise ApertusError(f"{key}.data_home must be a folder or null, got {self.data_home!r}")


@dataclass(frozen=True)
class InstructOptions(LmEvalOptions, key="evaluate.instruct"):
    """The instruct suite (``evaluate.instruct``, RECIPE §8's "Instruct" tasks): the keys of
    :class:`LmEvalOptions`, run on the chat models through their chat template; no tasks, no
    run (the workflow plans none)."""

    chat_template: ClassVar[bool] = True
    off_when_empty: ClassVar[bool] = True


def _is_auto_n(text: str) -> bool:
    head, _, n = text.partition(":")
    return head == "auto" and n.isdigit() and int(n) >= 1


@dataclass(frozen=True)
class Invocation:
    """One ``simple_evaluate`` call / one ``lm_eval`` command line."""

    tasks: tuple[str, ...]
    num_fewshot: int | None
    limit: int | float | None
    add_bos_token: bool


def data_home_env(data_home: str | os.PathLike | None) -> dict[str, str]:
    """The variables that point lm-eval's task code at the side data in `data_home`
    (:data:`DATA_HOME_DIRS`, absolute paths), or none for None. The folder must exist."""
    if data_home is None:
        return {}
    home = Path(data_home).absolute()
    if not home.is_dir():
        raise ApertusError(f"data_home {home} does not exist")
    return {name: str(home / folder) for name, folder in DATA_HOME_DIRS.items()}


def set_environment(
    offline: bool, unsafe_code: bool = False, data_home: str | os.PathLike | None = None
) -> dict[str, str]:
    """Set (before `datasets`, `evaluate` and `nltk` are imported, which read it once) and
    return the environment."""
    env = {**COMMON_ENV, **(OFFLINE_ENV if offline else {})}
    env.update(UNSAFE_CODE_ENV if unsafe_code else {})
    env.update(data_home_env(data_home))
    os.environ.update(env)
    return env


def include_dirs(
    tasks_dir: str | os.PathLike | None, include_path: str | os.PathLike | None = None
) -> list[str]:
    """The task folders lm-eval indexes after its built-in ones, in order: our task directory,
    then `include_path` (``evaluate.suite.include_path``). lm-eval lets a later folder's task,
    group or tag replace an earlier one of the same name. Each must exist."""
    dirs = [str(Path(d).absolute()) for d in (tasks_dir, include_path) if d is not None]
    for d in dirs:
        if not Path(d).is_dir():
            raise ApertusError(f"task directory {d} does not exist")
    return dirs


def task_manager(
    tasks_dir: str | os.PathLike | None,
    include_defaults: bool,
    metadata: dict[str, Any] | None = None,
    include_path: str | os.PathLike | None = None,
):
    """lm-eval's TaskManager over our task directory and `include_path` (and the built-in
    tasks if asked; see :func:`include_dirs` for the order), with `metadata` given to every
    task (as lm-eval's CLI gives its model arguments and ``--metadata``: RULER reads its
    tokenizer and lengths there). The built-in tasks' index comes from :func:`builtin_index`."""
    from lm_eval.tasks import TaskManager

    dirs = include_dirs(tasks_dir, include_path)
    if not dirs and not include_defaults:
        raise ApertusError("no tasks: give a task directory or set evaluate.suite.include_defaults")
    manager = TaskManager(
        include_path=dirs or None, include_defaults=False, metadata=metadata or None
    )
    if include_defaults:
        # As TaskManager(include_defaults=True) builds it: the built-in tasks first, each of
        # our directories' entries then replacing a built-in one of the same name.
        index = {**builtin_index(), **manager._index}
        manager.__dict__.update(_index_lists(index))
    return manager


def _index_lists(index: dict) -> dict[str, Any]:
    """TaskManager's attributes for `index`, as its constructor derives them."""
    from lm_eval.tasks._index import Kind

    def named(*kinds) -> list[str]:
        return sorted(name for name, entry in index.items() if entry.kind in kinds)

    return {
        "_index": index,
        "_all_tasks": sorted(index),
        "_all_subtasks": named(Kind.TASK, Kind.PY_TASK),
        "_all_groups": named(Kind.GROUP),
        "_all_tags": named(Kind.TAG),
    }


INDEX_FORMAT = 1  # bump when the stored form of an index entry changes


def builtin_index() -> dict:
    """lm-eval's index of its built-in tasks (``lm_eval.tasks._index.TaskIndex.build`` over
    ``lm_eval/tasks``: ~14,700 YAML files, 7 s), kept between processes in the user's cache
    (`apertus.core.diskcache`: ``~/.cache/apertus/lm-eval-index``; ``APERTUS_LMEVAL_CACHE=DIR``
    names another folder, ``off`` turns it off) under a key of lm-eval's version, the Python
    version and the path, size and modification time of every file under ``lm_eval/tasks``
    (bytecode aside): an edited, added or removed task file builds it again. Each evaluation
    step is a process of its own, so each would otherwise build it again."""
    from lm_eval.tasks import _index as lm_index

    root = Path(lm_index.__file__).parent
    cache = user_cache("lm-eval-index", "APERTUS_LMEVAL_CACHE")
    if cache is None:
        return lm_index.TaskIndex.build([root])
    key = _tree_key(root)
    stored = cache.get(key)
    if stored is not None:
        try:
            return {name: _entry(lm_index, record) for name, record in stored.items()}
        except (KeyError, TypeError, ValueError):
            pass
    index = lm_index.TaskIndex.build([root])
    records = {name: _record(entry) for name, entry in index.items()}
    # Kept only where the JSON form gives back the very same entries.
    restored = json.loads(json.dumps(records))
    if all(_entry(lm_index, restored[name]) == entry for name, entry in index.items()):
        cache.put(key, records)
    return index


def _tree_key(root: Path) -> str:
    from importlib.metadata import version

    digest = hashlib.sha256(
        f"{INDEX_FORMAT} {version('lm_eval')} {sys.version_info[:2]} {root}\n".encode()
    )
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
        for name in sorted(files):
            path = os.path.join(folder, name)
            stat = os.stat(path)
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _record(entry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "kind": entry.kind.name,
        "yaml_path": None if entry.yaml_path is None else str(entry.yaml_path),
        "cfg": entry.cfg,
        "tags": sorted(entry.tags),
    }


def _entry(lm_index, record: dict[str, Any]):
    path = record["yaml_path"]
    return lm_index.Entry(
        name=record["name"],
        kind=lm_index.Kind[record["kind"]],
        yaml_path=None if path is None else Path(path),
        cfg=record["cfg"],
        tags=set(record["tags"]),
    )


def output_types(manager, task: str) -> set[str]:
    """The output types of the leaf tasks of a task, group or tag (loads the tasks)."""
    loaded = manager.load([task])["tasks"]
    return {t.get_config("output_type") for t in loaded.values()}


def unknown_tasks(suite: Sequence[SuiteEntry], manager, where: str = "evaluate.suite") -> list[str]:
    """One message per entry of `suite` whose name lm-eval does not know, naming the entry by
    its key path (``evaluate.instruct.tasks[3]``): found from the task index alone, before any
    task's data is loaded."""
    import difflib

    known = manager.all_tasks
    problems = []
    for i, entry in enumerate(suite):
        if entry.task in known:
            continue
        hint = difflib.get_close_matches(entry.task, known, n=1)
        problems.append(
            f"{where}.tasks[{i}] is {entry.task!r}: lm-eval knows no task, group or tag of that "
            "name" + (f" (did you mean {hint[0]!r}?)" if hint else "") + "; the project's "
            f"tasks are in the task directory, lm-eval's built-in ones are only searched with "
            f"{where}.include_defaults: true"
        )
    return problems


# Packages lm-eval's task code imports that lm-eval itself does not install (its ifeval, math
# and ruler extras), by task-name prefix; the project's `instruct-eval` extra installs them.
TASK_PACKAGES = {
    "ifeval": ("langdetect", "immutabledict"),
    "minerva_math": ("antlr4", "math_verify"),
    "ruler": ("wonderwords", "html2text", "bs4"),
    "niah": ("wonderwords", "html2text", "bs4"),
}
INSTRUCT_EXTRA = "pip install -e '.[instruct-eval]'"


def missing_packages(suite: Sequence[SuiteEntry], where: str = "evaluate.suite") -> list[str]:
    """One message per entry whose task code needs a package that is not installed (found
    before lm-eval imports the task and fails on it)."""
    import importlib.util

    problems = []
    for i, entry in enumerate(suite):
        for prefix, modules in TASK_PACKAGES.items():
            if not entry.task.startswith(prefix):
                continue
            absent = [m for m in modules if importlib.util.find_spec(m) is None]
            if absent:
                problems.append(
                    f"{where}.tasks[{i}] is {entry.task!r}: its lm-eval task code needs "
                    f"{', '.join(absent)}, not installed; install them with {INSTRUCT_EXTRA}"
                )
    return problems


def plan_invocations(
    suite: Sequence[SuiteEntry], manager, where: str = "evaluate.suite"
) -> list[Invocation]:
    """Group the suite into lm-eval calls: entries with the same few-shot count, limit and BOS
    setting share a call, in the order they first appear. A task named twice, or unknown to
    lm-eval, is refused (every unknown name at once, before any task is loaded); `where` is
    the suite's key path in messages."""
    if problems := unknown_tasks(suite, manager, where) + missing_packages(suite, where):
        raise ApertusError("\n".join(problems))
    seen: set[str] = set()
    plan: dict[tuple, list[str]] = {}
    for i, entry in enumerate(suite):
        if entry.task in seen:
            raise ApertusError(f"{where}.tasks[{i}] names task {entry.task!r} twice")
        seen.add(entry.task)
        bos = entry.add_bos_token
        types = output_types(manager, entry.task)
        if bos is None:
            if len(types) > 1 and ROLLING in types:
                raise ApertusError(
                    f"suite task {entry.task} mixes {ROLLING} with {sorted(types - {ROLLING})}: "
                    "set its add_bos_token explicitly, or list its tasks separately"
                )
            bos = ROLLING not in types
        elif bos and ROLLING in types:
            raise ApertusError(
                f"suite task {entry.task} is {ROLLING}: add_bos_token true would score <s> "
                "after lm-eval's own BOS prefix (lm-eval issue #3333); use false or null"
            )
        plan.setdefault((entry.num_fewshot, entry.limit, bos), []).append(entry.task)
    return [Invocation(tuple(tasks), n, limit, bos) for (n, limit, bos), tasks in plan.items()]


def model_args(model_dir: str | os.PathLike, options: LmEvalOptions, add_bos_token: bool) -> dict:
    """The ``hf`` model arguments of one invocation (the same dict goes to the API and, as
    JSON, to the command line)."""
    return {
        "pretrained": str(Path(model_dir).absolute()),
        "dtype": options.dtype,
        "add_bos_token": add_bos_token,
        **options.model_args,
    }


# The shell variable of command.sh naming one folder with copies of both task folders, for
# lm_eval's --include_path, which takes one folder.
MERGED_INCLUDE = '"$include"'


def lm_eval_command(
    invocation: Invocation,
    model_dir: str | os.PathLike,
    tasks_dir: str | os.PathLike | None,
    options: LmEvalOptions,
    output_path: str,
) -> list[str]:
    """The ``lm_eval run`` argument list that reproduces one invocation. `output_path` is
    written as given (a shell word such as ``"$out/results-0.json"`` is left to the shell).
    With both a task directory and ``options.include_path``, ``--include_path`` is
    :data:`MERGED_INCLUDE`, the folder :func:`command_script` fills with copies of both."""
    seed = options.seed
    command = [
        "lm_eval",
        "run",
        "--model",
        "hf",
        "--model_args",
        json.dumps(model_args(model_dir, options, invocation.add_bos_token), sort_keys=False),
        "--tasks",
        ",".join(invocation.tasks),
        "--batch_size",
        str(options.batch_size),
        "--device",
        options.device,
        "--seed",
        f"{seed},{seed},{seed},{seed}",
    ]
    dirs = include_dirs(tasks_dir, options.include_path)
    if dirs:
        command += ["--include_path", dirs[0] if len(dirs) == 1 else MERGED_INCLUDE]
    if invocation.num_fewshot is not None:
        command += ["--num_fewshot", str(invocation.num_fewshot)]
    if invocation.limit is not None:
        command += ["--limit", str(invocation.limit)]
    if options.chat_template:
        command += ["--apply_chat_template", "--fewshot_as_multiturn", "true"]
    if options.confirm_run_unsafe_code:
        command += ["--confirm_run_unsafe_code"]
    if options.metadata:
        command += ["--metadata", json.dumps(options.metadata)]
    if options.gen_kwargs:
        command += ["--gen_kwargs", json.dumps(options.gen_kwargs)]
    if options.log_samples:
        command += ["--log_samples"]
    return [*command, "--output_path", output_path]


def command_script(
    invocations: Sequence[Invocation],
    model_dir: str | os.PathLike,
    tasks_dir: str | os.PathLike | None,
    options: LmEvalOptions,
    env: dict[str, str],
) -> str:
    """``command.sh``: the lm_eval lines of all invocations, run with the same environment."""
    lines = [
        "#!/usr/bin/env bash",
        f"# Reproduces lm_eval/results-<k>.json outside the pipeline (lm-eval {LM_EVAL_VERSION}).",
        "#   bash command.sh [OUTPUT_DIR]      (default: ./lm_eval_reproduced)",
        "# lm_eval writes OUTPUT_DIR/results-<k>_<date>.json. One line per few-shot / limit /",
        "# add_bos_token combination; add_bos_token is false for loglikelihood_rolling tasks,",
        "# where lm-eval puts the BOS in front itself (see apertus/evaluate/lmeval.py).",
        "set -euo pipefail",
        "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())),
        'out="${1:-lm_eval_reproduced}"',
    ]
    dirs = include_dirs(tasks_dir, options.include_path)
    if len(dirs) > 1:
        # lm_eval --include_path takes one folder: copies of ours, in folders named so that
        # include_path's come first, as lm-eval keeps the first of two same-named tasks of one
        # folder (and the last of two folders).
        lines += [
            'include="$(mktemp -d)"',
            """trap 'rm -rf "$include"' EXIT""",
            f'cp -R {shlex.quote(dirs[1])} "$include/1-include_path"',
            f'cp -R {shlex.quote(dirs[0])} "$include/2-tasks"',
        ]
    for k, invocation in enumerate(invocations):
        words = lm_eval_command(invocation, model_dir, tasks_dir, options, "OUTPUT")
        quoted = " ".join(w if w == MERGED_INCLUDE else shlex.quote(w) for w in words[:-1])
        lines.append(f'{quoted} "$out/results-{k}.json"')
    return "\n".join(lines) + "\n"


def check_chat_model(model_dir: Path) -> None:
    """Refuse a model folder that is not a chat export: no chat template, or a generation that
    does not end at the end-of-turn token (an export made without ``--chat``)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        generation = json.loads((model_dir / "generation_config.json").read_text())
    except (OSError, ValueError) as e:
        raise ApertusError(f"{model_dir}: not a chat export ({e})") from None
    if not getattr(tokenizer, "chat_template", None):
        raise ApertusError(
            f"{model_dir}: the tokenizer has no chat template; the instruct suite runs chat "
            "models through it"
        )
    end = tokenizer.get_vocab().get(END_OF_TURN)
    ends = generation.get("eos_token_id")
    ends = ends if isinstance(ends, list) else [ends]
    if end is None or end not in ends:
        raise ApertusError(
            f"{model_dir}: generation does not end at {END_OF_TURN} (generation_config.json "
            f"eos_token_id {generation.get('eos_token_id')!r}), so a generative task's answer "
            "would run past the assistant's turn; export the model with --chat"
        )


def run_suite(
    model_dir: str | os.PathLike,
    tasks_dir: str | os.PathLike | None,
    options: LmEvalOptions,
    out_dir: str | os.PathLike,
) -> dict[str, Any]:
    """Evaluate the model folder `model_dir` on `options.tasks` and write into `out_dir`::

        lm_eval/results-<k>.json        lm-eval's results of invocation k
        lm_eval/samples-<k>/<task>.jsonl  every scored request (when options.log_samples)
        command.sh                      the lm_eval command lines giving the same numbers

    Returns ``{"invocations": [...], "results": {task: {metric: value}}, "samples":
    {task: [...]}}`` (samples only in memory, for callers that check them).
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    where = options.config_key
    if not (model_dir / "config.json").is_file():
        raise ApertusError(f"{model_dir} is not a Hugging Face model folder (no config.json)")
    if not options.tasks:
        raise ApertusError(f"{where}.tasks is empty: nothing to run")
    if options.chat_template:
        check_chat_model(model_dir)
    env = set_environment(options.offline, options.confirm_run_unsafe_code, options.data_home)

    import lm_eval
    from lm_eval.api.registry import get_model
    from lm_eval.utils import handle_non_serializable

    # What lm-eval's CLI gives every task: the model arguments, then --metadata.
    metadata = {**model_args(model_dir, options, True), **options.metadata}
    manager = task_manager(tasks_dir, options.include_defaults, metadata, options.include_path)
    invocations = plan_invocations(options.tasks, manager, where)
    results_dir = out_dir / RESULTS_DIR
    if results_dir.exists():  # results of an earlier run with other invocations must not stay
        shutil.rmtree(results_dir)
    results_dir.mkdir(parents=True)
    # "auto" loads the dtype config.json declares: a bf16 release's, as a rule.
    dtype = "bfloat16" if options.dtype == "auto" else options.dtype
    bf16_matmuls_in_fp32(resolve_device(options.device, setting=f"{where}.device"), dtype)
    models: dict[str, Any] = {}
    merged: dict[str, dict[str, Any]] = {}
    all_samples: dict[str, list] = {}
    for k, invocation in enumerate(invocations):
        args = model_args(model_dir, options, invocation.add_bos_token)
        key = json.dumps(args, sort_keys=True)
        if key not in models:  # one load per distinct model arguments, not per invocation
            models[key] = get_model("hf").create_from_arg_obj(
                args, {"batch_size": options.batch_size, "device": options.device}
            )
        log.info("lm-eval call %d/%d: %s", k + 1, len(invocations), invocation)
        seed = options.seed
        results = lm_eval.simple_evaluate(
            model=models[key],
            tasks=list(invocation.tasks),
            num_fewshot=invocation.num_fewshot,
            limit=invocation.limit,
            batch_size=options.batch_size,
            device=options.device,
            task_manager=manager,
            log_samples=options.log_samples,
            apply_chat_template=options.chat_template,
            fewshot_as_multiturn=options.chat_template,
            confirm_run_unsafe_code=options.confirm_run_unsafe_code,
            gen_kwargs=dict(options.gen_kwargs) or None,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )
        if results is None:
            raise ApertusError(f"lm-eval returned no results for {invocation.tasks}")
        # What the CLI records for the same call (`simple_evaluate` names a pre-built model
        # by its class and cannot know its arguments).
        results["config"]["model"] = "hf"
        results["config"]["model_args"] = args
        if options.chat_template:  # as the CLI's tracker records a chat run
            from lm_eval.utils import hash_string

            template = models[key].chat_template(True)
            results.update(
                chat_template=template,
                chat_template_sha=hash_string(template),
                fewshot_as_multiturn=True,
                system_instruction=None,
            )
        samples = results.pop("samples", None) or {}
        atomic_write_text(
            results_dir / f"results-{k}.json",
            json.dumps(results, indent=2, default=handle_non_serializable, ensure_ascii=False),
        )
        for task, rows in samples.items():
            atomic_write_text(
                results_dir / f"samples-{k}" / f"{task}.jsonl",
                "".join(
                    json.dumps(r, default=handle_non_serializable, ensure_ascii=False) + "\n"
                    for r in rows
                ),
            )
        all_samples.update(samples)
        for task, metrics in results["results"].items():
            merged.setdefault(task, {}).update(metrics)
    atomic_write_text(
        out_dir / COMMAND_FILE, command_script(invocations, model_dir, tasks_dir, options, env)
    )
    (out_dir / COMMAND_FILE).chmod(0o755)
    return {
        "invocations": [
            {**vars(inv), "tasks": list(inv.tasks), "results": f"{RESULTS_DIR}/results-{k}.json"}
            for k, inv in enumerate(invocations)
        ],
        "results": merged,
        "samples": all_samples,
    }
