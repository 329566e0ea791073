"""The Hugging Face export and its verification card (apertus.export).

The checkpoint is written here in the trainer's DCP layout (model keys at the top level beside
``optimizer.``, ``lr_scheduler.``, ``dataloader.`` and ``train_state.`` entries) from a small
model whose weights are redrawn at a scale where mistakes show, xIELU ``beta`` / ``eps``
included (set away from their defaults, so a zeroed or re-initialised scalar is noticed). The
independent reference is that in-memory model: transformers' ``ApertusForCausalLM`` loaded
from the export must reproduce its logits, and the export's tensors must equal its tensors.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from apertus import cli
from apertus.core import ApertusError
from apertus.export.hf import (
    TRAINER_STATES,
    export_checkpoint,
    hf_state_dict,
    load_model_state,
)
from apertus.export.stage import ExportConfig
from apertus.export.stage import main as stage_main
from apertus.export.verify import (
    VerificationBatch,
    heldout_documents,
    pack_documents,
    tensor_sha256,
    verification_batch,
    verify_export,
)
from apertus.model.flavors import flavor, num_params
from apertus.model.state_dict_adapter import hf_key
from apertus.tokenize.tokenizer import encode_documents, load_tokenizer, train_tokenizer
from apertus.train.checkpoint import seal_checkpoint

REPO = Path(__file__).resolve().parents[2]

# The debug flavor with the overrides a stage would give it: a vocabulary our trained toy
# tokenizer fits in (the byte-level BPE alone has 268 tokens), a stage context and RoPE theta
# that differ from the flavor's, so the export must take them from the overrides.
OVERRIDES = {"vocab_size": 320, "max_seq_len": 64, "rope_theta": 1_000_000.0}
MODEL = flavor("debug", **OVERRIDES)

WORDS = {
    "en": "the river carries cold water past the old mill while children count boats",
    "de": "der Fluss trägt kaltes Wasser an der alten Mühle vorbei während Kinder zählen",
    "fr": "la rivière porte une eau froide devant le vieux moulin où les enfants jouent",
}


def make_texts(lang: str, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = WORDS[lang].split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 40))) + "." for _ in range(n)]


@torch.no_grad()
def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Matrices N(0, 0.3^2), norm weights 1 + N(0, 0.2^2), xIELU raw alphas N(0, 0.5^2), and
    per layer beta in [0.3, 0.7] and eps in [-1e-3, -1e-4] (defaults: 0.5 and -1e-6)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen)
        if p.dim() >= 2:
            p.copy_(0.3 * noise)
        elif name.endswith(("alpha_p", "alpha_n")):
            p.copy_(0.5 * noise)
        else:
            p.copy_(1.0 + 0.2 * noise)
    for name, b in model.named_buffers():
        if name.endswith(".beta"):
            b.copy_(0.3 + 0.4 * torch.rand((), generator=gen))
        elif name.endswith(".eps"):
            b.copy_(-(1e-4 + 9e-4 * torch.rand((), generator=gen)))


def save_trainer_checkpoint(model: torch.nn.Module, step_dir: Path, **extra_model_keys) -> None:
    """A DCP checkpoint laid out as torchtitan's CheckpointManager writes ours: the model's
    state dict flattened at the top level, the trainer states under their own names."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state.update(extra_model_keys)
    state["optimizer"] = {
        "state": {
            k: {"step": torch.tensor(7.0), "m1": torch.zeros_like(v), "v": torch.ones_like(v)}
            for k, v in model.named_parameters()
        }
    }
    state["lr_scheduler"] = {"last_epoch": 7}
    state["dataloader"] = {"windows_consumed": 28, "seq_len": 64}
    state["train_state"] = {"step": 7, "ntokens_seen": 1792}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(state, checkpoint_id=str(step_dir))
        seal_checkpoint(step_dir)  # as the trainer's checkpoint manager does


def packed_positions(lengths_per_row: list[list[int]]) -> torch.Tensor:
    return torch.tensor([[p for n in row for p in range(n)] for row in lengths_per_row])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = MODEL.build()
    randomize_(m, seed=1)
    return m.eval()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, model):
    """A pretraining stage's output (run.json naming a checkpoint), a tokenizer, held-out
    documents in three languages."""
    root = tmp_path_factory.mktemp("export")
    texts = {lang: make_texts(lang, 30, seed=i) for i, lang in enumerate(WORDS)}
    train_tokenizer([t for lang in texts for t in texts[lang]], root / "tokenizer", vocab_size=300)
    (root / "heldout").mkdir()
    for lang, lang_texts in texts.items():
        lines = [
            json.dumps({"id": f"{lang}-{i:03d}", "text": t, "source": "toy"})
            for i, t in enumerate(lang_texts[:12])
        ]
        (root / "heldout" / f"{lang}.jsonl").write_text("\n".join(lines) + "\n")
    step_dir = root / "work" / "ckpt" / "step-7"
    save_trainer_checkpoint(model, step_dir)
    run_dir = root / "run"
    run_dir.mkdir()
    record = {
        "name": "toy",
        "final_checkpoint": str(step_dir),
        "final_step": 7,
        "flavor": "debug",
        "model_overrides": OVERRIDES,
        "seq_len": 64,
    }
    (run_dir / "run.json").write_text(json.dumps(record))
    return root


@pytest.fixture(scope="module")
def fp32_export(workspace):
    out = workspace / "hf-fp32"
    summary = export_checkpoint(
        workspace / "work" / "ckpt" / "step-7", MODEL, out, workspace / "tokenizer"
    )
    return out, summary


@pytest.fixture(scope="module")
def bf16_export(workspace):
    out = workspace / "hf-bf16"
    export_checkpoint(
        workspace / "work" / "ckpt" / "step-7",
        MODEL,
        out,
        workspace / "tokenizer",
        dtype="bfloat16",
    )
    return out


@pytest.fixture(scope="module")
def batch(workspace):
    tokenizer = load_tokenizer(str(workspace / "tokenizer"))
    return verification_batch(tokenizer, workspace / "heldout", rows=3, seq_len=64)


def load_hf(folder: Path):
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


# --------------------------------------------------------------------------------------------
# The export against the model it came from
# --------------------------------------------------------------------------------------------


def test_checkpoint_model_keys_are_read_exactly_and_trainer_states_ignored(workspace, model):
    step_dir = workspace / "work" / "ckpt" / "step-7"
    listed = dcp.FileSystemReader(str(step_dir)).read_metadata().state_dict_metadata
    assert any(k.startswith("optimizer.state.") for k in listed)  # the layout is realistic
    assert {k.split(".")[0] for k in listed} >= set(TRAINER_STATES)
    state = load_model_state(step_dir, MODEL)
    assert list(state) == list(model.state_dict())
    for key, value in model.state_dict().items():
        assert torch.equal(state[key], value), key


def test_export_loads_in_transformers_and_reproduces_our_logits(fp32_export, model):
    folder, summary = fp32_export
    hf = load_hf(folder)
    assert type(hf).__name__ == "ApertusForCausalLM"
    tokens = torch.randint(0, 320, (2, 64), generator=torch.Generator().manual_seed(2))
    positions = packed_positions([[20, 30, 14], [5, 59]])
    with torch.no_grad():
        ours = model(tokens, positions)
        theirs = hf(input_ids=tokens, position_ids=positions, use_cache=False).logits
    difference = (ours - theirs).abs().max().item()
    print(
        f"fp32 export: max abs logit difference {difference:.3e}, max |logit| "
        f"{ours.abs().max().item():.1f}"
    )
    assert ours.abs().max() > 5.0  # a scale at which a wrong weight or RoPE would show
    assert difference <= 1e-4
    assert summary["parameters"] == num_params(MODEL)
    assert summary["weight_files"] == ["model.safetensors"]


def test_exported_tensors_equal_the_model_and_xielu_scalars_are_bit_exact(fp32_export, model):
    folder, _ = fp32_export
    saved = load_file(str(folder / "model.safetensors"))
    ours = model.state_dict()
    assert set(saved) == {hf_key(k) for k in ours}
    for key, value in ours.items():
        assert saved[hf_key(key)].dtype == torch.float32
        assert torch.equal(saved[hf_key(key)], value), key
    hf = load_hf(folder)
    for i in range(MODEL.n_layers):
        act, ref = model.layers[str(i)].feed_forward.act, hf.model.layers[i].mlp.act_fn
        assert act.beta.item() != 0.5 and act.eps.item() < -1e-5  # not the defaults
        for name in ("alpha_p", "alpha_n", "beta", "eps"):
            ours_t, theirs_t = getattr(act, name), getattr(ref, name)
            assert ours_t.shape == theirs_t.shape, name
            assert torch.equal(ours_t, theirs_t), (i, name)
    # Untied: the export keeps two different matrices.
    assert not torch.equal(saved["lm_head.weight"], saved["model.embed_tokens.weight"])


def test_config_generation_config_and_tokenizer_files(fp32_export, workspace):
    folder, _ = fp32_export
    config = json.loads((folder / "config.json").read_text())
    expected = {
        "model_type": "apertus",
        "architectures": ["ApertusForCausalLM"],
        "vocab_size": 320,
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,  # not dim // n_heads (16): must be written
        "hidden_act": "xielu",
        # The context the Llama-3.1 RoPE scaling is made for (8192 x 8), not the stage's 64:
        # transformers warns on every load when it is not above the original 8192.
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-5,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
        "dtype": "float32",
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 1_000_000.0,  # the stage's theta, not the flavor's 500000
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        # The same RoPE under the keys transformers 4.x reads.
        "rope_theta": 1_000_000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    }
    assert {k: config.get(k) for k in expected} == expected
    generation = json.loads((folder / "generation_config.json").read_text())
    # A base model ends generation at </s> only.
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (1, 2)
    assert generation["pad_token_id"] == 3
    assert generation.get("do_sample", False) is False
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (folder / name).read_bytes() == (workspace / "tokenizer" / name).read_bytes()
    tokenizer = load_tokenizer(str(folder))
    assert tokenizer("der Fluss")["input_ids"][0] == 1


def test_bf16_export_rounds_the_weights_and_passes_against_rounded_weights(
    bf16_export, workspace, model, batch
):
    saved = load_file(str(bf16_export / "model.safetensors"))
    for key, value in model.state_dict().items():
        assert saved[hf_key(key)].dtype == torch.bfloat16
        assert torch.equal(saved[hf_key(key)], value.to(torch.bfloat16)), key
    assert json.loads((bf16_export / "config.json").read_text())["dtype"] == "bfloat16"
    card = verify_export(
        workspace / "work" / "ckpt" / "step-7", MODEL, bf16_export, batch, tolerance=1e-4
    )
    print(f"bf16 export: max abs logit difference {card['max_abs_diff']:.3e}")
    assert card["passed"] and card["export_dtype"] == "bfloat16"
    assert "rounded to bfloat16" in card["reference"]
    # Against the unrounded weights the same tolerance would fail: the rounding is what the
    # card's reference accounts for.
    hf = load_hf(bf16_export)
    with torch.no_grad():
        unrounded = model(batch.tokens, batch.positions)
        theirs = hf(input_ids=batch.tokens, position_ids=batch.positions, use_cache=False).logits
    assert (unrounded - theirs).abs().max() > 1e-2


# --------------------------------------------------------------------------------------------
# Behaving like a Hub model: end of turn, legacy RoPE keys, warning-free loading
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_export(workspace):
    out = workspace / "hf-chat"
    export_checkpoint(
        workspace / "work" / "ckpt" / "step-7", MODEL, out, workspace / "tokenizer", chat=True
    )
    return out


def rig_chain(folder: Path, chain: dict[int, int], default_next: int) -> None:
    """Make the exported weights a bigram machine: token t is followed by ``chain[t]``, any
    other token by `default_next`. The blocks add nothing (o_proj and down_proj zero), so the
    last hidden state is the token's embedding: a one-hot direction per chain token, a shared
    one for the rest, and lm_head maps each direction to its successor."""
    tensors = load_file(str(folder / "model.safetensors"))
    dim = tensors["model.embed_tokens.weight"].shape[1]
    for key in tensors:
        if key.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            tensors[key] = torch.zeros_like(tensors[key])
    direction = {t: 1 + i for i, t in enumerate(chain)}
    embed = torch.zeros_like(tensors["model.embed_tokens.weight"])
    embed[:, 0] = 10.0
    head = torch.zeros_like(tensors["lm_head.weight"])
    head[default_next, 0] = 1.0
    for token, following in chain.items():
        embed[token] = 0.0
        embed[token, direction[token]] = 10.0
        head[following, direction[token]] = 1.0
    assert len(chain) < dim
    tensors["model.embed_tokens.weight"], tensors["lm_head.weight"] = embed, head
    tensors["model.norm.weight"] = torch.ones_like(tensors["model.norm.weight"])
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_chat_export_generation_stops_at_the_end_of_the_assistant_turn(chat_export, tmp_path):
    from transformers import AutoTokenizer, pipeline

    folder = tampered_copy(chat_export, tmp_path / "chat")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    end = tokenizer.convert_tokens_to_ids("<|assistant_end|>")
    o, k, bang = (tokenizer.convert_tokens_to_ids(t) for t in ("O", "K", "!"))
    assert len({o, k, bang, end, tokenizer.unk_token_id}) == 5
    # After any token: "O", "K", <|assistant_end|>, then "!" and around again: a model that
    # ends its turn, and would talk on if generation did not stop there.
    rig_chain(folder, {o: k, k: end, end: bang}, default_next=o)
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [2, end]

    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    messages = [{"role": "user", "content": "der Fluss"}]
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    prompt = inputs["input_ids"].shape[1]
    stopped = model.generate(**inputs, max_new_tokens=12)[0, prompt:].tolist()
    assert stopped == [o, k, end]
    # The same model with </s> as the only end token runs through the end of its turn.
    ran_on = model.generate(**inputs, max_new_tokens=12, eos_token_id=2)[0, prompt:].tolist()
    assert ran_on[:6] == [o, k, end, bang, o, k] and len(ran_on) == 12

    chat = pipeline("text-generation", model=str(folder), tokenizer=str(folder))
    reply = chat(messages, max_new_tokens=12)[0]["generated_text"]
    assert reply[:-1] == messages
    assert reply[-1] == {"role": "assistant", "content": "OK"}


def test_base_export_ends_generation_at_eos_only(fp32_export):
    generation = json.loads((fp32_export[0] / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2


def test_legacy_rope_keys_alone_give_the_same_model(fp32_export, model):
    """What transformers 4.x reads (rope_theta, rope_scaling) builds the RoPE of the export:
    the config without rope_parameters gives the same logits."""
    from transformers import ApertusConfig, ApertusForCausalLM

    folder, _ = fp32_export
    legacy = json.loads((folder / "config.json").read_text())
    del legacy["rope_parameters"]
    config = ApertusConfig(**{k: v for k, v in legacy.items() if k != "transformers_version"})
    assert config.rope_parameters["rope_theta"] == 1_000_000.0
    assert config.rope_parameters["rope_type"] == "llama3"
    hf = ApertusForCausalLM(config)
    hf.load_state_dict(load_file(str(folder / "model.safetensors")))
    tokens = torch.randint(0, 320, (1, 48), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        torch.testing.assert_close(
            hf.eval()(input_ids=tokens).logits, model(tokens), rtol=0, atol=1e-4
        )


# A transformers notice about an optional CUDA kernel package, printed for every Apertus model
# (the Hub's own included) on a machine without it: about the environment, not the export.
XIELU_KERNEL_NOTICE = "CUDA-fused xIELU not available"


def test_loading_the_export_is_warning_free(chat_export):
    import logging

    from transformers import AutoConfig, AutoTokenizer

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    library = logging.getLogger("transformers")
    library.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            AutoConfig.from_pretrained(str(chat_export))
            AutoModelForCausalLM.from_pretrained(str(chat_export))
            tokenizer = AutoTokenizer.from_pretrained(str(chat_export))
    finally:
        library.removeHandler(handler)
    messages = [r.getMessage() for r in records if XIELU_KERNEL_NOTICE not in r.getMessage()]
    assert messages == []
    assert [str(w.message) for w in caught] == []
    config = json.loads((chat_export / "config.json").read_text())
    assert tokenizer.model_max_length == config["max_position_embeddings"] == 65536


# --------------------------------------------------------------------------------------------
# The verification card
# --------------------------------------------------------------------------------------------


def test_pack_documents_matches_hand_computed_training_windows():
    docs = [[1, 10, 11, 2], [1, 20, 2], [1, 30, 31, 32, 33, 34, 2]]
    tokens, positions = pack_documents(docs, rows=2, seq_len=5)
    # Windows of 6: [1 10 11 2 1 20] and [2 1 30 31 32 33]; inputs are their first 5 tokens,
    # positions restart at each document start and at each window start.
    assert tokens.tolist() == [[1, 10, 11, 2, 1], [2, 1, 30, 31, 32]]
    assert positions.tolist() == [[0, 1, 2, 3, 0], [0, 0, 1, 2, 3]]
    with pytest.raises(ApertusError, match="needs 3 rows of 6 tokens"):
        pack_documents(docs, rows=3, seq_len=5)


def test_pack_documents_equals_the_trainers_phase_windows(tmp_path):
    from apertus.tokenize.phases import PhaseDataset
    from tests.train.test_torchtitan import build_phase

    phase = PhaseDataset(build_phase(tmp_path, n_docs=40))
    stream = phase.packed_sequences(48)
    expected = [next(stream) for _ in range(5)]
    documents = [phase.document(i) for i in range(len(phase))]
    tokens, positions = pack_documents(documents, rows=5, seq_len=48)
    for row, (w_tokens, w_positions, _) in enumerate(expected):
        assert tokens[row].tolist() == w_tokens[:-1].tolist()
        assert positions[row].tolist() == w_positions[:-1].tolist()


def test_heldout_documents_alternate_languages_and_bad_lines_are_named(workspace, tmp_path):
    names = [name for name, _ in heldout_documents(workspace / "heldout")]
    assert names[:6] == [
        "de/de-000",
        "en/en-000",
        "fr/fr-000",
        "de/de-001",
        "en/en-001",
        "fr/fr-001",
    ]
    assert len(names) == 36
    (tmp_path / "xx.jsonl").write_text('{"id": "a", "text": "ok"}\n{"id": "b", "text": 3}\n')
    with pytest.raises(ApertusError, match=r"xx\.jsonl:2"):
        list(heldout_documents(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ApertusError, match=r"no \*\.jsonl"):
        list(heldout_documents(tmp_path / "empty"))


def test_verification_batch_is_packed_heldout_text(workspace, batch):
    assert batch.tokens.shape == batch.positions.shape == (3, 64)
    # Document boundaries inside rows, so the comparison exercises the block-causal mask.
    inner_starts = (batch.positions[:, 1:] == 0).sum().item()
    assert inner_starts >= 3
    assert (batch.tokens[batch.positions == 0] == 1).sum() >= inner_starts  # <s> opens docs
    tokenizer = load_tokenizer(str(workspace / "tokenizer"))
    first_doc = dict(heldout_documents(workspace / "heldout"))[batch.documents[0]]
    encoded = [1, *tokenizer(first_doc, add_special_tokens=False)["input_ids"], 2]
    if len(encoded) > 64 // 3:  # long documents keep their start and their </s>
        encoded = [*encoded[: 64 // 3 - 1], 2]
    assert batch.tokens[0, : len(encoded)].tolist() == encoded
    # every row has a document start after its first token
    assert ((batch.positions[:, 1:] == 0).sum(dim=1) >= 1).all()


def test_too_few_heldout_tokens_repeat_the_documents_to_fill_the_batch(workspace, tmp_path):
    """A post-training-only run's held-out texts are its few held-out prompts: the documents
    come again, in order, until the rows are full; none at all is an error naming the folder."""
    tokenizer = load_tokenizer(str(workspace / "tokenizer"))
    few = tmp_path / "few"
    few.mkdir()
    (few / "eng_Latn.jsonl").write_text(json.dumps({"id": "a", "text": "Hello there."}) + "\n")
    batch = verification_batch(tokenizer, few, rows=2, seq_len=64)
    (ids,) = encode_documents(tokenizer, ["Hello there."])
    assert batch.tokens.shape == (2, 64) and batch.documents == ("eng_Latn/a",)
    assert batch.tokens[0, : 2 * len(ids)].tolist() == ids + ids
    (few / "eng_Latn.jsonl").write_text("")
    with pytest.raises(ApertusError, match=f"no held-out document in {few}"):
        verification_batch(tokenizer, few, rows=2, seq_len=64)


def test_verification_card_passes_and_records_the_figures(fp32_export, workspace, batch):
    folder, _ = fp32_export
    card = verify_export(workspace / "work" / "ckpt" / "step-7", MODEL, folder, batch)
    print(f"verification card: max abs diff {card['max_abs_diff']:.3e}")
    assert card["passed"] is True
    assert card["max_abs_diff"] <= 1e-4 and card["tolerance"] == 1e-4
    assert card["max_abs_logit"] > 5.0
    assert card["batch"]["rows"] == 3 and card["batch"]["seq_len"] == 64
    assert card["batch"]["tokens_sha256"] == tensor_sha256(batch.tokens)
    assert json.loads((folder / "verification.json").read_text()) == card
    # The checkpoint relative to the card's folder, so a results folder moves whole.
    assert not Path(card["checkpoint"]).is_absolute()
    assert (folder / card["checkpoint"]).resolve() == (workspace / "work/ckpt/step-7").resolve()


def test_transformers_reads_restarting_positions_as_document_boundaries(fp32_export):
    """The premise of the card: with position_ids (and no cache) transformers masks each
    document off from the previous ones, as our model does."""
    hf = load_hf(fp32_export[0])
    gen = torch.Generator().manual_seed(4)
    doc_a, doc_b = (
        torch.randint(0, 320, (1, 23), generator=gen),
        torch.randint(0, 320, (1, 31), generator=gen),
    )
    packed = torch.cat([doc_a, doc_b], dim=1)
    positions = packed_positions([[23, 31]])
    with torch.no_grad():
        together = hf(input_ids=packed, position_ids=positions, use_cache=False).logits
        alone = hf(input_ids=doc_b, use_cache=False).logits
        unmasked = hf(input_ids=packed, use_cache=False).logits
    torch.testing.assert_close(together[:, 23:], alone, rtol=1e-5, atol=1e-5)
    assert (unmasked[:, 23:] - alone).abs().max() > 1e-2


def tampered_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    (target / "verification.json").unlink(missing_ok=True)
    return target


def test_verification_fails_when_one_weight_is_flipped(fp32_export, workspace, batch, tmp_path):
    folder = tampered_copy(fp32_export[0], tmp_path / "flipped")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.layers.1.mlp.down_proj.weight"][5, 7] *= -1
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ApertusError, match=r"max abs logit difference \S+ > tolerance 1\.0e-04"):
        verify_export(workspace / "work" / "ckpt" / "step-7", MODEL, folder, batch)
    card = json.loads((folder / "verification.json").read_text())
    assert card["passed"] is False and card["max_abs_diff"] > 1e-3


def test_verification_fails_with_a_wrong_rope_theta(fp32_export, workspace, batch, tmp_path):
    folder = tampered_copy(fp32_export[0], tmp_path / "theta")
    config = json.loads((folder / "config.json").read_text())
    # Both spellings: transformers 5 reads the legacy rope_scaling / rope_theta first.
    config["rope_parameters"]["rope_theta"] = config["rope_theta"] = 500_000.0
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ApertusError, match="max abs logit difference"):
        verify_export(workspace / "work" / "ckpt" / "step-7", MODEL, folder, batch)


def test_verification_fails_when_a_tensor_is_missing(fp32_export, workspace, batch, tmp_path):
    """transformers would initialise a missing xIELU beta itself and only warn."""
    folder = tampered_copy(fp32_export[0], tmp_path / "missing")
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["model.layers.0.mlp.act_fn.beta"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ApertusError, match=r"does not load cleanly.*act_fn\.beta"):
        verify_export(workspace / "work" / "ckpt" / "step-7", MODEL, folder, batch)


def test_verification_refuses_a_batch_outside_the_vocabulary(fp32_export, workspace):
    bad = VerificationBatch(torch.full((1, 8), 400), torch.arange(8)[None])
    with pytest.raises(ApertusError, match="outside the model's vocabulary of 320"):
        verify_export(workspace / "work" / "ckpt" / "step-7", MODEL, fp32_export[0], bad)


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


def test_checkpoint_with_missing_and_unexpected_keys_is_refused(model, tmp_path):
    state_model = MODEL.build()
    state_model.load_state_dict(model.state_dict())
    del state_model.norm  # the checkpoint lacks norm.weight
    step_dir = tmp_path / "step-3"
    save_trainer_checkpoint(state_model, step_dir, **{"model.extra": torch.zeros(2)})
    with pytest.raises(ApertusError) as info:
        load_model_state(step_dir, MODEL)
    message = str(info.value)
    for fragment in (
        "missing model key(s) norm.weight",
        "unexpected key(s) model.extra",
        str(step_dir),
    ):
        assert fragment in message


def test_checkpoint_of_another_shape_or_no_checkpoint_is_refused(workspace, tmp_path):
    step_dir = workspace / "work" / "ckpt" / "step-7"
    with pytest.raises(ApertusError, match=r"tok_embeddings\.weight has shape \[320, 64\]"):
        load_model_state(step_dir, flavor("debug"))
    with pytest.raises(ApertusError, match="does not exist"):
        load_model_state(tmp_path / "step-9", MODEL)
    (tmp_path / "step-8").mkdir()
    with pytest.raises(ApertusError, match=r"no \.metadata"):
        load_model_state(tmp_path / "step-8", MODEL)


def test_export_refuses_a_tokenizer_larger_than_the_vocabulary(workspace, model, tmp_path):
    small = flavor("debug", **{**OVERRIDES, "vocab_size": 270})
    m = small.build()
    save_trainer_checkpoint(m, tmp_path / "step-1")
    with pytest.raises(ApertusError, match=r"tokens, more than the model's vocab_size 270"):
        export_checkpoint(tmp_path / "step-1", small, tmp_path / "out", workspace / "tokenizer")
    assert not (tmp_path / "out").exists()  # nothing half-written
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_existing_output_is_replaced_only_when_it_is_an_export(fp32_export, workspace, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(fp32_export[0], out)
    (out / "model.safetensors").write_bytes(b"stale")
    export_checkpoint(workspace / "work" / "ckpt" / "step-7", MODEL, out, workspace / "tokenizer")
    assert load_file(str(out / "model.safetensors")).keys()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ApertusError, match=r"notes\.txt.*refusing to replace"):
        export_checkpoint(
            workspace / "work" / "ckpt" / "step-7", MODEL, out, workspace / "tokenizer"
        )
    assert (out / "notes.txt").read_text() == "mine"


def test_sharded_export_loads_the_same(workspace, model, tmp_path):
    out = tmp_path / "sharded"
    summary = export_checkpoint(
        workspace / "work" / "ckpt" / "step-7",
        MODEL,
        out,
        workspace / "tokenizer",
        max_shard_size=40_000,
    )
    assert len(summary["weight_files"]) > 2 and (out / "model.safetensors.index.json").is_file()
    hf = load_hf(out)
    tokens = torch.randint(0, 320, (1, 32), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(
            hf(input_ids=tokens, use_cache=False).logits, model(tokens), rtol=0, atol=1e-4
        )


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"dtype": "float16"}, "export.dtype must be one of float32, bfloat16"),
        ({"verify": {"tol": 1e-3}}, "unknown key 'export.verify.tol'"),
        ({"format": "gguf"}, "unknown key 'export.format'"),
        ({"verify": {"tolerance": 0}}, "tolerance must be a positive number"),
        ({"verify": {"rows": 0}}, "rows must be a positive integer"),
        ({"verify": {"seq_len": 2.5}}, "export.verify.seq_len must be an integer or null"),
    ],
)
def test_bad_export_config_is_refused(raw, fragment):
    with pytest.raises(ApertusError) as info:
        ExportConfig.from_dict(raw)
    assert fragment in str(info.value)


def stage_args(workspace: Path, out: Path, run: Path | None = None, **changes) -> list[str]:
    args = {
        "--config": json.dumps(changes.pop("config", {"verify": {"rows": 3}})),
        "--manifest": str(out / "manifest.json"),
        "--run": str(run or workspace / "run"),
        "--tokenizer": str(workspace / "tokenizer"),
        "--heldout": str(workspace / "heldout"),
        "--output": str(out / "hf"),
        **changes,
    }
    return [item for pair in args.items() for item in pair]


def write_run(tmp_path: Path, workspace: Path, **changes) -> Path:
    record = json.loads((workspace / "run" / "run.json").read_text())
    record.update(changes)
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "run.json").write_text(json.dumps(record))
    return run


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"flavor": "huge"}, "unknown model flavor 'huge'"),
        ({"final_checkpoint": "/nonexistent/step-1"}, "/nonexistent/step-1 named by"),
        ({"seq_len": "64"}, "'seq_len' must be a int"),
        ({"model_overrides": {**OVERRIDES, "vocab_size": 270}}, "more than the model's"),
        ({"model_overrides": {**OVERRIDES, "max_seq_len": 32}}, "exceeds the model's max_seq_len"),
    ],
)
def test_stage_refuses_bad_run_records(workspace, tmp_path, changes, fragment):
    run = write_run(tmp_path, workspace, **changes)
    with pytest.raises(ApertusError) as info:
        stage_main(stage_args(workspace, tmp_path, run))
    assert fragment in str(info.value)
    assert not (tmp_path / "hf").exists() and not (tmp_path / "manifest.json").exists()


def test_stage_refuses_a_missing_run_json_or_tokenizer(workspace, tmp_path):
    with pytest.raises(ApertusError, match=r"run\.json does not exist"):
        stage_main(stage_args(workspace, tmp_path, tmp_path / "norun"))
    with pytest.raises(ApertusError, match=r"tokenizer directory .* does not exist"):
        stage_main(stage_args(workspace, tmp_path, **{"--tokenizer": str(tmp_path / "tok")}))


def test_stage_exports_an_intermediate_step_and_names_the_steps_there_are(
    workspace, model, tmp_path
):
    """``--step N`` reads the step-N checkpoint beside the run's final one."""
    early = MODEL.build()
    randomize_(early, seed=9)
    ckpt = tmp_path / "work" / "ckpt"
    save_trainer_checkpoint(early, ckpt / "step-3")
    save_trainer_checkpoint(model, ckpt / "step-7")
    (ckpt / "step-5").mkdir()  # being written (no .metadata yet): not a step to offer
    run = write_run(tmp_path, workspace, final_checkpoint=str(ckpt / "step-7"))
    stage_main([*stage_args(workspace, tmp_path, run), "--step", "3"])
    saved = load_file(str(tmp_path / "hf" / "model.safetensors"))
    for key, value in early.state_dict().items():
        assert torch.equal(saved[hf_key(key)], value), key
    summary = json.loads((tmp_path / "manifest.json").read_text())["summary"]
    assert summary["step"] == 3 and summary["checkpoint"].endswith("step-3")

    with pytest.raises(ApertusError) as info:
        stage_main([*stage_args(workspace, tmp_path / "other", run), "--step", "5"])
    assert str(info.value).endswith(f"no loadable checkpoint at step 5; steps in {ckpt}: 3, 7")
    assert not (tmp_path / "other").exists()
    # A bit flipped under the older step (resuming never hashes it: only the newest is read)
    # is refused when it is the one exported.
    data = next((ckpt / "step-3").glob("*.distcp"))
    flipped = bytearray(data.read_bytes())
    flipped[len(flipped) // 2] ^= 0x01
    data.write_bytes(bytes(flipped))
    with pytest.raises(ApertusError, match=rf"step-3 cannot be exported: .*{data.name}: sha256"):
        stage_main([*stage_args(workspace, tmp_path / "third", run), "--step", "3"])


@pytest.mark.slow
def test_stage_end_to_end_writes_the_export_card_and_manifest(workspace, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "apertus.export.stage", *stage_args(workspace, tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (manifest["stage"], manifest["step"]) == ("export", "hf")
    summary = manifest["summary"]
    print(f"stage: max abs diff {summary['max_abs_diff']:.3e}")
    assert summary["max_abs_diff"] <= 1e-4
    assert summary["parameters"] == num_params(MODEL) and summary["dtype"] == "float32"
    assert summary["batch"] == [3, 64] and summary["rope_theta"] == 1_000_000.0
    card = json.loads((tmp_path / "hf" / "verification.json").read_text())
    assert card["passed"] and card["batch"]["tokens_sha256"] == summary["tokens_sha256"]

    failed = subprocess.run(
        [
            sys.executable,
            "-m",
            "apertus.export.stage",
            *stage_args(workspace, tmp_path / "second", tmp_path / "norun"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert failed.returncode == 2
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "run.json does not exist" in errors[0]


# --------------------------------------------------------------------------------------------
# A checkpoint written by the real trainer
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_export_of_a_two_step_torchtitan_run(workspace, tmp_path):
    from tests.train.test_torchtitan import build_phase, load_checkpoint, run_ok, write_spec

    phase = build_phase(tmp_path / "data", n_docs=60)
    overrides = {"vocab_size": 320, "rope_theta": 1_000_000.0, "max_seq_len": 64}
    spec = write_spec(
        tmp_path / "train",
        phase,
        steps=2,
        model_overrides=overrides,
        lr={"kind": "wsd", "peak": 3e-3, "warmup_steps": 1, "decay_steps": 1},
    )
    run_ok(spec, 1)
    step_dir = tmp_path / "train" / "ckpt" / "step-2"
    run = tmp_path / "run"
    run.mkdir()
    record = {
        "name": "two-steps",
        "final_checkpoint": str(step_dir),
        "flavor": "debug",
        "model_overrides": overrides,
        "seq_len": 64,
    }
    (run / "run.json").write_text(json.dumps(record))
    stage_main(stage_args(workspace, tmp_path, run))
    card = json.loads((tmp_path / "hf" / "verification.json").read_text())
    assert card["passed"] and card["max_abs_diff"] <= 1e-4
    # Independent read of the same checkpoint (torch's consolidation): every tensor of rank
    # >= 1 equals the export; the 0-dim xIELU scalars, which that path zeroes (PLATFORM.md),
    # are the trainer's 0.5 and -1e-6 exactly.
    consolidated = load_checkpoint(step_dir, tmp_path)
    saved = load_file(str(tmp_path / "hf" / "model.safetensors"))
    expected = hf_state_dict(
        {
            k: v
            for k, v in consolidated.items()
            if isinstance(v, torch.Tensor) and v.dim() > 0 and not k.startswith(TRAINER_STATES)
        }
    )
    for key, value in expected.items():
        assert torch.equal(saved[key], value), key
    assert len(saved) == len(expected) + 2 * MODEL.n_layers
    for i in range(MODEL.n_layers):
        assert saved[f"model.layers.{i}.mlp.act_fn.beta"].item() == 0.5
        assert torch.equal(saved[f"model.layers.{i}.mlp.act_fn.eps"], torch.tensor(-1e-6))


@pytest.mark.slow
def test_apertus_export_command_exports_a_kept_step_of_a_run_folder(workspace, model, tmp_path):
    """`apertus export RUN_DIR STAGE --step N` finds the stage, tokenizer and held-out documents
    in a run folder's layout and runs the export step on them."""
    early = MODEL.build()
    randomize_(early, seed=11)
    run_dir = tmp_path / "results" / "toy"
    stage = run_dir / "pretrain" / "phase1"
    ckpt = stage / "_work" / "ckpt"
    save_trainer_checkpoint(early, ckpt / "step-3")
    save_trainer_checkpoint(model, ckpt / "step-7")
    write_run(tmp_path, workspace, final_checkpoint=str(ckpt / "step-7"))
    shutil.copytree(tmp_path / "run", stage, dirs_exist_ok=True)
    shutil.copytree(workspace / "tokenizer", run_dir / "tokenize" / "tokenizer")
    shutil.copytree(workspace / "heldout", run_dir / "tokenize" / "heldout")
    out = tmp_path / "phase1-step-3"
    assert cli.run(["export", str(run_dir), "phase1", "--step", "3", "--output", str(out)]) == 0
    saved = load_file(str(out / "model.safetensors"))
    for key, value in early.state_dict().items():
        assert torch.equal(saved[hf_key(key)], value), key
    summary = json.loads(Path(f"{out}.manifest.json").read_text())["summary"]
    assert summary["step"] == 3 and (out / "verification.json").is_file()

    with pytest.raises(ApertusError, match="exists: name a new folder"):
        cli.run(["export", str(run_dir), "phase1", "--output", str(out)])
    with pytest.raises(ApertusError, match=r"no training stage 'sft' \(neither pretrain/sft"):
        cli.run(["export", str(run_dir), "sft", "--output", str(tmp_path / "x")])
