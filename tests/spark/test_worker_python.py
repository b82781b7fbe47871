"""The launcher Spark runs its Python processes with on this machine (``cdclake.spark.session.worker_python``)."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark
import pytest

from cdclake.spark.session import _written as written
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


def test_the_launcher_is_one_file_per_content_in_a_directory_only_this_user_can_write(tmp_path):
    succeed, fail = "#!/bin/sh\nexit 0\n", "#!/bin/sh\nexit 1\n"

    def _written(base, text):
        return written(base, text, "python", ".sh", mode=0o700)

    path = _written(tmp_path, succeed)
    assert path.parent == tmp_path / f"cdclake-{os.getuid()}"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o700
    assert _written(tmp_path, succeed) == path
    path.write_text(fail)  # changed behind cdclake's back: written again
    assert _written(tmp_path, succeed) == path and path.read_text() == succeed
    other = _written(tmp_path, fail)
    assert other != path and sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, other.name])


def test_a_directory_others_can_write_to_is_refused(tmp_path):
    (tmp_path / f"cdclake-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(tmp_path / f"cdclake-{os.getuid()}", 0o777)
    with pytest.raises(PermissionError, match="private"):
        written(tmp_path, "#!/bin/sh\nexit 0\n", "python", ".sh")


def test_where_the_cache_cannot_hold_the_launcher_the_temporary_directory_does_else_spark_runs_python(
        tmp_path, monkeypatch, caplog):
    (tmp_path / "file").write_text("")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # no directory can be made under a file
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    worker_python.cache_clear()
    try:
        assert Path(worker_python()).parent == tmp_path / "tmp" / f"cdclake-{os.getuid()}"
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "file"))
        worker_python.cache_clear()
        with caplog.at_level(logging.INFO, logger="cdclake.spark.session"):
            assert worker_python() == sys.executable
        assert "no launcher could be written and run" in caplog.text and str(tmp_path / "file") in caplog.text
    finally:
        worker_python.cache_clear()
