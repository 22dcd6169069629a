"""``import pytapp`` imports nothing heavy (checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ["torch", "pytblis", "matplotlib", "rich", "hypothesis", "opt_einsum", "numba",
         "cotengra", "dask"]


def test_import_is_light() -> None:
    code = (
        "import sys, pytapp\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""
