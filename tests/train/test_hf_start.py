"""A stage started from a Hugging Face checkpoint this project did not write: a tiny
`ApertusForCausalLM` initialized and saved by transformers itself. Its folder is checked against
the flavor before any rank starts; its weights reach the trainer through the state-dict adapter
bit for bit; the first step's loss is the one transformers computes on the same batch."""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from apertus.core import ApertusError
from apertus.model.flavors import flavor
from apertus.model.hf_checkpoint import check_hf_checkpoint, weight_digests
from apertus.model.state_dict_adapter import ApertusStateDictAdapter, rope_parameters
from apertus.tokenize.phases import PhaseSpec, build_phase_index
from apertus.train.metrics import read_metrics
from tests.train.test_stage import phases  # noqa: F401  (the fixture)
from tests.train.test_torchtitan import (
    GOLDFISH,
    IGNORE,
    VOCAB,
    launch,
    reference_labels,
    run_ok,
    windows,
    write_source,
    write_spec,
)

SEQ_LEN = 64


def transformers_apertus(folder: Path, seed: int = 7, **config):
    """A random `ApertusForCausalLM` of the debug flavor's shape, made and saved by transformers
    (its own initialization and files); returns the model."""
    from transformers import ApertusConfig, ApertusForCausalLM

    shape = flavor("debug")
    torch.manual_seed(seed)
    fields = dict(
        vocab_size=VOCAB,
        hidden_size=shape.dim,
        intermediate_size=shape.ffn_hidden,
        num_hidden_layers=shape.n_layers,
        num_attention_heads=shape.n_heads,
        num_key_value_heads=shape.n_kv_heads,
        head_dim=shape.attention_head_dim,
        hidden_act="xielu",
        max_position_embeddings=shape.max_seq_len,
        rms_norm_eps=shape.norm_eps,
        # The stage's RoPE (the run's, not the checkpoint's): the same numbers here, so that
        # the losses compare.
        rope_parameters=rope_parameters(shape),
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
    )
    model = ApertusForCausalLM(ApertusConfig(**{**fields, **config})).eval()
    model.save_pretrained(folder)
    save_tokenizer(folder)
    return model


def save_tokenizer(folder: Path, chat: bool = True) -> None:
    """A word-level tokenizer of VOCAB ids, <unk> <s> </s> <pad> first, then (`chat`) the chat
    format's special tokens, saved by transformers (`PreTrainedTokenizerFast.save_pretrained`)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from apertus.tokenize.tokenizer import CHAT_TOKENS

    specials = ["<unk>", "<s>", "</s>", "<pad>", *(CHAT_TOKENS if chat else ())]
    words = [*specials, "hello"]
    vocab = {token: i for i, token in enumerate([*words, *map(str, range(VOCAB - len(words)))])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.add_special_tokens([AddedToken(token, special=True) for token in specials])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=list(CHAT_TOKENS) if chat else None,
    )
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf") / "apertus-debug"
    model = transformers_apertus(folder)
    return folder, model


@pytest.fixture(scope="module")
def one_document_windows(tmp_path_factory) -> Path:
    """A phase whose windows are each one document (65 tokens, <s> ... </s>): a batch means the
    same to a model with document masks and to transformers' plain causal attention."""
    root = tmp_path_factory.mktemp("data")
    write_source(root / "shards" / "web", 120, seed=5, doc_tokens=SEQ_LEN + 1)
    tokens = json.loads((root / "shards" / "web" / "checksums.json").read_text())["tokens"]
    spec = PhaseSpec(name="p1", tokens=tokens, seed=1, weights={"web": None})
    build_phase_index(spec, {"web": root / "shards" / "web"}, root / "phase")
    return root / "phase"


def test_the_checkpoint_is_checked_against_the_flavor_before_any_rank(hf_folder, tmp_path):
    folder, _ = hf_folder
    checked = check_hf_checkpoint(folder, "debug", {"vocab_size": VOCAB})
    assert checked.weight_files == ("model.safetensors",)
    digests = weight_digests(checked)
    assert set(digests) == {"config.json", "model.safetensors"}
    assert digests["model.safetensors"]["bytes"] == (folder / "model.safetensors").stat().st_size

    assert checked.rope_theta == flavor("debug").rope_theta  # what it was trained at

    with pytest.raises(ApertusError) as e:  # the flavor's shape is not the checkpoint's
        check_hf_checkpoint(folder, "tiny")
    assert "hidden_size is 64, flavor 'tiny' has dim 256" in str(e.value)
    assert "num_hidden_layers is 2, flavor 'tiny' has n_layers 4" in str(e.value)
    assert "vocab_size is 256, flavor 'tiny' has vocab_size 8192" in str(e.value)

    llama = tmp_path / "llama"  # another architecture
    from transformers import LlamaConfig, LlamaForCausalLM

    small = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
    )
    LlamaForCausalLM(small).save_pretrained(llama)
    with pytest.raises(ApertusError, match=r"model_type 'llama' \(LlamaForCausalLM\): not an"):
        check_hf_checkpoint(llama, "debug", {"vocab_size": VOCAB})

    # Another RoPE scaling: transformers 5's rope_parameters, then 4.x's rope_scaling.
    rope = tmp_path / "rope"
    shutil.copytree(folder, rope)
    config = json.loads((rope / "config.json").read_text())
    params = {**config["rope_parameters"], "factor": 16.0}
    (rope / "config.json").write_text(json.dumps({**config, "rope_parameters": params}))
    with pytest.raises(ApertusError, match=r"rope_scaling.factor is 16.0, the flavors' is 8\b"):
        check_hf_checkpoint(rope, "debug", {"vocab_size": VOCAB})
    legacy = {k: v for k, v in config.items() if k != "rope_parameters"}
    legacy["rope_scaling"] = {"rope_type": "linear", "factor": 8.0}
    (rope / "config.json").write_text(json.dumps(legacy))
    with pytest.raises(ApertusError, match=r"rope_type is 'linear', the flavors' RoPE has"):
        check_hf_checkpoint(rope, "debug", {"vocab_size": VOCAB})
    # 4.x's own form: the scaling beside a top-level theta, which the stage need not share.
    scaling = {k: v for k, v in config["rope_parameters"].items() if k != "rope_theta"}
    (rope / "config.json").write_text(
        json.dumps({**legacy, "rope_scaling": scaling, "rope_theta": 12e6})
    )
    assert check_hf_checkpoint(rope, "debug", {"vocab_size": VOCAB}).rope_theta == 12e6

    broken = tmp_path / "broken"  # a weight file missing, then one the index lists missing
    shutil.copytree(folder, broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(ApertusError, match=r"no model\.safetensors and no model\.safetensors"):
        check_hf_checkpoint(broken, "debug", {"vocab_size": VOCAB})
    index = {"metadata": {}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ApertusError, match="1 of them missing: model-00002-of-00002"):
        check_hf_checkpoint(broken, "debug", {"vocab_size": VOCAB})
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ApertusError, match=r"config.json: unreadable"):
        check_hf_checkpoint(broken, "debug", {"vocab_size": VOCAB})


@pytest.mark.parametrize(
    "dtype, files",
    [("float32", 1), ("bfloat16", 1), ("float32", 4)],
    ids=["fp32", "bf16", "4-files"],
)
def test_import_through_the_trainers_adapter_then_export_gives_back_the_same_tensors(
    hf_folder, tmp_path, dtype, files
):
    """What torchtitan's `dcp_load(from_hf=True)` does with the adapter, on our model's own
    (float32) tensors, then the export's write of them in the file's dtype: every tensor of
    transformers' file, bit for bit, the xIELU scalars included. A bfloat16 file (as the
    released Apertus models are) is read into the float32 master weights exactly."""
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file

    from apertus.export.hf import write_weights
    from apertus.model.state_dict_adapter import hf_state_dict

    folder, model = hf_folder
    if (dtype, files) != ("float32", 1):  # saved again by transformers, as asked
        folder = tmp_path / "saved"
        shutil.copytree(hf_folder[0], folder)
        (folder / "model.safetensors").unlink()
        again = copy.deepcopy(model).to(getattr(torch, dtype))  # the fixture's stays as it is
        size = sum(t.numel() * t.element_size() for t in again.state_dict().values())
        again.save_pretrained(folder, max_shard_size=size // files + 1 if files > 1 else "5GB")
    checked = check_hf_checkpoint(folder, "debug", {"vocab_size": VOCAB})
    assert len(checked.weight_files) >= files
    shape = flavor("debug", vocab_size=VOCAB, attn_backend="sdpa")
    ours_model = shape.build()
    adapter = ApertusStateDictAdapter(shape, None)
    hf_view = adapter.to_hf(ours_model.state_dict())
    dcp.load(hf_view, storage_reader=adapter.get_hf_storage_reader(str(folder)))
    ours_model.load_state_dict(adapter.from_hf(hf_view))

    (tmp_path / "export").mkdir()
    assert all(p.dtype == torch.float32 for p in ours_model.parameters())
    exported = hf_state_dict(ours_model.state_dict(), dtype)
    written = write_weights(exported, tmp_path / "export", "5GB")
    theirs = {k: v for name in checked.weight_files for k, v in load_file(folder / name).items()}
    ours = load_file(tmp_path / "export" / written[0])
    assert ours.keys() == theirs.keys()
    for key, tensor in theirs.items():
        assert ours[key].dtype == tensor.dtype == getattr(torch, dtype), key
        assert torch.equal(ours[key], tensor), key


def transformers_loss(model, tokens: torch.Tensor, goldfish) -> float:
    """transformers' mean cross-entropy over the labels the trainer keeps (the same EOD and
    Goldfish masks), on windows that are one document each."""
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    kept = reference_labels(inputs, labels, goldfish)
    with torch.no_grad():
        logits = model(input_ids=inputs).logits
    return F.cross_entropy(logits.flatten(0, 1).float(), kept.flatten(), ignore_index=IGNORE).item()


@pytest.mark.slow
@pytest.mark.parametrize(
    "goldfish, nproc",
    [(None, 1), (GOLDFISH, 1), (None, 2)],
    ids=["plain", "goldfish", "two-ranks-sharded"],
)
def test_a_stage_from_the_checkpoint_starts_at_transformers_loss_and_trains_on(
    hf_folder, one_document_windows, tmp_path, goldfish, nproc
):
    """Two ranks: FSDP shards every weight, and each rank reads its shards from the
    safetensors file (DCP's reader into DTensors), not the whole model."""
    folder, model = hf_folder
    directory = tmp_path / "run"
    spec = write_spec(
        directory,
        one_document_windows,
        steps=3,
        model_overrides={"vocab_size": VOCAB},
        lr={"kind": "constant", "peak": 1e-3, "warmup_steps": 1},
        goldfish=({"enabled": False} if goldfish is None else {"k": goldfish[0], "h": goldfish[1]}),
        checkpoint={
            "folder": str(directory / "ckpt"),
            "interval": 10,
            "initial": str(folder),
            "initial_mode": "hf",
        },
    )
    proc = run_ok(spec, nproc)
    assert f"Loading from HF safetensors from --checkpoint.initial_load_path: {folder}" in (
        proc.stdout + proc.stderr
    )
    metrics = read_metrics(directory / "out" / "metrics.jsonl")
    assert sorted(metrics) == [1, 2, 3]  # it trains on from there
    tokens, _ = windows(one_document_windows, SEQ_LEN, 0, 8)
    expected = transformers_loss(model, tokens, goldfish)
    assert metrics[1]["loss"] == pytest.approx(expected, abs=1e-4)
    assert abs(expected - math.log(VOCAB)) < 0.5  # transformers' random init, not ours


def test_a_checkpoint_of_another_shape_is_refused_before_torchrun(
    hf_folder, one_document_windows, tmp_path
):
    """The run's vocabulary (the flavor's 256 here is the checkpoint's; the spec asks 512)."""
    folder, _ = hf_folder
    directory = tmp_path / "run"
    spec = write_spec(
        directory,
        one_document_windows,
        model_overrides={"vocab_size": 2 * VOCAB},
        checkpoint={
            "folder": str(directory / "ckpt"),
            "initial": str(folder),
            "initial_mode": "hf",
        },
    )
    proc = launch(spec, 1)
    assert proc.returncode != 0
    assert "error:" in proc.stderr
    assert f"checkpoint.initial {folder}: " in proc.stderr, proc.stderr
    assert "vocab_size is 256, flavor 'debug' has vocab_size 512" in proc.stderr
    assert "torchrun" not in proc.stdout


# ---------------------------------------------------------------------------------------------
# pretrain.init_from: the config key, checked before any job


def init_from_problems(folder, *overrides):
    from apertus.core.config import load_config
    from apertus.plan_check import plan_problems

    keys = [f"pretrain.init_from={{model: {folder}}}", f"tokenize.tokenizer.source={folder}"]
    return plan_problems(load_config((), [*keys, "pretrain.flavor=debug", *overrides]))


def test_init_from_is_checked_with_the_flavor_and_the_tokenizer_before_any_job(hf_folder):
    folder, _ = hf_folder
    assert init_from_problems(folder) == []  # the checkpoint and its tokenizer pass
    found = " | ".join(init_from_problems(folder, "pretrain.flavor=tiny"))
    assert f"key 'pretrain.init_from.model' is '{folder}'" in found
    assert "hidden_size is 64, flavor 'tiny' has dim 256" in found
    found = " | ".join(init_from_problems(folder, "tokenize.tokenizer.source=train"))
    assert "key 'tokenize.tokenizer.source' is 'train': a run that starts from" in found
    found = " | ".join(init_from_problems(folder, "tokenize.tokenizer.revision=v1"))
    assert "key 'tokenize.tokenizer.revision' is 'v1': a revision is for a Hub id" in found
    assert f"a run that starts from '{folder}' at revision 'main'" in found
    assert "set tokenize.tokenizer.revision to null" in found
    found = " | ".join(init_from_problems(folder, "tokenize.tokenizer.revision=v1",
                                          "pretrain.init_from.revision=v1"))  # fmt: skip
    assert "key 'pretrain.init_from.revision' is 'v1': a revision is for a Hub id" in found
    assert "key 'tokenize.tokenizer.revision' is 'v1': a revision is for a Hub id" in found
    found = " | ".join(init_from_problems(folder.parent / "nowhere"))
    assert "key 'pretrain.init_from.model'" in found and "does not exist" in found
    plain = folder.parent / "no-chat-tokens"  # a tokenizer the chat format cannot use
    shutil.copytree(folder, plain)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (plain / name).unlink(missing_ok=True)
    save_tokenizer(plain, chat=False)
    (found,) = init_from_problems(plain)
    assert found.startswith(f"key 'tokenize.tokenizer.source' is '{plain}': tokenizer")
    assert "chat token '<|user_start|>' is missing" in found


def test_the_first_phase_starts_from_the_checkpoint_and_its_manifest_names_every_file(
    hf_folder,
    phases,  # noqa: F811  (tests.train.test_stage's fixture)
):
    """The pretraining stage's spec and record for `pretrain.init_from` (no training here: the
    trainer's side is the tests above): the first phase starts from the folder in mode hf, the
    next phase from the first; the record holds each weight file's sha256."""
    from apertus.core.config import load_config
    from apertus.core.files import sha256_file
    from apertus.train.config import PretrainConfig
    from apertus.train.stage import resolve_start, run_spec, start_record

    folder, _ = hf_folder
    section = load_config()["pretrain"]
    cfg = PretrainConfig.from_dict(
        {**section, "flavor": "debug", "init_from": {"model": str(folder)}}
    )
    start = resolve_start(cfg, "phase1")
    assert start == (folder, None)
    assert resolve_start(cfg, "phase2") is None
    spec = run_spec(cfg, "phase1", phases, None, start[0])
    later = run_spec(cfg, "phase2", phases, {"final_checkpoint": "/ckpt/step-1"}, start[0])
    assert later.checkpoint.initial_mode == "continue"  # the next phase: the first's run
    assert (spec.checkpoint.initial, spec.checkpoint.initial_mode) == (str(folder), "hf")
    record = start_record(cfg, spec, None)
    assert record["model"] == str(folder) and record["revision"] is None
    assert record["files"]["model.safetensors"]["sha256"] == sha256_file(
        folder / "model.safetensors"
    )
    assert any("optimizer" in what for what in record["not_in_checkpoint"])
    assert record["rope_theta"] == flavor("debug").rope_theta


def test_with_no_phase_the_first_long_context_stage_starts_from_the_checkpoint(
    hf_folder,
    phases,  # noqa: F811  (tests.train.test_stage's fixture)
):
    """`pretrain.phases: []` with `init_from`: the long-context stages alone, the first from the
    released weights (mode hf, its own RoPE theta and length), the next from the first; without
    `init_from` it is refused before any job, naming the stage and the key."""
    from apertus.core.config import load_config
    from apertus.train.config import PretrainConfig
    from apertus.train.plan import pretrain_stages
    from apertus.train.stage import resolve_start, run_spec

    folder, _ = hf_folder
    section = load_config()["pretrain"]
    first = section["long_context"][0]
    longer = {**first, "name": "ctx512", "seq_len": 512, "rope_theta": 4e6}
    cfg = PretrainConfig.from_dict(
        {**section, "flavor": "debug", "phases": [], "goldfish_control": None,
         "long_context": [first, longer], "init_from": {"model": str(folder)}}
    )  # fmt: skip
    plan = pretrain_stages(cfg)
    assert [(s.name, s.previous, s.start) for s in plan] == [
        ("ctx256", None, "weights"),
        ("ctx512", "ctx256", "weights"),
    ]
    start = resolve_start(cfg, "ctx256")
    assert start == (folder, None) and resolve_start(cfg, "ctx512") is None
    spec = run_spec(cfg, "ctx256", phases, None, start[0])
    assert (spec.checkpoint.initial, spec.checkpoint.initial_mode) == (str(folder), "hf")
    assert spec.model_overrides["rope_theta"] == first["rope_theta"] and spec.seq_len == 256
    assert spec.lr.kind == "constant" and spec.steps == first["steps"]
    later = run_spec(cfg, "ctx512", phases, {"final_checkpoint": "/ckpt/step-20"})
    assert (later.checkpoint.initial, later.checkpoint.initial_mode) == ("/ckpt/step-20", "weights")

    found = " | ".join(
        init_from_problems(folder, "pretrain.phases=[]", "pretrain.goldfish_control=null")
    )
    assert "pretrain.phases" not in found  # valid with init_from
    from apertus.plan_check import plan_problems

    problems = plan_problems(
        load_config((), ["pretrain.phases=[]", "pretrain.goldfish_control=null"])
    )
    assert any(
        "pretrain.phases is empty, so long-context stage 'ctx256' comes first" in p
        and "set pretrain.init_from" in p
        for p in problems
    ), problems


@pytest.mark.slow
def test_with_no_phase_the_long_context_stage_trains_from_the_checkpoint(
    hf_folder,
    phases,  # noqa: F811  (tests.train.test_stage's fixture)
    tmp_path,
):
    """The run spec of a first long-context stage (`pretrain.phases: []`) handed to the trainer
    as the stage hands it (one process, two steps at its own length and RoPE theta): it loads
    the released weights through the adapter and trains on from their loss."""
    from apertus.core.config import load_config
    from apertus.train.config import PretrainConfig
    from apertus.train.run_spec import write_run_spec
    from apertus.train.stage import run_spec

    folder, _ = hf_folder
    section = load_config()["pretrain"]
    stage = {**section["long_context"][0], "steps": 2, "global_batch": 2}
    cfg = PretrainConfig.from_dict(
        {**section, "flavor": "debug", "phases": [], "goldfish_control": None,
         "long_context": [stage], "init_from": {"model": str(folder)}, "compile": False}
    )  # fmt: skip
    work = tmp_path / "ctx256-work"
    spec = run_spec(cfg, stage["name"], phases, None, folder).placed(work)
    proc = run_ok(write_run_spec(work / "spec.json", spec), 1)
    assert f"Loading from HF safetensors from --checkpoint.initial_load_path: {folder}" in (
        proc.stdout + proc.stderr
    )
    metrics = read_metrics(work / "out" / "metrics.jsonl")
    assert sorted(metrics) == [1, 2]
    assert abs(metrics[1]["loss"] - math.log(VOCAB)) < 0.5  # transformers' init, not ours


def test_a_hub_start_offline_must_be_in_the_cache(tmp_path):
    from apertus.model.hf_checkpoint import resolve_hf_checkpoint

    hub_id = "swiss-ai/Apertus-8B-2509"
    found = " | ".join(init_from_problems(hub_id))
    assert f"key 'pretrain.init_from.model' is '{hub_id}'" in found
    assert "not in the Hugging Face cache" in found
    with pytest.raises(ApertusError, match=r"@v1 is not in the Hugging Face cache and the run is"):
        resolve_hf_checkpoint(hub_id, "v1", offline=True, cache_dir=str(tmp_path))
    with pytest.raises(ApertusError, match="revision 'v1' is for a Hub id"):
        resolve_hf_checkpoint(str(tmp_path), "v1", offline=True)


def hub_cache_copy(folder: Path, cache: Path, repo_id: str, commit: str = "a" * 40) -> Path:
    """`folder` as the Hugging Face cache holds a downloaded `repo_id` at `main` (the layout
    `huggingface_hub` writes: models--<org>--<name>/snapshots/<commit>, refs/main)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    shutil.copytree(folder, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_a_hub_start_in_the_cache_is_found_offline_and_checked(hf_folder, tmp_path, monkeypatch):
    """The Hub path of a real run, on a local stand-in in the cache's own layout: offline, the
    stage finds the snapshot and its commit, and the plan checks its config.json."""
    from huggingface_hub import constants

    from apertus.model.hf_checkpoint import resolve_hf_checkpoint

    folder, _ = hf_folder
    cache = tmp_path / "hub"
    snapshot = hub_cache_copy(folder, cache, "someone/apertus-debug")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    found, commit = resolve_hf_checkpoint("someone/apertus-debug", None, offline=True)
    assert (found, commit) == (snapshot, "a" * 40)
    assert resolve_hf_checkpoint("someone/apertus-debug", "a" * 40, offline=True)[0] == snapshot
    assert init_from_problems("someone/apertus-debug") == []
    found = " | ".join(init_from_problems("someone/apertus-debug", "pretrain.flavor=tiny"))
    assert "key 'pretrain.init_from.model' is 'someone/apertus-debug'" in found
    assert "hidden_size is 64, flavor 'tiny' has dim 256" in found
    # A revision: the checkpoint's and the tokenizer's are looked up at it, in the cache.
    pinned = ["pretrain.init_from.revision=v2", "tokenize.tokenizer.revision=v2"]
    found = " | ".join(init_from_problems("someone/apertus-debug", *pinned))
    assert "key 'pretrain.init_from.model'" in found and "key 'tokenize.tokenizer.source'" in found
    assert found.count("not in the Hugging Face cache") == 2
    repo = cache / "models--someone--apertus-debug"
    shutil.copytree(snapshot, repo / "snapshots" / ("b" * 40))
    (repo / "refs" / "v2").write_text("b" * 40)
    assert init_from_problems("someone/apertus-debug", *pinned) == []
