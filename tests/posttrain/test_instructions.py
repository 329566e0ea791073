"""The built-in multilingual instruction set and the readers of user conversation data
(RECIPE.md §7). Answers are recomputed here from the question text (arithmetic, counting,
lists, repetition) or looked up in tables typed by hand below (translations, capitals)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

from apertus.core import ApertusError
from apertus.posttrain.instructions import (
    InstructionConfig,
    check_prompt,
    load_hub_conversations,
    main,
    make_instruction_set,
    read_conversations,
    read_prompts,
    split_conversations,
    to_prompt,
)

REPO = Path(__file__).resolve().parents[2]

# Hand-typed: concept -> its word in de, en, fr, it, rm, es.
WORDS = """
Hund dog chien cane chaun perro
Katze cat chat gatto giat gato
Haus house maison casa chasa casa
Wasser water eau acqua aua agua
Brot bread pain pane paun pan
Sonne sun soleil sole sulegl sol
Mond moon lune luna glina luna
Baum tree arbre albero planta árbol
Buch book livre libro cudesch libro
Berg mountain montagne montagna muntogna montaña
Apfel apple pomme mela mail manzana
Milch milk lait latte latg leche
Freund friend ami amico amitg amigo
Schule school école scuola scola escuela
"""
LANGS = ("de", "en", "fr", "it", "rm", "es")
DICTIONARY = [dict(zip(LANGS, line.split(), strict=True)) for line in WORDS.strip().splitlines()]
# "into <language>" as each language says it -> the target language.
INTO = {
    "Deutsche": "de", "Englische": "en", "Französische": "fr", "Italienische": "it",
    "Rätoromanische": "rm", "Spanische": "es",
    "German": "de", "English": "en", "French": "fr", "Italian": "it", "Romansh": "rm",
    "Spanish": "es",
    "allemand": "de", "anglais": "en", "français": "fr", "italien": "it", "romanche": "rm",
    "espagnol": "es",
    "tedesco": "de", "inglese": "en", "francese": "fr", "italiano": "it", "romancio": "rm",
    "spagnolo": "es",
    "tudestg": "de", "englais": "en", "franzos": "fr", "talian": "it", "rumantsch": "rm",
    "spagnol": "es",
    "alemán": "de", "inglés": "en", "francés": "fr", "español": "es",
}  # fmt: skip
# Country (as it appears in the question, any language) -> capital in the question's language.
CAPITALS = {
    "de": {"Schweiz": "Bern", "Deutschland": "Berlin", "Frankreich": "Paris", "Italien": "Rom",
           "Spanien": "Madrid", "Österreich": "Wien", "Portugal": "Lissabon",
           "Griechenland": "Athen"},
    "en": {"Switzerland": "Bern", "Germany": "Berlin", "France": "Paris", "Italy": "Rome",
           "Spain": "Madrid", "Austria": "Vienna", "Portugal": "Lisbon", "Greece": "Athens"},
    "fr": {"Suisse": "Berne", "Allemagne": "Berlin", "France": "Paris", "Italie": "Rome",
           "Espagne": "Madrid", "Autriche": "Vienne", "Portugal": "Lisbonne",
           "Grèce": "Athènes"},
    "it": {"Svizzera": "Berna", "Germania": "Berlino", "Francia": "Parigi", "Italia": "Roma",
           "Spagna": "Madrid", "Austria": "Vienna", "Portogallo": "Lisbona", "Grecia": "Atene"},
    "rm": {"Svizra": "Berna", "Germania": "Berlin", "Frantscha": "Paris", "Italia": "Roma",
           "Spagna": "Madrid", "Austria": "Vienna", "Portugal": "Lissabon", "Grezia": "Atena"},
    "es": {"Suiza": "Berna", "Alemania": "Berlín", "Francia": "París", "Italia": "Roma",
           "España": "Madrid", "Austria": "Viena", "Portugal": "Lisboa", "Grecia": "Atenas"},
}  # fmt: skip


def expected_answer(task: str, lang: str, question: str) -> str:
    """The answer to `question`, worked out from its text alone."""
    numbers = [int(n) for n in re.findall(r"\d+", question)]
    quoted = re.search(r'(?:"|„|« )([^"“»]+?)(?:"|“| »)', question)
    if task == "add":
        return str(sum(numbers))
    if task == "larger":
        return str(max(numbers))
    if task == "count":
        return str(len(unicodedata.normalize("NFC", quoted.group(1))))
    if task == "repeat":
        return question.split(": ", 1)[1]
    if task == "reverse":
        items = question.rsplit(": ", 1)[1].split(", ")
        return ", ".join(items[::-1])
    if task == "translate":
        word = quoted.group(1)
        tail = question[quoted.end() :].strip(" .")
        name = tail.split()[-1]
        target = INTO[name]
        (concept,) = [c for c in DICTIONARY if c[lang] == word]
        return concept[target]
    if task == "capital":
        (country,) = [c for c in CAPITALS[lang] if re.search(rf"\b{c}\b", question)]
        return CAPITALS[lang][country]
    raise AssertionError(task)


def tasks_of(item: dict) -> list[str]:
    return item["id"].split("-", 3)[3].split("+")


@pytest.fixture(scope="module")
def instruction_set():
    return make_instruction_set(InstructionConfig.from_dict({}))


def test_the_same_config_gives_the_same_set_and_another_seed_another(instruction_set):
    again = make_instruction_set(InstructionConfig.from_dict({}))
    assert again == instruction_set
    other = make_instruction_set(InstructionConfig.from_dict({"seed": 1}))
    assert other.train != instruction_set.train


def test_every_split_is_balanced_over_six_languages(instruction_set):
    counts = instruction_set.counts()
    assert counts["train"]["total"] == 1600
    assert counts["qrpo"]["total"] == 120 and counts["heldout"]["total"] == 240
    for split in ("train", "qrpo", "heldout"):
        per_language = {k: v for k, v in counts[split].items() if k != "total"}
        assert set(per_language) == set(LANGS)
        assert max(per_language.values()) - min(per_language.values()) <= 1
    # Every task in every language appears in the SFT split.
    seen = Counter((c["language"], t) for c in instruction_set.train for t in tasks_of(c))
    assert len(seen) == len(LANGS) * 7


def test_every_answer_is_correct(instruction_set):
    """Each assistant turn answers its user turn: recomputed from the question text."""
    checked = Counter()
    for conversation in instruction_set.train:
        messages = conversation["messages"]
        exchanges = [m for m in messages if m["role"] != "system"]
        tasks = tasks_of(conversation)
        assert len(exchanges) == 2 * len(tasks)
        for task, (user, assistant) in zip(
            tasks, zip(exchanges[::2], exchanges[1::2], strict=True), strict=True
        ):
            assert (user["role"], assistant["role"]) == ("user", "assistant")
            assert assistant["content"] == expected_answer(
                task, conversation["language"], user["content"]
            ), conversation
            checked[task] += 1
    for prompt in instruction_set.qrpo + instruction_set.heldout:
        expected = expected_answer(
            tasks_of(prompt)[-1], prompt["language"], prompt["messages"][-1]["content"]
        )
        assert prompt["reference"] == expected, prompt
    assert min(checked.values()) >= 30


def test_some_have_a_system_message_and_some_two_exchanges(instruction_set):
    with_system = sum(c["messages"][0]["role"] == "system" for c in instruction_set.train)
    two_turns = sum(len(tasks_of(c)) == 2 for c in instruction_set.train)
    assert 0.2 < with_system / 1600 < 0.4  # system_fraction 0.3
    assert 0.15 < two_turns / 1600 < 0.35  # multi_turn_fraction 0.25
    for conversation in instruction_set.train:
        assert [m["role"] for m in conversation["messages"][-2:]] == ["user", "assistant"]
    none = make_instruction_set(
        InstructionConfig.from_dict({"system_fraction": 0, "multi_turn_fraction": 0})
    )
    assert all(len(c["messages"]) == 2 for c in none.train)


def test_splits_share_no_prompt_and_prompts_have_the_qrpo_format(instruction_set):
    def key(messages):
        return json.dumps(messages, sort_keys=True, ensure_ascii=False)

    train = {key(c["messages"][:-1]) for c in instruction_set.train}
    qrpo = {key(p["messages"]) for p in instruction_set.qrpo}
    heldout = {key(p["messages"]) for p in instruction_set.heldout}
    assert len(train) == 1600 and len(qrpo) == 120 and len(heldout) == 240
    assert not (train & qrpo) and not (train & heldout) and not (qrpo & heldout)
    for prompt in instruction_set.qrpo + instruction_set.heldout:
        assert set(prompt) == {"id", "language", "messages", "reference"}
        assert prompt["messages"][-1]["role"] == "user"
        assert check_prompt(prompt, "p") == prompt
    ids = [c["id"] for c in instruction_set.train]
    assert len(set(ids)) == 1600 and ids[3].startswith("train-00003-")


def test_entry_point_writes_the_three_splits_identically_twice(tmp_path):
    config = {"train": 60, "qrpo": 12, "heldout": 6, "languages": ["de", "en", "fr", "it", "rm"]}
    for run in ("a", "b"):
        command = [
            sys.executable, "-m", "apertus.posttrain.instructions",
            "--config", json.dumps(config),
            "--manifest", str(tmp_path / run / "manifest.json"),
            "--output", str(tmp_path / run),
        ]  # fmt: skip
        proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
    for name in ("train.jsonl", "qrpo.jsonl", "heldout.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    train = read_conversations(tmp_path / "a" / "train.jsonl")
    assert len(train) == 60 and {c["language"] for c in train} == set(config["languages"])
    assert len(read_prompts(tmp_path / "a" / "qrpo.jsonl")) == 12
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["summary"]["counts"]["heldout"]["total"] == 6
    text = (tmp_path / "a" / "train.jsonl").read_text(encoding="utf-8")
    assert "\\u" not in text and any(ord(ch) > 127 for ch in text)  # UTF-8, not escaped


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"languages": ["de", "xx"]}, "languages must be a non-empty subset"),
        ({"train": 0}, "train must be a positive integer"),
        ({"qrpo": -1}, "qrpo must be an integer >= 0"),
        ({"system_fraction": 1.5}, "system_fraction must be a number in"),
        ({"colour": 1}, r"unknown key 'posttrain\.instructions\.colour'"),
        ({"source": {"jsonl": "a", "hub": "b"}}, "source must be null"),
        ({"source": {"hub": "x", "revsion": "main"}}, r"unknown key\(s\) \['revsion'\]"),
        ({"tasks": ["add", "divide"]}, "tasks must be a non-empty subset"),
        (
            {
                "train": 20,
                "languages": ["de"],
                "tasks": ["capital"],
                "system_fraction": 0,
                "multi_turn_fraction": 0,
            },
            "only 8 distinct prompts could be made",
        ),
    ],
)
def test_bad_configs_are_refused_naming_the_key(config, message):
    with pytest.raises(ApertusError, match=message):
        make_instruction_set(InstructionConfig.from_dict(config))


# ---------------------------------------------------------------------------------------------
# User data


def write_lines(path: Path, lines: list) -> Path:
    path.write_text(
        "".join(
            (x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)) + "\n" for x in lines
        ),
        encoding="utf-8",
    )
    return path


def conversation(i: int, lang: str = "en", **extra) -> dict:
    return {
        "id": f"c{i}",
        "language": lang,
        "messages": [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ],
        **extra,
    }


def test_local_jsonl_is_read_and_a_bad_line_is_named(tmp_path):
    good = write_lines(tmp_path / "good.jsonl", [conversation(0), "", conversation(1)])
    assert [c["id"] for c in read_conversations(good)] == ["c0", "c1"]
    bad_role = conversation(2)
    bad_role["messages"][0]["role"] = "tool"
    not_last = conversation(3)
    not_last["messages"] = not_last["messages"][:1]
    cases = [
        ([conversation(0), "{not json"], r"bad.jsonl, line 2: not valid JSON"),
        ([conversation(0), conversation(1), bad_role], r"line 3: message 0 has role 'tool'"),
        ([not_last], r"line 1: the last message must be an assistant turn"),
        ([conversation(0), conversation(0)], r"line 2: duplicate id 'c0'"),
        ([{"id": "x", "messages": []}], r"line 1: missing key\(s\) \['language'\]"),
        ([[1, 2]], r"line 1: expected a JSON object"),
        ([], r"no conversations"),
    ]
    for lines, message in cases:
        with pytest.raises(ApertusError, match=message):
            read_conversations(write_lines(tmp_path / "bad.jsonl", lines))
    with pytest.raises(ApertusError, match="not found"):
        read_conversations(tmp_path / "missing.jsonl")


def test_hub_reader_loads_a_local_dataset_in_the_same_format(tmp_path):
    """`datasets.load_dataset` on a local stand-in (a directory of JSONL), as on a Hub name;
    extra columns are dropped, a bad row is named."""
    data = tmp_path / "dataset"
    data.mkdir()
    rows = [conversation(i, "de" if i % 2 else "rm", source="x") for i in range(5)]
    rows[1]["messages"].insert(0, {"role": "system", "content": "Sei kurz."})
    write_lines(data / "train.jsonl", rows)
    loaded = load_hub_conversations(str(data), split="train", cache_dir=tmp_path / "cache")
    assert loaded == [{k: r[k] for k in ("id", "language", "messages")} for r in rows]
    rows[3]["messages"][-1]["role"] = "user"
    write_lines(data / "train.jsonl", rows)
    with pytest.raises(ApertusError, match=r"split 'train' row 3: the last message"):
        load_hub_conversations(str(data), split="train", cache_dir=tmp_path / "cache2")
    with pytest.raises(ApertusError, match="cannot load"):
        load_hub_conversations(str(tmp_path / "nowhere"), cache_dir=tmp_path / "cache3")


def test_user_conversations_are_split_into_prompts_and_sft_data(tmp_path):
    rows = [conversation(i, lang) for i, lang in enumerate(["de", "en", "fr"] * 10)]
    config = InstructionConfig.from_dict(
        {"heldout": 4, "qrpo": 6, "train": None, "source": {"jsonl": "x"}}
    )
    result = split_conversations(rows, config)
    assert [len(result.heldout), len(result.qrpo), len(result.train)] == [4, 6, 20]
    prompt_ids = {p["id"] for p in result.heldout + result.qrpo}
    assert prompt_ids.isdisjoint(c["id"] for c in result.train)
    assert prompt_ids | {c["id"] for c in result.train} == {r["id"] for r in rows}
    for prompt in result.qrpo:
        number = prompt["id"][1:]
        assert prompt["reference"] == f"answer {number}"
        assert prompt["messages"] == [{"role": "user", "content": f"question {number}"}]
    assert split_conversations(rows, config) == result
    capped = split_conversations(
        rows, InstructionConfig.from_dict({"heldout": 4, "qrpo": 6, "train": 5})
    )
    assert len(capped.train) == 5
    with pytest.raises(ApertusError, match="need more than heldout"):
        split_conversations(rows[:10], config)
    with pytest.raises(ApertusError, match="a user turn followed by"):
        to_prompt({"id": "s", "messages": [{"role": "assistant", "content": "hi"}]})


def test_entry_point_reads_a_user_jsonl_source(tmp_path):
    source = write_lines(tmp_path / "mine.jsonl", [conversation(i) for i in range(12)])
    config = {"heldout": 2, "qrpo": 3, "train": None, "source": {"jsonl": str(source)}}
    main(["--config", json.dumps(config), "--manifest", str(tmp_path / "m.json"),
          "--output", str(tmp_path / "out")])  # fmt: skip
    assert len(read_conversations(tmp_path / "out" / "train.jsonl")) == 7
    assert len(read_prompts(tmp_path / "out" / "heldout.jsonl")) == 2
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert any(str(source) in str(entry) for entry in manifest["inputs"])
