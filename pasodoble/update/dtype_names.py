"""The compute dtypes a role may name (`<role>.dtype`), as config strings; `precision.DTYPES` maps each to torch's.

Apart from `precision` so that a recipe's dtype is checked before torch is imported.
"""

DTYPE_NAMES = ("float32", "bfloat16", "float16")
