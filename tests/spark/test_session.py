"""The local session: its Python processes, Spark's own helper among them, import the installed pyspark (see
``session.worker_python``), its batches to Python are bounded by records alone, and numpy's OpenBLAS starts no
threads in them."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark
import pytest

from cdclake.spark.session import scratch_directory, worker_python

pytestmark = pytest.mark.spark


def test_the_local_sessions_python_workers_run_through_the_launcher_and_import_the_installed_pyspark(spark):
    def imported(batches):
        import pyarrow as pa
        import pyspark

        for batch in batches:
            yield pa.RecordBatch.from_pydict({"file": [pyspark.__file__] * batch.num_rows})

    assert {row.file for row in spark.range(4).mapInArrow(imported, "file string").collect()} == {pyspark.__file__}
    assert spark.conf.get("spark.pyspark.python") == worker_python()


def test_the_local_sessions_python_processes_talk_to_the_jvm_over_unix_sockets_in_a_private_directory(spark):
    def sockets(batches):
        import pyarrow as pa

        # /proc/net/unix: "Num RefCount Protocol Flags Type St Inode Path"; this worker's own sockets by inode.
        with open("/proc/net/unix") as table:
            paths = {int(f[6]): f[7] if len(f) > 7 else "" for f in (line.split() for line in list(table)[1:])}
        links = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:  # the descriptor listdir itself read with
                continue
        own = {int(link[8:-1]) for link in links if link.startswith("socket:[")}
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"unix": [len(own & paths.keys())] * batch.num_rows,
                                              "paths": [sorted(set(paths.values()))] * batch.num_rows})

    directory = spark.conf.get("spark.python.unix.domain.socket.dir")
    assert spark.conf.get("spark.python.unix.domain.socket.enabled") == "true"
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    rows = spark.range(4).mapInArrow(sockets, "unix long, paths array<string>").collect()
    assert all(row.unix >= 1 for row in rows)  # the worker's connection to the JVM
    assert any(path.startswith(directory + "/") for row in rows for path in row.paths)  # the workers' daemon


def test_the_local_session_hands_python_batches_bounded_by_records_not_bytes(spark):
    def sizes(batches):
        import pyarrow as pa

        for batch in batches:
            yield pa.RecordBatch.from_pydict({"rows": [batch.num_rows]})

    # 4,000 values of 20 KB: 80 MB, over Spark's default of 64 MiB per batch, under 20,000 records.
    values = spark.range(0, 4_000, 1, 1).selectExpr("repeat('x', 20000) AS value")
    assert [row.rows for row in values.mapInArrow(sizes, "rows long").collect()] == [4_000]


def test_the_local_sessions_python_processes_run_numpys_openblas_on_one_thread(spark):
    def setting(batches):
        import pyarrow as pa

        for batch in batches:
            yield pa.RecordBatch.from_pydict({"threads": [os.environ.get("OPENBLAS_NUM_THREADS")] * batch.num_rows})

    assert {row.threads for row in spark.range(4).mapInArrow(setting, "threads string").collect()} == {"1"}


# A module that Spark's search for installed Python data sources imports (it imports every ``pyspark_*`` module it
# finds): it writes down the pyspark its process imported.
PROBE = """
import os, pyspark
with open(os.environ["CDCLAKE_PROBE_OUT"], "a") as out:
    out.write(pyspark.__file__ + "\\n")
"""
FIRST_READ = """
from cdclake.spark.session import get_session
from cdclake.spark.sources import register
register(get_session())
"""


def test_sparks_own_search_for_python_data_sources_runs_through_the_launcher(tmp_path):
    # The JVM reads the variable it starts that search with once, at its start: a session of its own.
    (tmp_path / "pyspark_cdclake_probe.py").write_text(PROBE)
    out = tmp_path / "imported"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYSPARK_")}
    env.update(PYTHONPATH=str(tmp_path), CDCLAKE_PROBE_OUT=str(out))
    done = subprocess.run([sys.executable, "-c", FIRST_READ], env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert out.read_text().splitlines() == [pyspark.__file__]  # not the zipped copy


# A session whose Python workers (a data source's helpers and a job's workers) then sit idle until Spark stops them,
# after a minute. argv: "launcher" (cdclake's, as local sessions have it) or "bare" (this interpreter), a directory.
IDLE_WORKERS = """
import os, sys, time
if sys.argv[1] == "bare":
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
from cdclake.spark.session import get_session
from cdclake.spark.sources import register
spark = get_session(conf={"spark.pyspark.python": sys.executable} if sys.argv[1] == "bare" else None)
register(spark)
def same(batches):
    yield from batches
records = spark.read.format("cdclake-files").option("path", sys.argv[2]).load()
assert records.mapInArrow(same, "offset long").count() == 2
time.sleep(90)
print("idled", flush=True)
"""


def test_the_python_workers_spark_stops_after_a_quiet_minute_end_without_a_traceback(tmp_path):
    # Spark's own daemon printed a BrokenPipeError traceback for each: a pipeline that follows its input printed them
    # after every quiet minute. The same session without cdclake's launcher shows that the test still meets the case.
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.txt").write_text("a message\nanother\n")
    runs = {how: subprocess.Popen([sys.executable, "-c", IDLE_WORKERS, how, str(tmp_path / "in")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for how in ("launcher", "bare")}
    (ours, ours_errors), (bare, bare_errors) = (run.communicate(timeout=600) for run in runs.values())
    assert ours.split() == bare.split() == ["idled"], ours_errors + bare_errors
    assert "BrokenPipeError" in bare_errors
    assert "Traceback" not in ours_errors, ours_errors


# A session that runs a job with a shuffle and Python workers, says where its JVM keeps its files, then waits to be
# killed (argv: "kill") or ends (argv: "end").
SCRATCH_USER = """
import sys, time
from cdclake.spark.session import get_session
spark = get_session()
def same(batches):
    yield from batches
assert spark.range(1000).repartition(3).mapInArrow(same, "id long").groupBy("id").count().count() == 1000
print(spark.sparkContext._jvm.System.getProperty("java.io.tmpdir"), flush=True)
if sys.argv[1] == "kill":
    time.sleep(600)
"""


def test_the_spark_files_a_killed_or_ended_run_left_are_removed_by_the_next_session():
    # Spark deletes its block manager's and temporary files when the JVM exits, not when it is killed: those of killed
    # runs piled up in the temporary directory for good, and every run left its Python daemon's socket file.
    with tempfile.TemporaryDirectory(prefix="s") as short:  # pytest's paths are too long for a socket
        env = {**os.environ, "TMPDIR": short}
        killed = subprocess.Popen([sys.executable, "-c", SCRATCH_USER, "kill"], env=env, stdout=subprocess.PIPE,
                                  text=True, start_new_session=True)
        try:
            scratch = Path(killed.stdout.readline().strip())
        finally:
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait(timeout=60)
        home = Path(short) / f"cdclake-{os.getuid()}"
        assert scratch.parent == home
        left = {p.name.split("-")[0] for p in scratch.iterdir()}
        assert {"blockmgr", "spark"} <= left  # what the kill left behind, in the scratch directory
        assert os.listdir(short) == [home.name]  # nothing of Spark's beside it
        ended = subprocess.run([sys.executable, "-c", SCRATCH_USER, "end"], env=env, capture_output=True, text=True,
                               timeout=600, check=False)
        assert ended.returncode == 0, ended.stderr
        ended_scratch = Path(ended.stdout.strip())
        assert ended_scratch.parent == home
        assert os.listdir(short) == [home.name]
        assert list(home.iterdir()) == [ended_scratch]  # the killed run's files are gone
        assert any(p.name.endswith(".sock") for p in ended_scratch.iterdir())
        scratch_directory.cache_clear()  # as a new process: its first session
        try:
            mine = scratch_directory(Path(short))
            assert list(home.iterdir()) == [mine]  # the ended run's, with its socket, are gone too
        finally:
            scratch_directory.cache_clear()


# A session, stopped, then another: PySpark keeps the JVM for the second; cdclake must not start one more.
SECOND_SESSION = """
from cdclake.spark import session
launched = []
launch = session.launch_gateway
session.launch_gateway = lambda *args, **kwargs: launched.append(1) or launch(*args, **kwargs)
session.get_session().stop()
rows = session.get_session().range(3).count()
print(len(launched), rows)
"""


def test_a_second_session_reuses_the_jvm_of_a_stopped_one():
    done = subprocess.run([sys.executable, "-c", SECOND_SESSION], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "3"], done.stdout
