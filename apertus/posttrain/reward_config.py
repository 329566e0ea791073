"""What configures a QRPO reward (``reward:`` and ``rewards_by_category``), without torch: the
plan-time checks read it (`apertus.plan_inputs`), and `apertus.posttrain.rewards` builds the
reward from it. The kinds, rubric and judge template are described there."""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.config import shipped_path
from apertus.core.typed import Config, is_integer

REWARD_KINDS = ("chrf", "reward_model", "judge")
STANDARD = "standard"  # the category of a prompt that names none

DTYPE_NAMES = ("float32", "bfloat16")  # a model's dtype (rewards.DTYPES: the torch dtypes)
DEVICES = ("auto", "cpu", "cuda")

# The judge's scale. A rating is read as the text of the number, so "10" may be two tokens.
RATINGS: tuple[int, ...] = tuple(range(1, 11))

DEFAULT_RUBRIC = (
    "You are judging the answer of an AI assistant to a user. A good answer is helpful: it "
    "addresses what the user asked, in the user's language. It is honest: it states facts "
    "correctly and says when it is unsure. It is harmless and respectful: it refuses to help "
    "with clearly harmful requests, treats contested questions even-handedly and presents the "
    "main perspectives. It is clear and concise."
)
"""The judge's rubric when the config gives none. The presets pass the Swiss AI Charter (RECIPE.md
§7) with ``rubric_file: config/charter/swiss-ai-charter.md``, our paraphrase of it."""

JUDGE_TEMPLATE_FIELDS = ("rubric", "conversation", "answer")
JUDGE_TEMPLATE = (
    "{rubric}\n\n"
    "Conversation:\n{conversation}\n\n"
    "Answer to rate:\n{answer}\n\n"
    "Rate the answer from 1 (worst) to 10 (best) according to the rubric. "
    "Reply with the number only."
)
"""The judge's user message when the config names no ``template_file``: a Python format string
with the fields of :data:`JUDGE_TEMPLATE_FIELDS`. Recorded by its SHA-256 (``template_sha256``)
like a template file, so a change of either shows in the manifests."""


def check_choice(where: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ApertusError(f"{where} must be one of {', '.join(choices)}, not {value!r}")
    return value


def check_positive_int(where: str, value: Any) -> int:
    if not is_integer(value) or value < 1:
        raise ApertusError(f"{where} must be a positive integer, not {value!r}")
    return value


@dataclass(frozen=True)
class RewardConfig(Config, key="posttrain.qrpo_data.reward"):
    """``reward:`` of the QRPO data config, and each value of its ``rewards_by_category``.

    kind         chrf | reward_model | judge (default chrf)
    model        the reward model's or judge's Hugging Face folder (reward_model, judge)
    rubric       the judge's rubric text (default :data:`DEFAULT_RUBRIC`)
    rubric_file  a file holding the rubric (e.g. the Swiss AI Charter), instead of ``rubric``;
                 relative to the working directory, else to the checkout (``shipped_path``)
    template_file  a file holding the judge's prompt (default :data:`JUDGE_TEMPLATE`), a
                 format string with ``{rubric}``, ``{conversation}`` and ``{answer}``; found
                 like ``rubric_file``
    batch_size   conversations per forward pass (reward_model, judge)
    char_order, word_order, beta   chrF's parameters (sacrebleu's defaults 6, 0, 2)
    dtype        float32 | bfloat16, the model's dtype (reward_model, judge)
    device       auto | cpu | cuda (auto: cuda when available)

    One class serves several keys, so it is checked by :meth:`check` with the key it sits at
    (``SamplingConfig`` checks its own; :func:`build_reward` one given alone) rather than in
    ``__post_init__``, whose errors could only name ``config_key``.
    """

    kind: str
    model: str | None
    rubric: str | None
    rubric_file: str | None
    template_file: str | None
    batch_size: int
    char_order: int
    word_order: int
    beta: int
    dtype: str
    device: str

    def check(self, where: str | None = None) -> None:
        """Refuse a bad combination of keys, naming them under `where` (the key path this
        reward sits at; default ``posttrain.qrpo_data.reward``)."""
        where = where or self.config_key
        check_choice(f"{where}.kind", self.kind, REWARD_KINDS)
        check_choice(f"{where}.dtype", self.dtype, DTYPE_NAMES)
        check_choice(f"{where}.device", self.device, DEVICES)
        for name in ("char_order", "beta", "batch_size"):
            check_positive_int(f"{where}.{name}", getattr(self, name))
        if self.word_order < 0:
            raise ApertusError(f"{where}.word_order must be an integer >= 0")
        if self.kind == "chrf":
            if self.model is not None:
                raise ApertusError(f"{where}.model is not used by the chrf reward; remove it")
        elif not self.model:
            raise ApertusError(f"{where}.model: the {self.kind} reward needs a model folder")
        if self.rubric is not None and self.rubric_file is not None:
            raise ApertusError(f"{where}: give rubric or rubric_file, not both")
        if self.kind != "judge" and (self.rubric is not None or self.rubric_file is not None):
            raise ApertusError(f"{where}: a rubric is only used by the judge reward")
        if self.kind != "judge" and self.template_file is not None:
            raise ApertusError(f"{where}.template_file is only used by the judge reward")


def load_rubric(cfg: RewardConfig, where: str) -> str:
    """The judge's rubric: ``rubric``, the text of ``rubric_file`` or :data:`DEFAULT_RUBRIC`."""
    rubric = cfg.rubric if cfg.rubric is not None else DEFAULT_RUBRIC
    if cfg.rubric_file is not None:
        path = shipped_path(cfg.rubric_file)
        if not path.is_file():
            raise ApertusError(f"{where}.rubric_file {path} does not exist")
        rubric = path.read_text(encoding="utf-8").strip()
    if not rubric.strip():
        raise ApertusError(f"{where}: the judge's rubric is empty")
    return rubric


def load_judge_template(cfg: RewardConfig, where: str) -> str:
    """The judge's prompt: the text of ``template_file`` or :data:`JUDGE_TEMPLATE`, refused
    unless it is a format string with exactly the fields :data:`JUDGE_TEMPLATE_FIELDS`."""
    if cfg.template_file is None:
        return JUDGE_TEMPLATE
    path = shipped_path(cfg.template_file)
    if not path.is_file():
        raise ApertusError(f"{where}.template_file {path} does not exist")
    template = path.read_text(encoding="utf-8")
    try:
        found = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as e:
        raise ApertusError(f"{where}.template_file {path}: not a format string ({e})") from None
    if found != set(JUDGE_TEMPLATE_FIELDS):
        raise ApertusError(
            f"{where}.template_file {path}: a judge template has the fields "
            f"{', '.join('{' + f + '}' for f in JUDGE_TEMPLATE_FIELDS)} (found "
            f"{', '.join(sorted('{' + f + '}' for f in found)) or 'none'}; write a literal "
            "brace as {{ or }})"
        )
    return template


def rubric_files(
    reward: RewardConfig, routes: Mapping[str, RewardConfig] | None = None
) -> list[Path]:
    """The files the rewards read, rubrics and judge templates (as a step finds them:
    :func:`shipped_path`), each once, for a step's inputs (the manifest hashes them)."""
    configs = [reward, *(routes or {}).values()]
    files = [f for cfg in configs for f in (cfg.rubric_file, cfg.template_file)]
    return list(dict.fromkeys(shipped_path(f) for f in files if f is not None))


def _file_sha256(name: str | None) -> str | None:
    path = shipped_path(name) if name is not None else None
    return hashlib.sha256(path.read_bytes()).hexdigest() if path and path.is_file() else None


def describe_reward(cfg: RewardConfig) -> dict[str, Any]:
    """A reward's config as recorded, with ``rubric_sha256``, the SHA-256 of its rubric file's
    bytes (null without one): the file may change while its path in the config does not; and
    for a judge ``template_sha256``, that of its template file's bytes, else of the built-in
    :data:`JUDGE_TEMPLATE`'s UTF-8 text (null for other rewards)."""
    record: dict[str, Any] = asdict(cfg)
    record["rubric_sha256"] = _file_sha256(cfg.rubric_file)
    template = None
    if cfg.kind == "judge":
        template = _file_sha256(cfg.template_file) or (
            hashlib.sha256(JUDGE_TEMPLATE.encode()).hexdigest()
            if cfg.template_file is None
            else None
        )
    record["template_sha256"] = template
    return record
