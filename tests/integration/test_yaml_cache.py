"""Workflow files read again from the cache of their parsed values (app/workflows/yaml_cache.py):
the same values, lines and errors as from YAML, and never anything else.
The part with real agents and the CLI (integration); the rest: tests/unit/test_yaml_cache.py."""

import sys

from lanpool.app.workflows.yaml_lines import read_yaml
from tests.unit.test_yaml_cache import (
    RICH,
    cache_home,  # noqa: F401 (fixtures, used by name)
)


def test_the_cache_spares_the_yaml_import(cache_home, tmp_path):
    import subprocess

    path = tmp_path / "w.yaml"
    path.write_text(RICH)
    read_yaml(path)
    code = f"import sys; from lanpool.app.workflows.yaml_lines import read_yaml; read_yaml(__import__('pathlib').Path({str(path)!r})); print('yaml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
