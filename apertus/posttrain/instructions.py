"""The project's multilingual instruction set, and the readers for user conversation data
(RECIPE.md §7: SFT on chat conversations, QRPO on prompts with rewards).

A real run fine-tunes on millions of curated conversations; the embedded default run has a
tiny model and no such data, so the project authors a small set it can actually learn: short
tasks whose answer follows from the prompt (add two numbers, pick the larger, count a word's
letters, repeat a phrase, reverse a list, translate a word, name a capital), phrased in
German, English, French, Italian, Romansh and Spanish (the languages of the sample corpus).
Every answer is computed, so every conversation has a reference answer a reward can check.

Formats (JSON Lines, one object per line)::

    conversation  {"id": str, "language": str,
                   "messages": [{"role": "system"|"developer"|"user"|"assistant",
                                 "content": str}, ...]}          # ends with an assistant turn
    prompt        {"id": str, "language": str,
                   "messages": [... the conversation without its final assistant turn ...],
                   "reference": str}                             # that turn's content

Both may carry ``"category": str`` (absent or null means ``"standard"``): QRPO scores a prompt
with its category's reward (``posttrain.qrpo_data.rewards_by_category``, RECIPE.md §7:
``controversial`` prompts by an LLM judge with the Swiss AI Charter). A conversation's category
passes to its prompt. The built-in set has none: all its prompts are standard.

Conversations are made from templates with seeded variation (`make_instruction_set`): some
start with a system message, some have two user/assistant exchanges. The three splits are
disjoint by prompt (the messages before the final answer): ``train`` conversations for SFT,
``qrpo`` prompts for QRPO, ``heldout`` prompts for reporting rewards. Ids are
``{split}-{index:05d}-{language}-{task}[+{task}]`` (the tasks of the exchanges in order).

User data (`read_conversations`, `load_hub_conversations`) is a JSONL file or a Hugging Face
dataset in the conversation format; a bad line or row is an ApertusError naming the file and
line (or dataset and row). Entry point (StepRun stage "posttrain", step "instructions")::

    python -m apertus.posttrain.instructions --config JSON --manifest M --output DIR

writes ``DIR/train.jsonl``, ``DIR/qrpo.jsonl`` and ``DIR/heldout.jsonl``. Config
(`InstructionConfig`): ``seed``, ``languages``, ``tasks``, ``train``, ``qrpo``, ``heldout``
(counts), ``system_fraction``, ``multi_turn_fraction`` and ``source`` (null: the built-in
set; ``{"jsonl": PATH}`` or ``{"hub": NAME, "split": "train"}``: user conversations, shuffled
with the seed and split into ``heldout``, ``qrpo`` and, of the rest, at most ``train`` (null:
all) for SFT).
"""

from __future__ import annotations

import json
import os
import random
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.files import atomic_open, canonical_json, read_jsonl
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config, is_integer

__all__ = [
    "LANGUAGES",
    "ROLES",
    "SPLITS",
    "TASKS",
    "InstructionConfig",
    "InstructionSet",
    "check_conversation",
    "check_prompt",
    "load_hub_conversations",
    "main",
    "make_instruction_set",
    "read_conversations",
    "read_prompts",
    "split_conversations",
    "to_prompt",
    "write_jsonl",
]

ROLES = ("system", "developer", "user", "assistant")  # the chat format's roles (RECIPE.md §7)
LANGUAGES = ("de", "en", "fr", "it", "rm", "es")
SPLITS = ("train", "qrpo", "heldout")

# ---------------------------------------------------------------------------------------------
# Templates. Romansh is Rumantsch Grischun. Answers are bare results (a number, a word, the
# phrase, the list), so a reward can compare them with the reference exactly.

_QUESTIONS: dict[str, dict[str, str]] = {
    "add": {
        "de": "Was ist {a} plus {b}?",
        "en": "What is {a} plus {b}?",
        "fr": "Combien font {a} plus {b} ?",
        "it": "Quanto fa {a} più {b}?",
        "rm": "Quant fa {a} plus {b}?",
        "es": "¿Cuánto es {a} más {b}?",
    },
    "larger": {
        "de": "Welche Zahl ist größer, {a} oder {b}?",
        "en": "Which number is larger, {a} or {b}?",
        "fr": "Quel nombre est le plus grand, {a} ou {b} ?",
        "it": "Quale numero è più grande, {a} o {b}?",
        "rm": "Tge dumber è pli grond, {a} u {b}?",
        "es": "¿Qué número es mayor, {a} o {b}?",
    },
    "count": {
        "de": "Wie viele Buchstaben hat das Wort „{word}“?",
        "en": 'How many letters are in the word "{word}"?',
        "fr": "Combien de lettres y a-t-il dans le mot « {word} » ?",
        "it": 'Quante lettere ha la parola "{word}"?',
        "rm": 'Quantas letras ha il pled "{word}"?',
        "es": '¿Cuántas letras tiene la palabra "{word}"?',
    },
    "repeat": {
        "de": "Sprich mir nach: {phrase}",
        "en": "Repeat after me: {phrase}",
        "fr": "Répète après moi : {phrase}",
        "it": "Ripeti dopo di me: {phrase}",
        "rm": "Repeta suenter mai: {phrase}",
        "es": "Repite después de mí: {phrase}",
    },
    "reverse": {
        "de": "Kehre diese Liste um: {items}",
        "en": "Reverse this list: {items}",
        "fr": "Inverse cette liste : {items}",
        "it": "Inverti questa lista: {items}",
        "rm": "Volva questa glista: {items}",
        "es": "Invierte esta lista: {items}",
    },
    "translate": {
        "de": "Übersetze das Wort „{word}“ {into}.",
        "en": 'Translate the word "{word}" {into}.',
        "fr": "Traduis le mot « {word} » {into}.",
        "it": 'Traduci la parola "{word}" {into}.',
        "rm": 'Translatescha il pled "{word}" {into}.',
        "es": 'Traduce la palabra "{word}" {into}.',
    },
    "capital": {
        "de": "Was ist die Hauptstadt {of}?",
        "en": "What is the capital {of}?",
        "fr": "Quelle est la capitale {of} ?",
        "it": "Qual è la capitale {of}?",
        "rm": "Tge è la chapitala {of}?",
        "es": "¿Cuál es la capital {of}?",
    },
}
TASKS = tuple(_QUESTIONS)

# "into <language>" in each prompt language, for the translation task.
_INTO: dict[str, dict[str, str]] = {
    "de": {
        "de": "ins Deutsche",
        "en": "ins Englische",
        "fr": "ins Französische",
        "it": "ins Italienische",
        "rm": "ins Rätoromanische",
        "es": "ins Spanische",
    },
    "en": {
        "de": "into German",
        "en": "into English",
        "fr": "into French",
        "it": "into Italian",
        "rm": "into Romansh",
        "es": "into Spanish",
    },
    "fr": {
        "de": "en allemand",
        "en": "en anglais",
        "fr": "en français",
        "it": "en italien",
        "rm": "en romanche",
        "es": "en espagnol",
    },
    "it": {
        "de": "in tedesco",
        "en": "in inglese",
        "fr": "in francese",
        "it": "in italiano",
        "rm": "in romancio",
        "es": "in spagnolo",
    },
    "rm": {
        "de": "en tudestg",
        "en": "en englais",
        "fr": "en franzos",
        "it": "en talian",
        "rm": "en rumantsch",
        "es": "en spagnol",
    },
    "es": {
        "de": "al alemán",
        "en": "al inglés",
        "fr": "al francés",
        "it": "al italiano",
        "rm": "al romanche",
        "es": "al español",
    },
}

# A small dictionary: one concept per row, its word in (de, en, fr, it, rm, es).
_WORDS: tuple[tuple[str, ...], ...] = (
    ("Hund", "dog", "chien", "cane", "chaun", "perro"),
    ("Katze", "cat", "chat", "gatto", "giat", "gato"),
    ("Haus", "house", "maison", "casa", "chasa", "casa"),
    ("Wasser", "water", "eau", "acqua", "aua", "agua"),
    ("Brot", "bread", "pain", "pane", "paun", "pan"),
    ("Sonne", "sun", "soleil", "sole", "sulegl", "sol"),
    ("Mond", "moon", "lune", "luna", "glina", "luna"),
    ("Baum", "tree", "arbre", "albero", "planta", "árbol"),
    ("Buch", "book", "livre", "libro", "cudesch", "libro"),
    ("Berg", "mountain", "montagne", "montagna", "muntogna", "montaña"),
    ("Apfel", "apple", "pomme", "mela", "mail", "manzana"),
    ("Milch", "milk", "lait", "latte", "latg", "leche"),
    ("Freund", "friend", "ami", "amico", "amitg", "amigo"),
    ("Schule", "school", "école", "scuola", "scola", "escuela"),
)
_WORD_COLUMN = {lang: i for i, lang in enumerate(LANGUAGES)}

# Countries: per language, ("capital <of the country>" phrase, capital).
_CAPITALS: tuple[dict[str, tuple[str, str]], ...] = (
    {
        "de": ("der Schweiz", "Bern"),
        "en": ("of Switzerland", "Bern"),
        "fr": ("de la Suisse", "Berne"),
        "it": ("della Svizzera", "Berna"),
        "rm": ("da la Svizra", "Berna"),
        "es": ("de Suiza", "Berna"),
    },
    {
        "de": ("von Deutschland", "Berlin"),
        "en": ("of Germany", "Berlin"),
        "fr": ("de l'Allemagne", "Berlin"),
        "it": ("della Germania", "Berlino"),
        "rm": ("da la Germania", "Berlin"),
        "es": ("de Alemania", "Berlín"),
    },
    {
        "de": ("von Frankreich", "Paris"),
        "en": ("of France", "Paris"),
        "fr": ("de la France", "Paris"),
        "it": ("della Francia", "Parigi"),
        "rm": ("da la Frantscha", "Paris"),
        "es": ("de Francia", "París"),
    },
    {
        "de": ("von Italien", "Rom"),
        "en": ("of Italy", "Rome"),
        "fr": ("de l'Italie", "Rome"),
        "it": ("dell'Italia", "Roma"),
        "rm": ("da l'Italia", "Roma"),
        "es": ("de Italia", "Roma"),
    },
    {
        "de": ("von Spanien", "Madrid"),
        "en": ("of Spain", "Madrid"),
        "fr": ("de l'Espagne", "Madrid"),
        "it": ("della Spagna", "Madrid"),
        "rm": ("da la Spagna", "Madrid"),
        "es": ("de España", "Madrid"),
    },
    {
        "de": ("von Österreich", "Wien"),
        "en": ("of Austria", "Vienna"),
        "fr": ("de l'Autriche", "Vienne"),
        "it": ("dell'Austria", "Vienna"),
        "rm": ("da l'Austria", "Vienna"),
        "es": ("de Austria", "Viena"),
    },
    {
        "de": ("von Portugal", "Lissabon"),
        "en": ("of Portugal", "Lisbon"),
        "fr": ("du Portugal", "Lisbonne"),
        "it": ("del Portogallo", "Lisbona"),
        "rm": ("dal Portugal", "Lissabon"),
        "es": ("de Portugal", "Lisboa"),
    },
    {
        "de": ("von Griechenland", "Athen"),
        "en": ("of Greece", "Athens"),
        "fr": ("de la Grèce", "Athènes"),
        "it": ("della Grecia", "Atene"),
        "rm": ("da la Grezia", "Atena"),
        "es": ("de Grecia", "Atenas"),
    },
)

_SYSTEM: dict[str, tuple[str, ...]] = {
    "de": ("Du bist ein hilfreicher Assistent. Antworte kurz.", "Antworte nur mit dem Ergebnis."),
    "en": ("You are a helpful assistant. Answer briefly.", "Answer with the result only."),
    "fr": (
        "Tu es un assistant serviable. Réponds brièvement.",
        "Réponds uniquement avec le résultat.",
    ),
    "it": (
        "Sei un assistente disponibile. Rispondi brevemente.",
        "Rispondi solo con il risultato.",
    ),
    "rm": ("Ti es in assistent servetschaivel. Respunda curt.", "Respunda mo cun il resultat."),
    "es": ("Eres un asistente útil. Responde brevemente.", "Responde solo con el resultado."),
}


def _word(lang: str, concept: int) -> str:
    return _WORDS[concept][_WORD_COLUMN[lang]]


def _exchange(task: str, lang: str, rng: random.Random) -> tuple[str, str]:
    """One user question of `task` in `lang` and its computed answer."""
    question = _QUESTIONS[task][lang]
    if task == "add":
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        return question.format(a=a, b=b), str(a + b)
    if task == "larger":
        a, b = rng.sample(range(0, 100), 2)
        return question.format(a=a, b=b), str(max(a, b))
    if task == "count":
        word = _word(lang, rng.randrange(len(_WORDS)))
        # Letters are Unicode characters of the NFC form (é is one letter).
        return question.format(word=word), str(len(unicodedata.normalize("NFC", word)))
    if task == "repeat":
        phrase = " ".join(_word(lang, c) for c in rng.sample(range(len(_WORDS)), rng.randint(2, 4)))
        return question.format(phrase=phrase), phrase
    if task == "reverse":
        items = [str(rng.randint(0, 9)) for _ in range(rng.randint(3, 5))]
        return question.format(items=", ".join(items)), ", ".join(reversed(items))
    if task == "translate":
        concept = rng.randrange(len(_WORDS))
        target = rng.choice([t for t in LANGUAGES if t != lang])
        return (
            question.format(word=_word(lang, concept), into=_INTO[lang][target]),
            _word(target, concept),
        )
    if task == "capital":
        of, capital = rng.choice(_CAPITALS)[lang]
        return question.format(of=of), capital
    raise ApertusError(f"unknown instruction task {task!r}; known: {', '.join(TASKS)}")


# ---------------------------------------------------------------------------------------------
# Configuration and generation


@dataclass(frozen=True)
class InstructionConfig(Config, key="posttrain.instructions"):
    """The `posttrain.instructions` config subtree (see the module doc)."""

    seed: int
    languages: tuple[str, ...]
    tasks: tuple[str, ...]
    train: int | None
    qrpo: int
    heldout: int
    system_fraction: float
    multi_turn_fraction: float
    source: dict[str, Any] | None

    def __post_init__(self) -> None:
        def bad(message: str) -> ApertusError:
            return ApertusError(f"{self.config_key}.{message}")

        if not is_integer(self.seed) or self.seed < 0:
            raise bad(f"seed must be an integer >= 0, got {self.seed!r}")
        for name in ("qrpo", "heldout"):
            value = getattr(self, name)
            if not is_integer(value) or value < 0:
                raise bad(f"{name} must be an integer >= 0, got {value!r}")
        if self.train is not None and (not is_integer(self.train) or self.train < 1):
            raise bad(
                f"train must be a positive integer (or null with a source), got {self.train!r}"
            )
        if self.source is None:
            if self.train is None:
                raise bad("train must be set for the built-in instruction set")
            unknown = sorted(set(self.languages) - set(LANGUAGES))
            if unknown or not self.languages:
                raise bad(
                    f"languages must be a non-empty subset of {list(LANGUAGES)}, got "
                    f"{list(self.languages)!r}"
                )
            unknown = sorted(set(self.tasks) - set(TASKS))
            if unknown or not self.tasks:
                raise bad(
                    f"tasks must be a non-empty subset of {list(TASKS)}, got {list(self.tasks)!r}"
                )
        for name in ("system_fraction", "multi_turn_fraction"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
                raise bad(f"{name} must be a number in [0, 1], got {value!r}")
        if self.source is not None:
            source = self.source
            if not isinstance(source, dict) or len(set(source) & {"jsonl", "hub"}) != 1:
                raise bad('source must be null, {"jsonl": PATH} or {"hub": NAME, "split": S}')
            allowed = {"jsonl"} if "jsonl" in source else {"hub", "split", "revision"}
            extra = sorted(set(source) - allowed)
            if extra:
                raise bad(f"source: unknown key(s) {extra}; known: {sorted(allowed)}")
            if not all(isinstance(v, str) and v for v in source.values()):
                raise bad("source values must be non-empty strings")


@dataclass
class InstructionSet:
    """The three splits: SFT conversations and the QRPO / held-out prompts."""

    train: list[dict[str, Any]] = field(default_factory=list)
    qrpo: list[dict[str, Any]] = field(default_factory=list)
    heldout: list[dict[str, Any]] = field(default_factory=list)

    def split(self, name: str) -> list[dict[str, Any]]:
        return getattr(self, name)

    def counts(self) -> dict[str, dict[str, int]]:
        """Per split: the number of items per language (and ``total``)."""
        result = {}
        for name in SPLITS:
            items = self.split(name)
            by_language = Counter(item["language"] for item in items)
            result[name] = {"total": len(items), **dict(sorted(by_language.items()))}
        return result


def _conversation(
    rng: random.Random, lang: str, config: InstructionConfig
) -> tuple[list[dict[str, str]], list[str]]:
    messages: list[dict[str, str]] = []
    if rng.random() < config.system_fraction:
        messages.append({"role": "system", "content": rng.choice(_SYSTEM[lang])})
    turns = 2 if rng.random() < config.multi_turn_fraction else 1
    tasks = [rng.choice(config.tasks) for _ in range(turns)]
    for task in tasks:
        question, answer = _exchange(task, lang, rng)
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": answer})
    return messages, tasks


def make_instruction_set(config: InstructionConfig) -> InstructionSet:
    """The built-in instruction set of `config`: deterministic in it (same config, same items).

    Languages take turns (item ``i`` of a split is in ``languages[i % len(languages)]``), so
    every split is balanced; everything else is drawn from one `random.Random(seed)`. Items
    are made for ``heldout``, then ``qrpo``, then ``train``; an item whose prompt was made
    before is drawn again, so the splits share no prompt.
    """
    if config.source is not None:
        raise ApertusError("make_instruction_set makes the built-in set; this config has a source")
    assert config.train is not None
    rng = random.Random(config.seed)
    seen: set[str] = set()
    result = InstructionSet()
    for split in ("heldout", "qrpo", "train"):
        wanted = getattr(config, split)
        items = result.split(split)
        attempts = 0
        while len(items) < wanted:
            attempts += 1
            if attempts > 50 * wanted + 1000:
                raise ApertusError(
                    f"posttrain.instructions: only {len(seen)} distinct prompts could be made; "
                    f"lower the {split} count ({wanted})"
                )
            lang = config.languages[len(items) % len(config.languages)]
            messages, tasks = _conversation(rng, lang, config)
            key = canonical_json(messages[:-1])
            if key in seen:
                continue
            seen.add(key)
            conversation = {
                "id": f"{split}-{len(items):05d}-{lang}-{'+'.join(tasks)}",
                "language": lang,
                "messages": messages,
            }
            items.append(conversation if split == "train" else to_prompt(conversation))
    return result


# ---------------------------------------------------------------------------------------------
# Formats: checks, prompts, reading and writing


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise ApertusError(f"{where}: messages must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise ApertusError(
                f"{where}: message {i} must be an object with exactly the keys role and content"
            )
        if message["role"] not in ROLES:
            raise ApertusError(
                f"{where}: message {i} has role {message['role']!r}; expected one of "
                f"{', '.join(ROLES)}"
            )
        if not isinstance(message["content"], str):
            raise ApertusError(f"{where}: the content of message {i} must be a string")


def _check_header(item: Any, keys: set[str], where: str) -> None:
    if not isinstance(item, dict):
        raise ApertusError(f"{where}: expected a JSON object, got {type(item).__name__}")
    missing = sorted(keys - set(item))
    if missing:
        raise ApertusError(f"{where}: missing key(s) {missing}")
    for key in ("id", "language"):
        if not isinstance(item[key], str) or not item[key]:
            raise ApertusError(f"{where}: {key} must be a non-empty string")


def _category(item: dict[str, Any], where: str) -> dict[str, str]:
    """``{"category": ...}`` when the item names one (a non-empty string), else nothing (an
    absent or null category: a Hub table's missing value is the standard category)."""
    if item.get("category") is None:
        return {}
    category = item["category"]
    if not isinstance(category, str) or not category:
        raise ApertusError(
            f"{where}: {item['id']!r}: category must be a non-empty string, got {category!r}"
        )
    return {"category": category}


def check_conversation(item: Any, where: str) -> dict[str, Any]:
    """An SFT conversation checked (see the module doc): its id, language and messages, which
    end with an assistant turn, and its optional category. Returns ``{"id", "language",
    "messages"}`` and ``"category"`` when given (other keys of the item are left out) or raises
    an ApertusError starting with `where`."""
    _check_header(item, {"id", "language", "messages"}, where)
    _check_messages(item["messages"], where)
    if item["messages"][-1]["role"] != "assistant":
        raise ApertusError(f"{where}: the last message must be an assistant turn (the completion)")
    return {
        "id": item["id"],
        "language": item["language"],
        "messages": item["messages"],
        **_category(item, where),
    }


def check_prompt(item: Any, where: str) -> dict[str, Any]:
    """A QRPO / held-out prompt checked: messages ending with a user turn, a string reference
    and an optional category. Returns ``{"id", "language", "messages", "reference"}`` and
    ``"category"`` when given."""
    _check_header(item, {"id", "language", "messages", "reference"}, where)
    _check_messages(item["messages"], where)
    if item["messages"][-1]["role"] != "user":
        raise ApertusError(f"{where}: the last message of a prompt must be a user turn")
    if not isinstance(item["reference"], str):
        raise ApertusError(f"{where}: reference must be a string")
    return {
        **{key: item[key] for key in ("id", "language", "messages", "reference")},
        **_category(item, where),
    }


def to_prompt(conversation: dict[str, Any]) -> dict[str, Any]:
    """The prompt of a conversation: its messages before the final assistant turn, whose
    content becomes the reference, and its category if it has one. The conversation must end
    ``user, assistant``."""
    messages = conversation["messages"]
    if len(messages) < 2 or messages[-1]["role"] != "assistant" or messages[-2]["role"] != "user":
        raise ApertusError(
            f"conversation {conversation.get('id')!r}: a prompt needs a user turn followed by "
            "the final assistant turn"
        )
    return {
        "id": conversation["id"],
        "language": conversation["language"],
        "messages": [dict(m) for m in messages[:-1]],
        "reference": messages[-1]["content"],
        **({"category": conversation["category"]} if "category" in conversation else {}),
    }


def _read_jsonl(path: Path, check: Callable[[Any, str], dict[str, Any]]) -> list[dict[str, Any]]:
    items, ids = [], set()
    for where, data in read_jsonl(path):
        item = check(data, where)
        if item["id"] in ids:
            raise ApertusError(f"{where}: duplicate id {item['id']!r}")
        ids.add(item["id"])
        items.append(item)
    if not items:
        raise ApertusError(f"{path}: no conversations (empty file)")
    return items


def read_conversations(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """SFT conversations from a JSONL file; a bad line is an ApertusError naming the file and
    line, as is a line over `apertus.core.files.MAX_LINE_BYTES` (read past, never held
    whole), a duplicate id or an empty file."""
    return _read_jsonl(Path(path), check_conversation)


def read_prompts(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """QRPO / held-out prompts from a JSONL file (errors as `read_conversations`)."""
    return _read_jsonl(Path(path), check_prompt)


def load_hub_conversations(
    name: str,
    *,
    split: str = "train",
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """SFT conversations from a Hugging Face dataset (a Hub name, or a local dataset directory
    in the same layout) through `datasets.load_dataset`; every row must be a conversation
    (extra columns are left out). A bad row is an ApertusError naming the dataset and row."""
    import datasets

    try:
        dataset = datasets.load_dataset(
            name,
            split=split,
            revision=revision,
            cache_dir=None if cache_dir is None else str(cache_dir),
        )
    except Exception as e:  # the library raises many types for "cannot get this dataset"
        raise ApertusError(f"dataset {name!r} (split {split!r}): cannot load: {e}") from None
    items, ids = [], set()
    for index, row in enumerate(dataset):
        where = f"dataset {name!r} split {split!r} row {index}"
        item = check_conversation(row, where)
        if item["id"] in ids:
            raise ApertusError(f"{where}: duplicate id {item['id']!r}")
        ids.add(item["id"])
        items.append(item)
    if not items:
        raise ApertusError(f"dataset {name!r} split {split!r}: no rows")
    return items


def split_conversations(
    conversations: list[dict[str, Any]], config: InstructionConfig
) -> InstructionSet:
    """User conversations split as the config says: shuffled with ``random.Random(seed)``,
    the first ``heldout`` and the next ``qrpo`` become prompts (`to_prompt`), and at most
    ``train`` of the rest (all with ``train: null``) stay SFT conversations. Too few
    conversations for the prompts, or a prompt-split conversation that does not end with a
    user/assistant exchange, is an error."""
    order = list(range(len(conversations)))
    random.Random(config.seed).shuffle(order)
    needed = config.heldout + config.qrpo
    if len(order) <= needed:
        raise ApertusError(
            f"{len(conversations)} conversations: need more than heldout + qrpo = {needed}"
        )
    shuffled = [conversations[i] for i in order]
    rest = shuffled[needed:]
    if config.train is not None:
        rest = rest[: config.train]
    return InstructionSet(
        train=rest,
        qrpo=[to_prompt(c) for c in shuffled[config.heldout : needed]],
        heldout=[to_prompt(c) for c in shuffled[: config.heldout]],
    )


def write_jsonl(path: str | os.PathLike[str], items: Iterable[dict[str, Any]]) -> int:
    """Write items as JSON Lines (UTF-8, not ASCII-escaped), atomically; returns the count."""
    count = 0
    with atomic_open(path, "w") as f:
        for item in items:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")
            count += 1
    return count


def _iter_splits(result: InstructionSet) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for name in SPLITS:
        yield name, result.split(name)


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser("posttrain", "Write the SFT conversations and the QRPO prompts.")
    parser.add_argument("--output", type=Path, required=True, help="directory for the splits")
    args = parser.parse_args(argv)
    config = InstructionConfig.from_dict(args.config)
    inputs: list[Path] = []
    if config.source is not None and "jsonl" in config.source:
        inputs.append(Path(config.source["jsonl"]))
    outputs = [args.output / f"{name}.jsonl" for name in SPLITS]
    with StepRun(
        "posttrain",
        "instructions",
        args.config,
        inputs=inputs,
        outputs=outputs,
        manifest=args.manifest,
        seed=config.seed,
    ) as step:
        if config.source is None:
            result = make_instruction_set(config)
        else:
            if "jsonl" in config.source:
                conversations = read_conversations(config.source["jsonl"])
            else:
                conversations = load_hub_conversations(
                    config.source["hub"],
                    split=config.source.get("split", "train"),
                    revision=config.source.get("revision"),
                )
            result = split_conversations(conversations, config)
        for name, items in _iter_splits(result):
            write_jsonl(args.output / f"{name}.jsonl", items)
        step.summary["counts"] = result.counts()
        step.summary["source"] = "builtin" if config.source is None else config.source


if __name__ == "__main__":
    run_main(main)
