"""Pointwise rewards for QRPO (RECIPE.md §7), chosen by config ``reward: {kind: ..., ...}``.

QRPO only needs a scalar reward R(x, y) per prompt x and completion y: the loss turns it into a
quantile among the reference policy's samples of the same prompt, so a reward's scale and offset
do not matter, only how it orders completions of one prompt. Three kinds:

``chrf`` (the offline default)
    Reference-based: chrF (character n-gram F-score, Popović 2015) of the completion against the
    prompt's reference answer, sentence-level with sacrebleu's ``CHRF``, scaled to [0, 1]. Needs
    no model, so the embedded default run can align a tiny model on its own data.
``reward_model``
    A Hugging Face sequence-classification reward model (the recipe's Skywork-Reward-V2): the
    conversation with the completion as the assistant turn is rendered with the reward model's
    own chat template and the score is its single logit.
``judge``
    An LLM judge (the recipe's judge with the Swiss AI Charter for controversial prompts): a
    causal LM is asked to rate the answer from 1 to 10 following a rubric, and the score is the
    expected rating under its next-token distribution over the ratings (G-Eval's
    probability-weighted score, Liu et al. 2023), a smooth score instead of a sampled integer.

Every reward has ``score(exchanges) -> list[float]``; :func:`build_reward` makes one from the
config. The reward model and the judge score ``batch_size`` conversations per forward pass
(left-padded, read at the last column) and refuse a conversation longer than their context,
naming its prompt. They read text, rendered with their own tokenizer and chat template, so
their tokenizer need not be the policy's. The judge's prompt is :data:`JUDGE_TEMPLATE` or a
``template_file``; manifests record the SHA-256 of either, and of the rubric file.
``apertus.posttrain.sampling.mean_reward`` answers held-out prompts with a model and
averages a reward, to compare the SFT model with the aligned one.

The recipe scores standard prompts with a reward model and controversial ones with a judge and
the Swiss AI Charter: :class:`RewardsByCategory` scores each completion with the reward of its
prompt's ``category`` (config ``rewards_by_category``; ``reward`` for every other category),
loading a model only when some prompt needs it.

The helpers that load Hugging Face folders (:func:`check_hf_folder`, :func:`load_hf_tokenizer`)
live here because both the rewards and the sampler (``apertus.posttrain.sampling``) use them.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from apertus.core import ApertusError
from apertus.core.device import load_pretrained, resolve_device
from apertus.core.progress import Progress
from apertus.posttrain.reward_config import (
    DTYPE_NAMES,
    JUDGE_TEMPLATE,
    RATINGS,
    STANDARD,
    RewardConfig,
    describe_reward,
    load_judge_template,
    load_rubric,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}

# --- what is scored --------------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange:
    """One prompt (messages without the final assistant turn), one completion text, the
    prompt's reference answer and its category (whose reward scores it)."""

    prompt_id: str
    messages: tuple[Mapping[str, str], ...]
    completion: str
    reference: str = ""
    category: str = STANDARD

    def conversation(self) -> list[dict[str, str]]:
        """The messages with the completion as the final assistant turn."""
        return [dict(m) for m in self.messages] + [
            {"role": "assistant", "content": self.completion}
        ]


class Reward(Protocol):
    """A reward: `score` gives one number per exchange; `progress`, when given, counts the
    scored completions (else a reward with a model shows its own)."""

    kind: str

    def score(
        self, exchanges: Sequence[Exchange], progress: Progress | None = None
    ) -> list[float]: ...


def _progress(progress: Progress | None, total: int, what: str) -> Any:
    """`progress` (a caller's, left open), else a new one for `total` completions."""
    return nullcontext(progress) if progress is not None else Progress(total, what, "completions")


# --- Hugging Face folders --------------------------------------------------------------------


def check_hf_folder(path: str | os.PathLike, what: str) -> Path:
    """A Hugging Face model folder that exists and has a config.json, or a clear error."""
    folder = Path(path)
    if not folder.is_dir():
        raise ApertusError(f"{what} folder {folder} does not exist")
    if not (folder / "config.json").is_file():
        raise ApertusError(f"{what} folder {folder} has no config.json (not a Hugging Face model)")
    return folder


def load_hf_tokenizer(folder: Path, what: str, *, chat: bool = True) -> PreTrainedTokenizerBase:
    """The folder's tokenizer; with `chat`, one that has a chat template."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as e:
        raise ApertusError(f"{what} folder {folder}: no loadable tokenizer ({e})") from None
    if chat and not tokenizer.chat_template:
        raise ApertusError(f"{what} folder {folder}: the tokenizer has no chat template")
    return tokenizer


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, str]],
    *,
    add_generation_prompt: bool,
    where: str,
) -> list[int]:
    """Token ids of `messages` in the tokenizer's chat template. The template writes its own
    special tokens (the tokenizer's post-processor would otherwise add a second ``<s>``, or a
    ``</s>`` for a tokenizer that appends one), so nothing else is added."""
    from jinja2 import TemplateError

    try:
        encoded = tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
            return_dict=True,
        )
    except TemplateError as e:
        raise ApertusError(f"{where}: the chat template refuses the messages ({e})") from None
    return list(encoded["input_ids"])


# --- chrF ------------------------------------------------------------------------------------


def chrf_reward(hypothesis: str, reference: str, metric: Any) -> float:
    """chrF of `hypothesis` against `reference` in [0, 1]: sacrebleu's sentence-level chrF
    (Popović 2015, character n-gram F-beta, beta = 2 by default) divided by 100."""
    return metric.sentence_score(hypothesis, [reference]).score / 100.0


class ChrfReward:
    kind = "chrf"

    def __init__(self, char_order: int = 6, word_order: int = 0, beta: int = 2) -> None:
        from sacrebleu.metrics import CHRF

        self.metric = CHRF(char_order=char_order, word_order=word_order, beta=beta)

    def score(self, exchanges: Sequence[Exchange], progress: Progress | None = None) -> list[float]:
        for ex in exchanges:
            if not ex.reference.strip():
                raise ApertusError(
                    f"prompt {ex.prompt_id}: the chrf reward needs a non-empty reference answer"
                )
        scores = [chrf_reward(ex.completion, ex.reference, self.metric) for ex in exchanges]
        if progress is not None:
            progress.update(len(exchanges))
        return scores


# --- reward model ----------------------------------------------------------------------------


def model_context(model: Any) -> int | None:
    """The longest sequence a Hugging Face model takes (``max_position_embeddings``), or None
    when its config does not say."""
    value = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def check_context(ids: Sequence[int], context: int | None, what: str, prompt_id: str) -> None:
    """Refuse a sequence longer than a model's context, naming the prompt: a model would
    score it with positions it was never trained on (or fail deep inside attention)."""
    if context is not None and len(ids) > context:
        raise ApertusError(
            f"prompt {prompt_id}: {len(ids)} tokens for the {what}, longer than its context of "
            f"{context} (shorten the prompt or posttrain.qrpo_data.max_new_tokens)"
        )


def left_padded(
    sequences: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, position ids) of `sequences` padded on the left, so every
    sequence ends at the last column; positions count real tokens only."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        if seq:
            ids[i, width - len(seq) :] = torch.tensor(list(seq))
            mask[i, width - len(seq) :] = 1
    return ids, mask, (mask.cumsum(-1) - 1).clamp_min(0)


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """`items` in consecutive slices of `size` (the last may be shorter)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class RewardModelReward:
    """A sequence-classification reward model with one label; the score is its logit.

    The reward model reads the text of the conversation rendered with its own tokenizer and
    chat template, so its tokenizer may differ from the policy's; what differs is the length,
    checked against its own context (an error naming the prompt). Conversations are scored
    `batch_size` at a time, left-padded and passed as embeddings: transformers pools the logit
    at the rightmost token that is not ``pad_token_id``, which picks the wrong token when a chat
    ends with a token equal to the pad token (tokenizers whose pad is eos); without input ids it
    pools the last column, which left padding makes every sequence's last token.
    """

    kind = "reward_model"

    def __init__(
        self, model_dir: str | os.PathLike, *, dtype: str, device: str, batch_size: int = 1
    ) -> None:
        from transformers import AutoModelForSequenceClassification

        folder = check_hf_folder(model_dir, "reward model")
        self.tokenizer = load_hf_tokenizer(folder, "reward model")
        self.device = resolve_device(device, setting="reward model device")
        self.batch_size = batch_size
        self.model = load_pretrained(
            AutoModelForSequenceClassification, str(folder), dtype=DTYPES[dtype], device=self.device
        )
        if self.model.config.num_labels != 1:
            raise ApertusError(
                f"reward model {folder} has {self.model.config.num_labels} labels; a reward "
                "model has one (a scalar score)"
            )
        text_config = self.model.config.get_text_config()
        # Never compared with the inputs (embeddings are passed), but transformers refuses a
        # batch of more than one sequence without it.
        if text_config.pad_token_id is None:
            text_config.pad_token_id = 0
        self.pad_id = text_config.pad_token_id
        self.context = model_context(self.model)

    @torch.no_grad()
    def score(self, exchanges: Sequence[Exchange], progress: Progress | None = None) -> list[float]:
        scores: list[float] = []
        embed = self.model.get_input_embeddings()
        with _progress(progress, len(exchanges), "reward model") as progress:
            for batch in chunks(exchanges, self.batch_size):
                chats = []
                for ex in batch:
                    ids = render_chat(
                        self.tokenizer,
                        ex.conversation(),
                        add_generation_prompt=False,
                        where=f"prompt {ex.prompt_id}",
                    )
                    check_context(ids, self.context, "reward model", ex.prompt_id)
                    chats.append(ids)
                ids, mask, positions = left_padded(chats, self.pad_id)
                logits = self.model(
                    inputs_embeds=embed(ids.to(self.device)),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                    use_cache=False,
                ).logits
                scores.extend(float(v) for v in logits[:, 0].float().cpu())
                progress.update(len(batch))
        return scores


# --- LLM judge -------------------------------------------------------------------------------


def judge_prompt(
    rubric: str,
    messages: Sequence[Mapping[str, str]],
    answer: str,
    template: str = JUDGE_TEMPLATE,
) -> str:
    """The judge's user message: `template` (:data:`JUDGE_TEMPLATE` or a ``template_file``)
    filled with the rubric, the conversation so far and the answer."""
    conversation = "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages)
    return template.format(rubric=rubric, conversation=conversation, answer=answer)


def rating_probabilities(
    rating_tokens: Mapping[int, Sequence[int]],
    next_token_logprobs: Callable[[tuple[int, ...]], torch.Tensor],
) -> dict[int, float]:
    """Probability that the judge's reply is exactly each rating.

    A rating whose text is several tokens ("10" may be "1" "0") has the probability of its token
    sequence. A rating that is a token prefix of other ratings ("1" of "10") gets the mass of its
    tokens minus that of its nearest extensions: "1" followed by "0" is a 10, not a 1.
    `next_token_logprobs(prefix)` gives the log-probabilities of the token after the prompt and
    `prefix`.
    """
    cache: dict[tuple[int, ...], torch.Tensor] = {}

    def logprobs(prefix: tuple[int, ...]) -> torch.Tensor:
        if prefix not in cache:
            cache[prefix] = next_token_logprobs(prefix).double()
        return cache[prefix]

    seqs = {r: tuple(t) for r, t in rating_tokens.items()}
    sequence_p = {}
    for rating, tokens in seqs.items():
        logp = sum(float(logprobs(tokens[:i])[tok]) for i, tok in enumerate(tokens))
        sequence_p[rating] = math.exp(logp)

    def extends(longer: tuple[int, ...], shorter: tuple[int, ...]) -> bool:
        return len(longer) > len(shorter) and longer[: len(shorter)] == shorter

    exact = {}
    for rating, tokens in seqs.items():
        longer = [r for r, t in seqs.items() if extends(t, tokens)]
        nearest = [
            r for r in longer if not any(extends(seqs[r], seqs[m]) for m in longer if m != r)
        ]
        exact[rating] = max(0.0, sequence_p[rating] - sum(sequence_p[r] for r in nearest))
    return exact


def expected_rating(probabilities: Mapping[int, float]) -> float:
    """The expected rating under the judge's probabilities renormalised over the ratings
    (G-Eval, Liu et al. 2023: score = sum_k k p(k) / sum_k p(k))."""
    total = sum(probabilities.values())
    if not total > 0:
        raise ApertusError("the judge gives probability 0 to every rating")
    return sum(r * p for r, p in probabilities.items()) / total


class JudgeReward:
    """A causal LM rating answers 1-10 by a rubric; the score is its expected rating.

    `batch_size` prompts per forward pass: every prompt is extended by each token prefix of a
    multi-token rating ("1" of "10"), and all these sequences, left-padded, share the batches;
    the log-probabilities of the next token after each are read from the last column."""

    kind = "judge"

    def __init__(
        self,
        model_dir: str | os.PathLike,
        *,
        rubric: str,
        dtype: str,
        device: str,
        template: str = JUDGE_TEMPLATE,
        batch_size: int = 1,
    ) -> None:
        from transformers import AutoModelForCausalLM

        folder = check_hf_folder(model_dir, "judge")
        self.tokenizer = load_hf_tokenizer(folder, "judge")
        self.device = resolve_device(device, setting="judge device")
        self.model = load_pretrained(
            AutoModelForCausalLM, str(folder), dtype=DTYPES[dtype], device=self.device
        )
        self.rubric = rubric
        self.template = template
        self.batch_size = batch_size
        self.context = model_context(self.model)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else 0
        self.rating_tokens = {
            r: self.tokenizer.encode(str(r), add_special_tokens=False) for r in RATINGS
        }
        empty = [r for r, t in self.rating_tokens.items() if not t]
        if empty or len({tuple(t) for t in self.rating_tokens.values()}) != len(RATINGS):
            raise ApertusError(f"judge {folder}: its tokenizer does not tell the ratings apart")
        # The prefixes after which the judge's next-token distribution is read.
        self.prefixes = sorted(
            {tuple(t[:i]) for t in self.rating_tokens.values() for i in range(len(t))}
        )

    @torch.no_grad()
    def _last_logprobs(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """log-softmax of the next token after each sequence (rows), in float32 on the CPU."""
        ids, mask, positions = left_padded(sequences, self.pad_id)
        logits = self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=False,
            logits_to_keep=1,
        ).logits
        return torch.log_softmax(logits[:, -1].float(), dim=-1).cpu()

    def prompt_ids(self, ex: Exchange) -> list[int]:
        text = judge_prompt(self.rubric, ex.messages, ex.completion, self.template)
        return render_chat(
            self.tokenizer,
            [{"role": "user", "content": text}],
            add_generation_prompt=True,
            where=f"prompt {ex.prompt_id}",
        )

    def score(self, exchanges: Sequence[Exchange], progress: Progress | None = None) -> list[float]:
        scores: list[float] = []
        longest = max(len(t) for t in self.rating_tokens.values())
        with _progress(progress, len(exchanges), "judge") as progress:
            for batch in chunks(exchanges, self.batch_size):
                prompts = []
                for ex in batch:
                    ids = self.prompt_ids(ex)
                    # The longest rating is read token by token after the prompt.
                    check_context(ids + [0] * (longest - 1), self.context, "judge", ex.prompt_id)
                    prompts.append(ids)
                rows = [ids + list(prefix) for ids in prompts for prefix in self.prefixes]
                logprobs = self._last_logprobs(rows)
                for k in range(len(prompts)):
                    table = {
                        prefix: logprobs[k * len(self.prefixes) + j]
                        for j, prefix in enumerate(self.prefixes)
                    }
                    probs = rating_probabilities(self.rating_tokens, table.__getitem__)
                    scores.append(expected_rating(probs))
                progress.update(len(batch))
        return scores


# --- construction and reporting --------------------------------------------------------------


def build_reward(
    config: RewardConfig | Mapping[str, Any] | None, *, where: str | None = None
) -> Reward:
    """The reward the config names (``reward:``; default chrF); `where` is its key path in
    error messages (default ``posttrain.qrpo_data.reward``)."""
    cfg = config if isinstance(config, RewardConfig) else RewardConfig.from_dict(config)
    where = where or cfg.config_key
    cfg.check(where)
    if cfg.kind == "chrf":
        return ChrfReward(cfg.char_order, cfg.word_order, cfg.beta)
    if cfg.kind == "reward_model":
        return RewardModelReward(
            cfg.model, dtype=cfg.dtype, device=cfg.device, batch_size=cfg.batch_size
        )
    return JudgeReward(
        cfg.model,
        rubric=load_rubric(cfg, where),
        template=load_judge_template(cfg, where),
        dtype=cfg.dtype,
        device=cfg.device,
        batch_size=cfg.batch_size,
    )


class RewardsByCategory:
    """Each completion scored by the reward of its prompt's category (RECIPE.md §7: a reward
    model for standard prompts, an LLM judge with the Swiss AI Charter for controversial ones).

    `routes` maps a category to its reward (config ``rewards_by_category``); every other
    category, ``standard`` included, gets `default` (config ``reward``). All samples of a
    prompt, its reference samples included, share its category, so they are scored by one
    reward. That is what makes mixing reward scales across categories sound for QRPO: its
    quantile reward is each completion's empirical CDF among the reference rewards of its own
    prompt, invariant to any increasing transform of the reward, so a judge's 1-10 ratings and
    a reward model's logits never meet in one comparison. (A mean over prompts of different
    categories does mix scales: reports give per-category means beside it.)

    A reward is built when a completion first needs it, so a run without controversial prompts
    never loads the judge, and at most one is held at a time (building another drops it): a
    reward model and a judge need not fit in memory together. Rubric files are read when the
    object is made: a missing one fails before any model is loaded.
    """

    kind = "by_category"

    def __init__(
        self,
        default: RewardConfig | Mapping[str, Any] | None = None,
        routes: Mapping[str, RewardConfig | Mapping[str, Any]] | None = None,
        *,
        where: str = "posttrain.qrpo_data",
    ) -> None:
        # Each reward by its key under `where`: "reward", "rewards_by_category.<category>".
        self.configs: dict[str, RewardConfig] = {}
        entries = [("reward", default)] + [
            (f"rewards_by_category.{category}", cfg) for category, cfg in (routes or {}).items()
        ]
        for route, cfg in entries:
            if not isinstance(cfg, RewardConfig):
                cfg = RewardConfig.from_dict(cfg)
            cfg.check(f"{where}.{route}")
            if cfg.kind == "judge":
                load_rubric(cfg, f"{where}.{route}")
                load_judge_template(cfg, f"{where}.{route}")
            self.configs[route] = cfg
        self.where = where
        self.loaded: dict[str, Reward] = {}
        self.built: list[str] = []  # the reward keys built, in order (a reward may be rebuilt)

    def route(self, category: str) -> str:
        """The key of the reward scoring a prompt of `category`: its own
        ``rewards_by_category.<category>`` when the config has one, else ``reward``."""
        own = f"rewards_by_category.{category}"
        return own if own in self.configs else "reward"

    def reward(self, route: str) -> Reward:
        if route not in self.loaded:
            self.loaded.clear()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self.loaded[route] = build_reward(self.configs[route], where=f"{self.where}.{route}")
            self.built.append(route)
        return self.loaded[route]

    def score(self, exchanges: Sequence[Exchange], progress: Progress | None = None) -> list[float]:
        by_route: dict[str, list[int]] = {}
        for i, ex in enumerate(exchanges):
            by_route.setdefault(self.route(ex.category), []).append(i)
        scores: list[float] = [math.nan] * len(exchanges)
        for route, indices in by_route.items():
            batch = [exchanges[i] for i in indices]
            reward = self.reward(route)
            # A reward written elsewhere (a test's) may not take `progress`.
            values = reward.score(batch) if progress is None else reward.score(batch, progress)
            for i, value in zip(indices, values, strict=True):
                if not math.isfinite(value):
                    # A NaN would make every quantile of its prompt meaningless.
                    raise ApertusError(
                        f"prompt {exchanges[i].prompt_id}: the reward {self.where}.{route} "
                        f"gives {value} to one of its completions (a reward is a finite number)"
                    )
                scores[i] = value
        return scores

    def record(self, categories: Mapping[str, str]) -> dict[str, Any]:
        """What the rewards were, for a step's record: per category of `categories` (prompt id
        -> category), its prompt count and the key of the reward that scored it (:meth:`route`);
        per reward key, its config with its rubric's SHA-256."""
        counts = Counter(categories.values())
        return {
            "categories": {
                category: {"prompts": n, "reward": self.route(category)}
                for category, n in sorted(counts.items())
            },
            "rewards": {route: describe_reward(cfg) for route, cfg in self.configs.items()},
        }


@dataclass
class RewardSummary:
    """Mean reward overall, per language and per prompt category. Rewards of different
    categories may be on different scales (:class:`RewardsByCategory`): compare policies per
    category, or per prompt."""

    count: int
    mean: float
    per_language: dict[str, dict[str, float]] = field(default_factory=dict)
    per_category: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean": self.mean,
            "per_language": self.per_language,
            "per_category": self.per_category,
        }


def _group_means(keys: Sequence[str], rewards: Sequence[float]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[float]] = {}
    for key, r in zip(keys, rewards, strict=True):
        groups.setdefault(key, []).append(r)
    return {
        key: {"count": len(rs), "mean": math.fsum(rs) / len(rs)}
        for key, rs in sorted(groups.items())
    }


def summarize_rewards(
    languages: Sequence[str], rewards: Sequence[float], categories: Sequence[str] | None = None
) -> RewardSummary:
    if len(languages) != len(rewards) or not rewards:
        raise ApertusError("no rewards to summarize")
    categories = [STANDARD] * len(rewards) if categories is None else categories
    return RewardSummary(
        count=len(rewards),
        mean=math.fsum(rewards) / len(rewards),
        per_language=_group_means(languages, rewards),
        per_category=_group_means(categories, rewards),
    )
