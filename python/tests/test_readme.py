"""The README's Python example runs as printed (once README has a "## ... Python ..." section)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_examples() -> list:
    text = README.read_text() if README.exists() else ""
    section = re.search(r"^## [^\n]*Python[^\n]*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not section:
        return []
    return re.findall(r"```python\n(.*?)```", section.group(1), re.S)


@pytest.mark.parametrize("index", range(max(1, len(python_examples()))))
def test_readme_python_example_runs(index, tmp_path):
    examples = python_examples()
    if not examples:
        pytest.skip("README.md has no '## ... Python ...' section with a python example yet")
    run = subprocess.run(
        [sys.executable, "-c", examples[index]], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
