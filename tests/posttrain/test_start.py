"""The start of a post-training-only run (`posttrain.init_from`): a checkpoint this project did
not write (a tiny `ApertusForCausalLM` made and saved by transformers) is checked against the
flavor before a byte is copied, kept in the run by hard links, its tokenizer saved and checked,
the held-out prompts turned into held-out documents, and its run.json is what SFT starts from."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from apertus.core import ApertusError
from apertus.core.files import sha256_file
from apertus.posttrain.instructions import InstructionConfig, make_instruction_set, write_jsonl
from apertus.posttrain.sft import SFTTrainingConfig, sft_run_spec
from apertus.posttrain.sft_data import FORMAT
from apertus.posttrain.start import HELDOUT_SOURCE, main
from tests.train.test_hf_start import VOCAB, save_tokenizer, transformers_apertus


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A transformers-made checkpoint of the debug flavor's shape (VOCAB ids) with its
    tokenizer, plus a .bin and a GGUF-like file a start must leave out."""
    folder = tmp_path_factory.mktemp("hub") / "some-org" / "apertus-debug"
    transformers_apertus(folder)
    (folder / "pytorch_model.bin").write_bytes(b"not kept")
    (folder / "model-q4.gguf").write_bytes(b"not kept")
    return folder


@pytest.fixture(scope="module")
def instructions(tmp_path_factory):
    folder = tmp_path_factory.mktemp("instructions")
    made = make_instruction_set(
        InstructionConfig.from_dict({"train": 12, "qrpo": 4, "heldout": 12})
    )
    write_jsonl(folder / "heldout.jsonl", made.heldout)
    return folder


def start(tmp_path, instructions, model, flavor="debug", revision=None):
    out = tmp_path / "posttrain"
    config = {"init_from": {"model": str(model), "revision": revision}, "flavor": flavor}
    main(
        [
            "--config", json.dumps(config),
            "--manifest", str(out / "start.manifest.json"),
            "--instructions", str(instructions),
            "--output", str(out / "start"),
            "--tokenizer", str(out / "start_tokenizer"),
            "--heldout", str(out / "start_heldout"),
        ]
    )  # fmt: skip
    return out


def test_the_start_keeps_the_checkpoint_by_hard_links_and_records_its_digests(
    released, instructions, tmp_path
):
    out = start(tmp_path, instructions, released)
    kept = out / "start" / "checkpoint"
    made = {p.name for p in released.iterdir()} - {"pytorch_model.bin", "model-q4.gguf"}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= made
    assert sorted(p.name for p in kept.iterdir()) == sorted(made)
    assert os.path.samefile(kept / "model.safetensors", released / "model.safetensors")
    record = json.loads((out / "start" / "run.json").read_text())
    assert record["checkpoint_format"] == "hf" and record["final_checkpoint"] == "checkpoint"
    assert record["flavor"] == "debug"
    # The flavor's shape (its vocabulary is the checkpoint's), the checkpoint's RoPE theta.
    config = json.loads((released / "config.json").read_text())
    assert record["model_overrides"] == {"rope_theta": config["rope_parameters"]["rope_theta"]}
    start_of = record["init_from"]
    assert start_of["model"] == str(released) and start_of["commit"] is None
    for name in ("config.json", "model.safetensors"):
        assert start_of["files"][name]["sha256"] == sha256_file(released / name)
    manifest = json.loads((out / "start.manifest.json").read_text())
    assert manifest["summary"]["init_from"] == start_of
    assert manifest["summary"]["checkpoint_files"] == "hard links"
    # The outputs' bytes are the manifest's: SFT's read of them is checked against it.
    outputs = {entry["path"]: entry for entry in manifest["outputs"]}
    weights = outputs[str(out / "start")]["files"]["checkpoint/model.safetensors"]
    assert weights["sha256"] == start_of["files"]["model.safetensors"]["sha256"]


def test_the_tokenizer_and_the_heldout_documents_are_what_sft_and_the_exports_read(
    released, instructions, tmp_path
):
    out = start(tmp_path, instructions, released)
    assert (out / "start_tokenizer" / "tokenizer.json").is_file()
    prompts = [json.loads(line) for line in (instructions / "heldout.jsonl").open()]
    documents = {
        path.stem: [json.loads(line) for line in path.open()]
        for path in (out / "start_heldout").glob("*.jsonl")
    }
    assert sorted(documents) == sorted({p["language"] for p in prompts})
    by_id = {d["id"]: d for rows in documents.values() for d in rows}
    assert sorted(by_id) == sorted(p["id"] for p in prompts)
    for prompt in prompts:
        document = by_id[prompt["id"]]
        assert document["source"] == HELDOUT_SOURCE
        assert document["text"].endswith("\n\n" + prompt["reference"])
        assert prompt["messages"][-1]["content"] in document["text"]
    # SFT starts from the checkpoint's weights through the adapter, not from a DCP checkpoint.
    record = json.loads((out / "start" / "run.json").read_text())
    sft_dir = tmp_path / "sft_data"
    sft_dir.mkdir()
    (sft_dir / "sft.json").write_text(
        json.dumps(
            {"format": FORMAT, "examples": 8, "max_len": 32, "row_tokens": 33, "data_sha256": "",
             "vocab_size": VOCAB, "pad_id": 3, "eos_id": 2, "bos_id": 1}
        )
    )  # fmt: skip
    spec = sft_run_spec(
        SFTTrainingConfig.from_dict({"global_batch": 4, "micro_batch": 2}), sft_dir, record
    )
    assert spec.checkpoint.initial_mode == "hf" and spec.checkpoint.initial == "checkpoint"
    assert spec.model_overrides["rope_theta"] == record["model_overrides"]["rope_theta"]


@pytest.mark.parametrize(
    "break_it, message",
    [
        ("flavor", "hidden_size is 64, flavor 'tiny' has dim 256"),
        ("llama", "not an Apertus causal LM"),
        ("weights", "no model.safetensors and no model.safetensors.index.json"),
        ("chat", "chat token '<|system_start|>' is missing"),
        ("revision", "is for a Hub id"),
    ],
)
def test_a_wrong_checkpoint_is_refused_before_anything_is_written(
    released, instructions, tmp_path, break_it, message
):
    model, flavor, revision = tmp_path / "model", "debug", None
    shutil.copytree(released, model)
    if break_it == "flavor":
        flavor = "tiny"
    elif break_it == "llama":
        config = json.loads((model / "config.json").read_text())
        config.update(model_type="llama", architectures=["LlamaForCausalLM"])
        (model / "config.json").write_text(json.dumps(config))
    elif break_it == "weights":
        (model / "model.safetensors").unlink()
    elif break_it == "chat":
        save_tokenizer(model, chat=False)
    else:
        revision = "v1"
    with pytest.raises(ApertusError, match=message):
        start(tmp_path, instructions, model, flavor=flavor, revision=revision)
    assert not (tmp_path / "posttrain" / "start").exists()
    assert not (tmp_path / "posttrain" / "start.manifest.json").exists()


def posttrain_problems(model, *overrides):
    from apertus.core.config import load_config
    from apertus.plan_check import plan_problems

    keys = [
        f"posttrain.init_from={{model: {model}}}",
        "posttrain.sft_data.replay.documents=0",
        "evaluate.suite.tasks=[{task: apertus_ppl}]",
    ]
    return plan_problems(load_config((), [*keys, "pretrain.flavor=debug", *overrides]))


def test_posttrain_init_from_is_checked_before_any_job(released, tmp_path):
    assert posttrain_problems(released) == []
    found = " | ".join(posttrain_problems(released, "pretrain.flavor=tiny"))
    assert f"key 'posttrain.init_from.model' is '{released}'" in found
    assert "hidden_size is 64, flavor 'tiny' has dim 256" in found
    found = " | ".join(posttrain_problems(released, "posttrain.sft_data.replay.documents=8"))
    assert "key 'posttrain.sft_data.replay.documents' is 8: a run post-training" in found
    found = " | ".join(posttrain_problems(released, f"pretrain.init_from={{model: {released}}}"))
    assert "key 'pretrain.init_from' is set, but posttrain.init_from makes the run" in found
    found = " | ".join(posttrain_problems(released, "evaluate.suite.tasks=[{task: apertus_mc}]"))
    assert "key 'evaluate.suite.tasks[0].task' is 'apertus_mc': the project's cloze" in found
    found = " | ".join(posttrain_problems(tmp_path / "nowhere"))
    assert "key 'posttrain.init_from.model'" in found and "does not exist" in found
    plain = tmp_path / "no-chat-tokens"
    shutil.copytree(released, plain)
    save_tokenizer(plain, chat=False)
    (found,) = posttrain_problems(plain)
    assert found.startswith(f"key 'posttrain.init_from.model' is '{plain}': tokenizer")
    assert "chat token '<|user_start|>' is missing" in found


def test_the_post_training_only_dag_holds_no_data_tokenization_or_pretraining_job(
    released, tmp_path
):
    from tests.conftest import planned_jobs

    run_dir = tmp_path / "results" / "posttrain-only"
    jobs = planned_jobs(
        run_dir,
        tmp_path,
        f"posttrain: {{init_from: {{model: {released}}}, sft_data: {{replay: {{documents: 0}}}}}}\n"
        "pretrain: {flavor: debug}\nevaluate: {suite: {tasks: [{task: apertus_ppl}]}}\n",
    )
    stages = {rule.split("_")[0] for rule in jobs}
    assert not stages & {"data", "tokenize", "pretrain"}, jobs
    assert jobs["posttrain_start"] == 1 and jobs["posttrain_sft"] == 1
    # SFT and QRPO exported and evaluated; no memorization probes without a data stage.
    assert jobs["export_checkpoint"] == 2 and jobs["evaluate_checkpoint"] == 2
    assert "evaluate_memorization" not in jobs
    assert jobs["release"] == 1 and jobs["report_summary"] == 1
