"""Which CPU fast paths run: the `accel:` config section, its one environment override, and the old variables.

What: `AccelConfig` (defined in `pasodoble.accel_config`, which reads without torch) holds a key per fast path
(`auto` by default, `off` to keep the stock path; `on` as `auto`, but a kernel that cannot be built is an error
rather than a warning). `resolve(cfg, environ)` turns it into the modes the kernels read: `PASODOBLE_ACCEL=off` turns every fast path off, whatever the config says; the old
per-kernel variables (`PASODOBLE_DECODE_KERNEL=off`, ...) still turn their path off, with a one-line note naming
the key that replaces them. `configure(cfg)` makes `cfg` the process's; `mode(key)` resolves it against the
environment of the moment (the defaults until something configures it). The kernels load once per process (`accel.native`), so the
switches are the process's, not a model's.

Run: `pasodoble train ... accel.fused_blocks=off`, or `PASODOBLE_ACCEL=off pasodoble train ...`; `pasodoble config
keys` lists the keys; tests in tests/accel/test_settings.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import fields

from pasodoble.accel_config import MATMULS as MATMULS  # re-exported: the section's names
from pasodoble.accel_config import MODES as MODES
from pasodoble.accel_config import AccelConfig
from pasodoble.errors import ConfigError

ENV = "PASODOBLE_ACCEL"  # "off": every fast path off
# the variables each fast path had before the `accel:` section; "off" (or 0/false/no) turned it off
OLD_ENV = {
    "PASODOBLE_DECODE_KERNEL": "decode_kernel",
    "PASODOBLE_TRAIN_ATTENTION": "train_attention",
    "PASODOBLE_FUSED_LAYERS": "fused_layers",
    "PASODOBLE_FUSED_BLOCKS": "fused_blocks",
    "PASODOBLE_NARROW_MATMUL": "narrow_matmul",
    "PASODOBLE_LAYER_GROUPS": "layer_groups",
}
OFF_WORDS = ("off", "0", "false", "no")


_current: dict[str, AccelConfig] = {}  # "cfg": the process's section once configured
_noted: set[str] = set()  # old variables whose note was printed


def resolve(cfg: AccelConfig | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each fast path's mode under `cfg` (None: the defaults) and `environ` (None: this process's)."""
    cfg = AccelConfig() if cfg is None else cfg
    cfg.validate()
    environ = os.environ if environ is None else environ
    modes = {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    for old, key in OLD_ENV.items():
        if environ.get(old, "").lower() in OFF_WORDS:
            if old not in _noted:
                _noted.add(old)
                print(f"pasodoble: {old}=off is deprecated; use accel.{key}=off", file=sys.stderr)
            modes[key] = "off"
    override = environ.get(ENV, "").lower()
    if override not in ("", "auto", "off"):
        raise ConfigError(ENV, f"unknown {environ[ENV]!r}; use off (every fast path off) or leave it unset")
    if override == "off":
        modes = dict.fromkeys(modes, "off")
    if modes["cpu_matmul"] == "off":
        modes["cpu_matmul"] = "blas"
    return modes


def configure(cfg: AccelConfig | None) -> dict[str, str]:
    """Makes `cfg` (None: the defaults) the process's section; returns its modes."""
    modes = resolve(cfg)
    _current["cfg"] = AccelConfig() if cfg is None else cfg
    return modes


def current() -> AccelConfig:
    """The process's section (the defaults until something configures it)."""
    return _current.get("cfg") or AccelConfig()


def mode(key: str) -> str:
    """The process's mode of fast path `key` (`auto`, `on`, `off`; `cpu_matmul`: its choice)."""
    return resolve(_current.get("cfg"))[key]


def is_off(key: str) -> bool:
    return mode(key) == "off"
