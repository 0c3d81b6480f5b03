"""The `accel:` config section: a key per CPU fast path, checked without torch.

`AccelConfig` lives here, outside the `accel` package, because that package's `__init__` loads the kernels (and
torch) and the command line checks a recipe before it imports torch; `accel.settings` resolves the section against
the environment and re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from pasodoble.errors import ConfigError

MODES = ("auto", "on", "off")
MATMULS = ("auto", "onednn", "blas", "native", "off")  # "off" is "blas": torch's own products


@dataclass
class AccelConfig:
    decode_kernel: str = "auto"  # compiled decode attention over a shared prompt (float32 CPU, one thread)
    train_attention: str = "auto"  # compiled attention forward and backward of the update and prefills
    fused_layers: str = "auto"  # compiled RMSNorm, rotary embedding and SiLU gate, one pass each
    fused_blocks: str = "auto"  # a decoder layer as one autograd node over the compiled kernels
    narrow_matmul: str = "auto"  # the project's kernel for narrow float32 linear layers
    layer_groups: str = "auto"  # narrow layers of one input (q, k, v; gate, up) in one kernel call
    cpu_matmul: str = (
        "auto"  # float32 linear layers: auto | onednn | blas | native | off (off: torch's, as blas)
    )

    def validate(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            choices = MATMULS if f.name == "cpu_matmul" else MODES
            if value not in choices:
                raise ConfigError(f.name, f"unknown {value!r}; use one of {', '.join(choices)}")
