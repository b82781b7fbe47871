"""The Spark session: a local default that works on a fresh machine, or an existing cluster."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import re
import secrets
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from cdclake.support.atomic import write_atomic
from cdclake.support.private import private_directory

logger = logging.getLogger(__name__)

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
LOCAL_DEFAULTS: dict[str, str] = {
    # Decoded values are UTC text; Spark must not shift them into the machine's zone.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
    # Batches to Python bounded by their records alone, as cdclake's own sources bound theirs. Below 2^31 - 1 Spark
    # measures the batch after every row it adds, and for the struct that mapInArrow wraps a row in that took a
    # third of the JVM's work of handing records to Python (profiled; 1,000,000 records: 3.1 → 2.2 s of CPU).
    "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
    "spark.python.worker.reuse": "true",
    "spark.driver.memory": "4g",
    "spark.sql.adaptive.enabled": "true",
    # A cached changelog lives one batch: compressing it cost a fifth of the executors' JVM time (profiled),
    # for about a quarter less memory.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    # Throughput over pause times: on 2 cores G1's concurrent work competes with the tasks. The parallel collector
    # took the benchmark's first end-to-end run from 23.0 to 19.8 s, warm runs alike (benchmarks/results.md).
    JAVA_OPTIONS: "-XX:+UseParallelGC",
    # Every Python process Spark starts imports numpy, whose OpenBLAS then starts a thread per core that spins for
    # about 0.1 s of CPU (measured: importing numpy took 0.18 CPU-s, 0.08 with one thread), beside the tasks on
    # these cores. A run starts several such processes, and the streaming query waits for each of its helpers;
    # cdclake multiplies no matrices.
    "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
}


# For a run that stops once it has caught up (no ``follow``), where the JVM compiles Spark's code only with its quick
# compiler (C1): compiling took about a third of a one-off run's CPU, on the cores the tasks need, and a run of a
# few million records ends before the optimising compiler's (C2) faster code pays that back. `cdclake run` of the
# benchmark's 1,009,559 events: medians 26.2 and 23.8 s instead of 27.7 and 30.5 s (README); later runs in one
# session were about a fifth slower, so a pipeline that follows its sources keeps both compilers. The code cache keeps
# the size it has with both (with C1 alone Java reserves 48 MB): a run of 300,000 events with 160 DDL statements, each
# segment's queries compiled anew, filled 48 MB after 71 s, and the JVM stopped compiling for the rest of the run.
SHORT_RUN_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


# Run by Spark for each Python process it starts on this machine (see worker_python).
_LAUNCHER = """#!/bin/sh
# Written by cdclake: {python} without the zipped pyspark and py4j of {lib} on PYTHONPATH, and Spark's Python
# daemon through cdclake.spark.daemon.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
    case $entry in
        {zips}) ;;
        *) kept=${{kept:+$kept:}}$entry ;;
    esac
done
unset IFS
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
if [ "$1" = -m ] && [ "$2" = pyspark.daemon ]; then
    shift 2
    set -- -m cdclake.spark.daemon "$@"
fi
exec {python} "$@"
"""


@functools.cache
def worker_python() -> str:
    """The program Spark runs its Python processes with on this machine: this interpreter, through a launcher
    where that helps. Spark puts the zipped copy of pyspark that comes with the installed pyspark first on their
    PYTHONPATH, and Python compiles every module of a zip anew in each process, as it keeps no compiled cache
    for them. The data sources' helper processes are new processes (one per lookup, creation, read plan or
    streaming query), so each paid that: importing the streaming runner and cdclake's sources took 1.13 s of
    CPU from the zip against 0.32 s from the installed package, and a run's helpers start one after another.
    The launcher drops exactly those two zips, whose package is this interpreter's own ``pyspark``. It also runs
    Spark's Python daemon (``-m pyspark.daemon``) as :mod:`cdclake.spark.daemon`, which ends the workers whose
    sockets the JVM closed without a traceback: Spark names that module itself for its data sources' helpers,
    whatever ``spark.python.daemon.module`` says."""
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    if os.name != "posix" or not (lib / "pyspark.zip").is_file():
        return sys.executable
    zips = f"{shlex.quote(str(lib / 'pyspark.zip'))}|{shlex.quote(str(lib / 'py4j-'))}*{shlex.quote('-src.zip')}"
    text = _LAUNCHER.format(python=shlex.quote(sys.executable), lib=lib, zips=zips)
    # The user's cache first: a cleaner of the temporary directory could remove a launcher in use for weeks.
    failures = []
    for base in (_user_cache(), Path(tempfile.gettempdir())):
        try:
            path = _written(base, text, "python", ".sh", mode=0o700)
            # A directory mounted noexec, say: then the next place, or the interpreter itself.
            subprocess.run([path, "-c", ""], check=True, timeout=60, capture_output=True)
            return str(path)
        except (OSError, subprocess.SubprocessError) as exc:
            failures.append(f"{base}: {exc}")
    logger.info("Spark starts its Python processes with %s itself, so they compile pyspark from its zip (slower "
                "to start): no launcher could be written and run (%s)", sys.executable, "; ".join(failures))
    return sys.executable


def _user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"))


def _written(base: Path, text: str, stem: str, suffix: str, mode: int | None = None) -> Path:
    """``text`` in a file of cdclake's private directory of ``base``, named by its content: every session that needs
    the same text uses the same file, and a killed one leaves nothing behind."""
    path = private_directory(base) / f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:16]}{suffix}"
    if not path.is_file() or path.read_text() != text:
        write_atomic(path, text, mode=mode)
    return path


# Spark prints its start-up lines (its default log4j profile, twice; the host's loopback address; "Setting default log
# level", which it prints unless the logger of the Python gateway is configured at the root's level) before a session
# exists to set its level. A local session's JVM starts with this configuration instead, at the level get_session
# sets anyway; errors still show, but for a streaming query's end: cdclake raises a failed query's error itself (with
# the Python traceback of a failed batch), which Spark's log repeated with some fifty lines of the JVM's stack, and
# Spark logged as failed the query of a run that a signal stops, whose next batch declines to start (StopRequested).
_QUIET_LOG4J = """# Written by cdclake for the JVM of a local Spark session.
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.query.name = org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution
logger.query.level = off
"""


def _quiet_log_option(options: str) -> str:
    """The JVM option that starts a local session with :data:`_QUIET_LOG4J`; none where the user configures logging
    (JVM options that name a log4j configuration, or a log4j2.properties in Spark's configuration directory) or no
    file could be written."""
    conf_dir = Path(os.environ.get("SPARK_CONF_DIR") or _spark_home() / "conf")
    if "log4j" in options or (conf_dir / "log4j2.properties").is_file():
        return ""
    try:
        path = _written(_user_cache(), _QUIET_LOG4J, "log4j2", ".properties")
    except OSError as exc:
        logger.info("Spark prints its start-up lines: no log configuration could be written (%s)", exc)
        return ""
    return f"-Dlog4j2.configurationFile={shlex.quote(path.as_uri())}"


# The longest name Spark and pyspark give a socket file in its directory ("/." + a UUID + ".sock"), and the longest
# path a Unix domain socket may have everywhere cdclake runs (macOS: 104 bytes with the closing NUL; Linux: 108).
_SOCKET_NAME = 43
_SOCKET_PATH_MAX = 103


def _unix_socket_settings(directory: Path | None) -> dict[str, str]:
    """Unix domain sockets between the JVM and its Python processes, instead of TCP on the loopback: the
    decoder benchmark's records reached Python and came back in 0.84-0.92 s instead of 1.06-1.10 s (1,009,559
    Canal-JSON records), and its decoding took 2.36-2.62 s instead of 2.77-2.81 s. Such a socket carries no secret
    (Spark leaves access to the file's permissions, and whoever can connect runs code in the Python workers), so
    the files go into this process's directory of this user's private one (see :func:`scratch_directory`); none
    where it cannot be made or its path is too long for a socket, as TCP still works there."""
    if directory is None:
        return {}
    if len(os.fsencode(directory)) + _SOCKET_NAME > _SOCKET_PATH_MAX:
        logger.info("Spark's Python processes connect over TCP: %s is too long a path for a socket", directory)
        return {}
    return {"spark.python.unix.domain.socket.enabled": "true", "spark.python.unix.domain.socket.dir": str(directory)}


_IN_USE = ".in-use"  # locked by the process whose scratch directory holds it, while it lives
_MAKING_S = 60  # a directory without that file, younger than this, is still being made
_HELD: list[BinaryIO] = []  # the locks of this process's scratch directories, open for its life


@functools.cache
def scratch_directory(base: Path) -> Path:
    """This process's directory for its local Spark JVM's temporary files (``java.io.tmpdir``, and so Spark's shuffle
    and block files, the native libraries it unpacks, its Python workers' files) and the sockets to those workers,
    in cdclake's private directory of ``base``. Spark deletes its files when its JVM exits, but not when it is killed
    (SIGKILL, the OOM killer): those of killed runs stayed in the temporary directory for good (the test suite left
    some 2,900), and every run left its Python daemon's socket file. So the process locks its directory while it
    lives, and a new one removes those that no live process locks: a lock, not a process id, which another container
    sharing the directory could hold for a process this one cannot see. Not at this process's exit: its JVM ends
    after it and still writes there as it shuts down (Spark's last cleanup, a flight recording)."""
    home = private_directory(base)
    for old in home.glob("run-*"):
        _remove_unless_in_use(old)
    mine = Path(tempfile.mkdtemp(prefix="run-", dir=home))
    # Locked under another name first: another process could lock a bare lock file between its making and its lock.
    held = open(mine / ".locking", "wb")  # noqa: SIM115 (open for the life of the process: closing it frees the lock)
    fcntl.flock(held, fcntl.LOCK_EX)
    os.rename(mine / ".locking", mine / _IN_USE)
    _HELD.append(held)
    return mine


def _remove_unless_in_use(directory: Path) -> None:
    """Removes a scratch directory whose process has ended: nobody holds its lock, or it has none and is older than
    one being made (its remover died removing it)."""
    try:
        lock = open(directory / _IN_USE, "rb")  # noqa: SIM115 (closed below, after the removal it guards)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            if time.time() - directory.stat().st_mtime > _MAKING_S:
                _remove_scratch(directory)
        return
    except OSError:  # not a directory of cdclake's (a file of that name, say): left alone
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # its process lives
        _remove_scratch(directory)


def _remove_scratch(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    logger.info("removed %s: the temporary files of a local Spark session whose process has ended", directory)


def _local_scratch() -> Path | None:
    try:
        return scratch_directory(Path(tempfile.gettempdir()))
    except OSError as exc:
        logger.info("Spark keeps its temporary files in the temporary directory, and its Python processes connect "
                    "over TCP: no private directory for them (%s)", exc)
        return None


# What every session needs, on a cluster too: cdclake's values are UTC text, and batches to Python stay bounded.
PER_SESSION = ("spark.sql.session.timeZone", "spark.sql.execution.arrow.maxRecordsPerBatch")


# JVM options that choose an archive, turn sharing off, or list classes for a new archive: a second archive would
# override or spoil them.
_SHARING_OPTION = re.compile(r"-Xshare|SharedArchiveFile|DumpLoadedClassList|ArchiveClassesAtExit")


def _on_this_machine(master: str | None, remote: str | None) -> bool:
    return (remote or master or "local").startswith("local")  # remote "local[2]": a Connect server started here


def session_settings(master: str | None, remote: str | None, python: str, conf: Mapping[str, str] | None = None,
                     archive: Path | None = None, short_run: bool = False) -> dict[str, str]:
    """The settings a new session is built with: ``conf`` over cdclake's. A session that runs on this machine gets
    the tuning for it (``LOCAL_DEFAULTS``, and ``SHORT_RUN_JAVA_OPTIONS`` for a ``short_run`` unless ``conf`` has JVM
    options of its own), and its JVM maps the ``archive`` of Spark's classes where there is one
    (see :func:`build_class_archive`), with the JVM options of ``conf`` too unless they say how to share classes
    themselves; a cluster's session only what cdclake needs (``PER_SESSION``), since four shuffle partitions or this
    machine's memory would hold a cluster back. A Connect server elsewhere gets those once the session exists (see
    :func:`get_session`)."""
    conf = dict(conf or {})
    if _on_this_machine(master, remote):
        scratch = _local_scratch()
        settings = {**LOCAL_DEFAULTS, **_unix_socket_settings(scratch), "spark.pyspark.python": python, **conf}
        if short_run and JAVA_OPTIONS not in conf:
            settings[JAVA_OPTIONS] = f"{settings[JAVA_OPTIONS]} {SHORT_RUN_JAVA_OPTIONS}"
        options = settings.get(JAVA_OPTIONS, "")
        if scratch is not None and "java.io.tmpdir" not in options:
            options = settings[JAVA_OPTIONS] = f"{options} -Djava.io.tmpdir={shlex.quote(str(scratch))}".lstrip()
        if quiet := _quiet_log_option(options):
            options = settings[JAVA_OPTIONS] = f"{options} {quiet}".lstrip()
        if archive is not None and not _SHARING_OPTION.search(options):
            settings[JAVA_OPTIONS] = f"{options} -XX:SharedArchiveFile={shlex.quote(str(archive))}".lstrip()
        return settings
    if remote:
        return conf
    return {**{key: LOCAL_DEFAULTS[key] for key in PER_SESSION}, "spark.pyspark.python": python, **conf}


def get_session(master: str | None = None, remote: str | None = None,
                conf: Mapping[str, str] | None = None, app_name: str = "cdclake",
                short_run: bool = False) -> SparkSession:
    """A Spark session. ``remote`` (``sc://host:port``) attaches to Spark Connect; ``master``
    (``spark://…``, ``yarn``, ``local[4]``) to a cluster; neither gives ``local[*]``. On a cluster this process
    is the driver, and the executors start their Python workers with this interpreter's path
    (``spark.pyspark.python``), not the launcher of :func:`worker_python`, which lives in this machine's cache:
    that path must hold cdclake on every worker (README, "On a cluster"). ``short_run``: the session serves one
    run that stops once caught up (see ``SHORT_RUN_JAVA_OPTIONS``); it matters only where a new local session
    starts."""
    python = worker_python() if _on_this_machine(master, remote) else sys.executable
    remote = served_here(remote) if remote else remote
    _python_for_spark(python)
    builder = SparkSession.builder.appName(app_name)
    if remote and not _on_this_machine(master, remote):
        _answering(remote)
    builder = builder.remote(remote) if remote else builder.master(master or "local[*]")
    settings = session_settings(master, remote, python, conf,
                                trusted_archive() if _on_this_machine(master, remote) else None,
                                short_run)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        # A Connect server started here takes the static settings at start, then warns that the session
        # cannot change them: noise.
        warnings.filterwarnings("ignore", message="Failed to set spark", category=UserWarning)
        if not remote:
            jvm = _start_driver_jvm(master or "local[*]", app_name, settings, {"stderr": subprocess.PIPE})
            if jvm is not None:
                threading.Thread(target=_relay_errors, args=(jvm.stderr,), daemon=True).start()
        with _refusal_explained(remote) if remote else contextlib.nullcontext():
            session = builder.getOrCreate()
    if remote:
        # A remote server has its own defaults; these are per session and matter for correctness or speed.
        for key in PER_SESSION:
            if key not in (conf or {}):
                session.conf.set(key, LOCAL_DEFAULTS[key])
    else:
        session.sparkContext.setLogLevel("ERROR")
    return session


def _python_for_spark(python: str) -> None:
    """Workers must run this interpreter, or they cannot import cdclake's dependencies. The JVM starts its one search
    for installed Python data sources (at a new session's first read) with PYSPARK_DRIVER_PYTHON: from the bare
    interpreter it compiled pyspark from the zip, 1.5 s against 0.53 s through the launcher."""
    os.environ.setdefault("PYSPARK_PYTHON", python)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", python)
    logging.getLogger("py4j").setLevel(logging.WARNING)


CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
DEFAULT_CONNECT_PORT = 15002
_LOCAL_SERVER = re.compile(r"sc://localhost:(\d+)/?")


def server_address_file(port: int) -> Path:
    """Where ``cdclake serve`` leaves its server's address, with the token that admits a client, for this user's
    runs: in the user's private directory of the cache, the file itself readable by the user alone."""
    return _user_cache() / f"cdclake-{os.getuid()}" / f"spark-connect-{port}"


def served_here(remote: str) -> str:
    """``sc://localhost:PORT`` with the token of the server ``cdclake serve`` runs on that port, where there is one;
    any other address as it is."""
    match = _LOCAL_SERVER.fullmatch(remote)
    if match is None:
        return remote
    port = int(match.group(1))
    path = server_address_file(port)
    if not _trusted(path):
        return remote
    if strangers := listeners(port) - {os.getuid()}:
        # The server that left the file was killed, and another user's process took its port: it would get the
        # token, and run this user's pipeline on its own Spark.
        raise ValueError(f"port {port} is another user's (uid {min(strangers)}), not this user's `cdclake serve`: "
                         f"the address in {path} is stale")
    return path.read_text().strip()


def listeners(port: int, tables: tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6")) -> set[int]:
    """The users whose sockets listen on the TCP port, at any address (Linux: the kernel's socket tables; none
    where there are none to read)."""
    found = set()
    for table in tables:
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:  # 0A: LISTEN
                    found.add(int(fields[7]))
    return found


def _server(remote: str) -> str:
    """HOST:PORT of a Connect address, without what follows (a token)."""
    url = urllib.parse.urlsplit(remote)
    return f"{url.hostname}:{url.port or DEFAULT_CONNECT_PORT}"


def _answering(remote: str) -> None:
    """Fails at once, in one line, where nothing answers at the address: Spark's client would retry for minutes
    without a word."""
    host, _, port = _server(remote).rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as exc:
        hint = " (`cdclake serve` starts one on this machine)" if host in ("localhost", "127.0.0.1") else ""
        raise ValueError(f"no Spark Connect server answers at {host}:{port}{hint}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _refusal_explained(remote: str) -> Iterator[None]:
    """A server that refuses the session (a token missing or wrong) says why in one line, not in a traceback."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    try:
        yield
    except SparkConnectGrpcException as exc:
        details = re.search(r'details = "([^"]*)"', str(exc))
        raise ValueError(f"the Spark Connect server at {_server(remote)} refused the session: "
                         f"{details.group(1) if details else str(exc).splitlines()[0]}") from None


def serve(port: int, conf: Mapping[str, str] | None, stop: Callable[[], object],
          say: Callable[[str], None] = logger.info) -> None:
    """A Spark Connect server on this machine's loopback, with the tuning of local sessions (and both compilers:
    it serves run after run), until ``stop`` returns. Runs attach with ``sc://localhost:PORT``: they skip starting
    a JVM and run on code it has compiled for the runs before. A client needs the token, a random one that only
    this user can read (see :func:`server_address_file`): whoever connects runs code as this user."""
    with socket.socket() as probe:  # Spark's own refusal is a Java stack trace
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ValueError(f"port {port} of 127.0.0.1 is taken ({exc.strerror}): --port chooses another") from None
    token = secrets.token_urlsafe(32)
    address = server_address_file(port)
    private_directory(address.parent.parent)
    python = worker_python()
    _python_for_spark(python)
    # The server reads its token from the environment, which only this user can read; a setting would be on
    # the JVM's command line, which everyone can.
    os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    settings = session_settings(None, None, python, {
        "spark.plugins": CONNECT_PLUGIN, "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port), **(conf or {})}, trusted_archive())
    jvm = _start_driver_jvm("local[*]", "cdclake-serve", settings,
                            {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE})
    if jvm is None:
        raise RuntimeError("a Spark JVM runs in this process already")
    threading.Thread(target=_relay_errors, args=(jvm.stderr,), daemon=True).start()
    context = SparkContext.getOrCreate()
    context.setLogLevel("ERROR")
    try:
        write_atomic(address, f"sc://localhost:{port}/;token={token}\n")
        say(f"Spark Connect server on localhost:{port}: runs attach with --remote sc://localhost:{port} "
            f"(or [spark] remote in PIPELINE.toml); Ctrl-C stops it")
        stop()
    finally:
        with contextlib.suppress(FileNotFoundError):
            address.unlink()
        context.stop()


# Lines of the JVM's that are not for the user: Spark's foreachBatch worker's name its server's address with the
# token (and four more for each run); the JVM says on every start that Spark uses an incubator module.
_NOT_RELAYED = (b"Streaming ForeachBatch worker", b"WARNING: Using incubator modules")


def _relay_errors(stream: BinaryIO) -> None:
    """The JVM's errors, to this process's, but for :data:`_NOT_RELAYED`."""
    for line in stream:
        if not line.startswith(_NOT_RELAYED):
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()


def _start_driver_jvm(master: str, app_name: str, settings: Mapping[str, str],
                      streams: Mapping[str, int] | None = None) -> subprocess.Popen | None:
    """Starts the driver's JVM, where this process would start one, in a process group of its own: a signal sent to
    this process's group (Ctrl-C in a terminal, ``timeout``, ``kill -- -PGID``) then reaches cdclake alone, which
    ends the run after the batches being applied. Before, it also reached the JVM and Spark's Python workers, which
    went down mid-batch, and the run ended in a traceback. The JVM still ends with this process, as pyspark made it:
    it exits when its standard input, a pipe from here, closes. A group, not a session: Linux shares the CPU fairly
    between sessions (autogroups), which would change how the driver and the JVM share it. ``streams``: where its
    ``stdout`` and ``stderr`` go (subprocess's DEVNULL or PIPE), if not to this process's. Returns the JVM's process,
    if it started one."""
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None  # a JVM is there already (an earlier session's, stopped or not, or spark-submit's that runs this)
    conf = SparkConf().setMaster(master).setAppName(app_name).setAll(list(settings.items()))
    gateway = launch_gateway(conf, popen_kwargs={"process_group": 0, **(streams or {})})
    SparkContext(conf=conf, gateway=gateway)
    return gateway.proc


# Changes with what build_class_archive puts in an archive, so that none built the older way is mapped.
_ARCHIVE_RECIPE = "recipe 2: no @lambda-form-invoker classes"


def class_archive() -> Path | None:
    """Where this user's archive of the classes a local session's JVM loads belongs (Java's class-data sharing;
    see :func:`build_class_archive`), named by the Java and the Spark jars it is for and by how it is built: a new
    install of either, or of cdclake, looks for another file, so a session never maps an archive made for other
    jars. None without Java."""
    found = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    if found is None or not Path(found).is_file():
        return None
    java = Path(found).resolve()  # as Spark's launcher finds it: JAVA_HOME, else the PATH
    jars = _spark_home() / "jars"
    described = [_ARCHIVE_RECIPE, f"{java} {java.stat().st_size} {java.stat().st_mtime_ns}"]
    for jar in sorted(jars.glob("*.jar")):
        status = jar.stat()
        described.append(f"{jar} {status.st_size} {status.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(described).encode()).hexdigest()[:16]
    return _user_cache() / f"cdclake-{os.getuid()}" / f"spark-classes-{digest}.jsa"


def trusted_archive() -> Path | None:
    """This user's class archive for the installed Java and Spark, if there is one that the JVM may map."""
    archive = class_archive()
    return archive if archive is not None and _trusted(archive) else None


def _spark_home() -> Path:
    """Where the Spark that local sessions run lives: ``SPARK_HOME``, else the installed pyspark."""
    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def _trusted(path: Path) -> bool:
    """The file is there, and no one but this user could have written it (a class archive: the JVM runs what it
    holds)."""
    try:
        status = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(status.st_mode) and status.st_uid == os.getuid() and not status.st_mode & 0o022


def build_class_archive(train: Callable[[SparkSession], object], say: Callable[[str], None] = logger.info) -> Path:
    """Runs ``train`` in a new local session whose JVM lists every class it loads, then has Java archive those
    classes where :func:`class_archive` says. Each later local session maps the archive instead of loading and
    verifying the classes one by one: starting Spark took 3.6-3.8 s instead of 6.1-6.7 s, and a first small
    run was about 2 s shorter (measured on this 2-core host, 2026-11-27). Java archives only what
    it can read the same way later; a class it skips (from a signed jar, say) loads as before. The archive
    (about 200 MB) replaces those of earlier installs. Needs a process without a Spark session, as a session's
    JVM options are fixed when it starts."""
    target = class_archive()
    if target is None:
        raise RuntimeError("no Java found (JAVA_HOME, or java on the PATH): Spark needs one")
    if SparkContext._active_spark_context is not None:
        raise RuntimeError("a Spark session is running in this process: build the archive in a new one")
    home = private_directory(target.parent.parent)
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        listed = Path(tmp, "classes.lst")
        listing = f"{LOCAL_DEFAULTS[JAVA_OPTIONS]} -XX:DumpLoadedClassList={shlex.quote(str(listed))}"
        spark = get_session(conf={JAVA_OPTIONS: listing})
        try:
            jvm = spark.sparkContext._jvm
            java = Path(jvm.System.getProperty("java.home"), "bin", "java")
            classpath = jvm.System.getProperty("java.class.path")  # as the launcher expanded it: the archive's key
            arguments = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
            modules = [str(a) for a in arguments if str(a).startswith("--add-")]
            train(spark)
        finally:
            spark.stop()
        # A "@lambda-form-invoker" line has Java generate method-handle classes (BoundMethodHandle species) into
        # the archive that no jar or module holds: with a class file load hook active (a Java agent, a flight
        # recording started with the JVM), Java 17 crashed (SIGSEGV in check_shared_class_file_load_hook) on
        # loading one. Without them, starting Spark took about 0.3 s longer; nothing else changed.
        kept = [line for line in listed.read_text().splitlines()
                if line and not line.startswith(("#", "@lambda-form-invoker"))]
        listed.write_text("\n".join(kept) + "\n")
        classes = len(kept)
        say(f"Archiving the {classes:,} classes the JVM loaded (about half a minute)…")
        built = Path(tmp, target.name)
        done = subprocess.run([str(java), "-Xshare:dump", f"-XX:SharedClassListFile={listed}",
                               f"-XX:SharedArchiveFile={built}", *modules, "-cp", classpath],
                              check=False, capture_output=True, text=True, timeout=3600)
        if done.returncode or not built.is_file():
            raise RuntimeError(f"Java could not archive Spark's classes (exit {done.returncode}): "
                               f"{(done.stdout + done.stderr).strip()[-2000:]}")
        for old in home.glob("spark-classes-*.jsa"):
            old.unlink()
        os.replace(built, target)
    return target


def task_slots(spark: SparkSession) -> int:
    """How many tasks the session's executors run at once (``spark.default.parallelism`` where it is set): a stage
    of that many equal tasks keeps every core busy. Spark Connect shows no SparkContext; there the setting or this
    machine's cores."""
    if is_connect(spark):
        return int(spark.conf.get("spark.default.parallelism", None) or os.cpu_count() or 1)
    return spark.sparkContext.defaultParallelism


def is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")
