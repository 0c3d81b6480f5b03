"""`python -m pasodoble.sandbox`: print which sandbox layers this machine has (JSON); exit 1 without the essential ones."""

import json
import sys

from pasodoble.sandbox.probe import probe

found = probe()
print(json.dumps(found, indent=2))
sys.exit(0 if found["essential_ok"] else 1)
