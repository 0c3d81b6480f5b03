"""User-facing errors.

A user mistake (a wrong config key, a missing file, a bad flag) must end in one clear line that names what is wrong,
where, and how to fix it, with exit code 2; never a traceback. Code raises `ConfigError` (or `UserError`) and the CLI
turns it into that line. Failures *inside* a step (an unparseable completion, a grader timeout) are not errors: they
are counted in metrics and the run goes on.
"""

from __future__ import annotations


class UserError(Exception):
    """An input problem the user can fix; printed as one line, exit code 2."""

    exit_code = 2


class ConfigError(UserError):
    """A bad configuration value. `where` is a dotted field path (`solver.lr`) or a file name."""

    def __init__(self, where: str, message: str):
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)
