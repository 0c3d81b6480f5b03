"""Domains by name: the recipe's `domain:` picks one (`math` by default); `register_domain` adds one.

    domain = get_domain("math")
    proposals = read_proposals(domain, completions)    # parse + staged gate, reasons counted by the loop
    with domain.open_checker(cfg.grader) as checker:
        batch = checker.grade(golds, responses)

The interface is in `base.py`; docs/DOMAINS.md says how to add a domain.
"""

from __future__ import annotations

from collections.abc import Callable

from pasodoble.domains.base import CheckBatch, Checker, Domain, GateStage, Verdict, read_proposals
from pasodoble.domains.code import CodeDomain
from pasodoble.domains.math import MathDomain
from pasodoble.domains.qa import QADomain
from pasodoble.errors import ConfigError

_FACTORIES: dict[str, Callable[[], Domain]] = {"code": CodeDomain, "math": MathDomain, "qa": QADomain}


def register_domain(name: str, factory: Callable[[], Domain]) -> None:
    """Make `factory()` the domain called `name`; a name is registered once."""
    if name in _FACTORIES:
        raise ValueError(f"a domain named {name!r} is already registered")
    _FACTORIES[name] = factory


def unregister_domain(name: str) -> None:
    """Remove a registered domain (tests register toy ones); the built-in ones stay."""
    if name not in ("code", "math", "qa"):
        _FACTORIES.pop(name, None)


def domain_names() -> list[str]:
    return sorted(_FACTORIES)


def get_domain(name: str) -> Domain:
    """The domain called `name`; an unknown name is a one-line config error listing the registered ones."""
    if name not in _FACTORIES:
        raise ConfigError(
            "domain", f"unknown domain {name!r}; registered domains: {', '.join(domain_names())}"
        )
    return _FACTORIES[name]()


__all__ = [
    "CheckBatch",
    "Checker",
    "Domain",
    "GateStage",
    "Verdict",
    "domain_names",
    "get_domain",
    "read_proposals",
    "register_domain",
    "unregister_domain",
]
