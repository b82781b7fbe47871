"""The application layer (``cdclake.pipeline``): what the CLI calls, and a Python program too."""

from __future__ import annotations

import subprocess
import sys

import cdclake.pipeline as application


def test_importing_it_starts_no_engine():
    script = ("import sys, cdclake.pipeline, cdclake.cli.main\n"
              "print(sorted(m for m in ('pyspark', 'deltalake', 'confluent_kafka') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_every_function_says_its_arguments_and_returns():
    for name in application.__all__:
        unit = getattr(application, name)
        assert unit.__doc__, name
        if name in {"run", "status", "dead_letters", "maintain", "migrate_names", "capture", "load_config"}:
            assert "Args:" in unit.__doc__ and "Returns:" in unit.__doc__, name
