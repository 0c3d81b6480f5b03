"""The tiny world's tokenizer: byte-level BPE trained on world text, one token per digit, Qwen-style chat template.

Why: the tiny models must go through exactly the path real models take (`AutoTokenizer.from_pretrained`, a chat
template, `<|im_end|>` as eos), while keeping sequences short. Byte-level BPE round-trips any text (model output
included); digits are split one per token so the column method lines up digit by digit; the format markers
(`<problem>`, `</problem>`, `<answer>`, `</answer>`, `\\boxed{`, `<think>`, `</think>`) are single added tokens that
are *not* special, so decoding with `skip_special_tokens=True` keeps them.

Usage: `build_tokenizer(texts, vocab_size=320).save_pretrained(dir)`; then `AutoTokenizer.from_pretrained(dir)`.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
FORMAT_TOKENS = ["<problem>", "</problem>", "<answer>", "</answer>", "\\boxed{", "<think>", "</think>"]

# Qwen's template without tools and thinking: the same markers and the same generation prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_tokenizer(texts: Iterable[str], vocab_size: int = 320) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts` (deterministic for the same texts) and wrap it for transformers."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    core.add_tokens(FORMAT_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
