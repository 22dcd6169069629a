"""The README's Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
#: Top-level modules that come from pytapp's optional extras (pyproject.toml), not its core.
OPTIONAL = frozenset({"dask", "distributed", "zarr", "pytblis", "torch", "cotengra", "rich",
                      "matplotlib", "quimb"})
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int) -> None:
    # `make test` installs every extra; elsewhere (a device's own Python) an example that needs
    # an extra that is not there says so instead of failing.
    for name in re.findall(r"^(?:from|import) ([A-Za-z_][\w.]*)", BLOCKS[index], re.M):
        if name.split(".")[0] in OPTIONAL:
            pytest.importorskip(name, reason=f"the example needs {name}, an optional extra")
    out = subprocess.run([sys.executable, "-c", BLOCKS[index]], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_readme_backends_matrix_is_generated_from_capabilities() -> None:
    from pytapp.backends import matrix_markdown

    text = README.read_text(encoding="utf-8")
    start = text.index("<!-- backends-matrix -->") + len("<!-- backends-matrix -->")
    end = text.index("<!-- /backends-matrix -->")
    assert text[start:end].strip() == matrix_markdown().strip()
