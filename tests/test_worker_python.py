"""The launcher Spark runs its Python processes with on this machine (``cdclake.spark.session.worker_python``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

from cdclake.spark.session import worker_python

LIB = Path(pyspark.__file__).parent / "python" / "lib"
SHOW = "import os, sys, pyspark; print(os.environ.get('PYTHONPATH')); print(sys.executable); print(pyspark.__file__)"


def launch(pythonpath: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run([worker_python(), "-c", SHOW], env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_the_launcher_drops_only_the_installed_pyspark_zips_and_keeps_every_other_entry_in_order():
    others = ["/opt/a b/lib", "/x*y", "", "/spark/python/lib/pyspark.zip", f"{LIB}/pyspark.zip.bak"]
    entries = [f"{LIB}/pyspark.zip", f"{LIB}/py4j-0.10.9.9-src.zip", others[0], others[1], f"{LIB}/pyspark.zip",
               *others[2:]]
    pythonpath, executable, imported = launch(":".join(entries))
    assert worker_python() != sys.executable  # pip's pyspark ships the zip: the launcher is in use
    assert pythonpath == ":".join(others)
    assert Path(executable).resolve() == Path(sys.executable).resolve()
    assert Path(imported).parent == Path(pyspark.__file__).parent  # the installed package, not a zip


def test_the_launcher_leaves_no_empty_pythonpath_and_passes_arguments_through():
    assert launch(f"{LIB}/pyspark.zip")[0] == "None"
    assert launch(None)[0] == "None"
    done = subprocess.run([worker_python(), "-c", "import sys; print(sys.argv[1:])", "a b", "$HOME", "*"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == repr(["a b", "$HOME", "*"])
