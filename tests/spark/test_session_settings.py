"""Which settings a new session is built with: this machine's tuning only for a session that runs here."""

from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path

import pytest

from cdclake.spark.session import (
    JAVA_OPTIONS,
    LOCAL_DEFAULTS,
    PER_SESSION,
    SHORT_RUN_JAVA_OPTIONS,
    listeners,
    scratch_directory,
    served_here,
    server_address_file,
    session_settings,
)
from cdclake.support.private import private_directory

SOCKETS = "spark.python.unix.domain.socket.enabled"
SOCKET_DIR = "spark.python.unix.domain.socket.dir"
QUIET = "-Dlog4j2.configurationFile="
TMPDIR = "-Djava.io.tmpdir="


@pytest.fixture(autouse=True)
def own_cache_and_spark_conf(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))


def _jvm_options(settings: dict[str, str]) -> list[str]:
    """The JVM options, the paths of the quiet log configuration (see test_a_local_session_starts_quietly) and of the
    process's scratch directory left out."""
    return [next((kept for kept in (QUIET, TMPDIR) if o.startswith(kept)), o) for o in settings[JAVA_OPTIONS].split()]


@pytest.mark.parametrize(("master", "remote"), [(None, None), ("local[2]", None), (None, "local[2]")])
def test_a_session_on_this_machine_gets_its_tuning(master, remote):
    settings = session_settings(master, remote, "/opt/python")
    assert settings == {**LOCAL_DEFAULTS, "spark.pyspark.python": "/opt/python", SOCKETS: "true",
                        SOCKET_DIR: settings[SOCKET_DIR], JAVA_OPTIONS: settings[JAVA_OPTIONS]}
    assert _jvm_options(settings) == [*LOCAL_DEFAULTS[JAVA_OPTIONS].split(), TMPDIR, QUIET]
    assert settings["spark.sql.shuffle.partitions"] == "4"
    assert f"{TMPDIR}{settings[SOCKET_DIR]}" in settings[JAVA_OPTIONS]


@pytest.fixture
def short_tmp():
    """A temporary directory with a path as short as the system's own (pytest's are too long for a socket)."""
    with tempfile.TemporaryDirectory(prefix="s") as path:
        yield Path(path)


def test_the_python_processes_sockets_are_files_only_this_user_can_reach(short_tmp, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    directory = Path(session_settings(None, None, "/opt/python")[SOCKET_DIR])
    assert directory.parent == short_tmp / f"cdclake-{os.getuid()}" and directory.name.startswith("run-")
    for path in (directory.parent, directory):
        mode = os.stat(path).st_mode
        assert stat.S_ISDIR(mode) and stat.S_IMODE(mode) == 0o700


def test_sockets_go_over_tcp_where_a_socket_files_path_would_be_too_long(tmp_path, monkeypatch, caplog):
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with caplog.at_level("INFO", logger="cdclake.spark.session"):
        settings = session_settings(None, None, "/opt/python")
    assert SOCKETS not in settings and SOCKET_DIR not in settings
    assert "connect over TCP" in caplog.text and "too long a path" in caplog.text


def test_sockets_go_over_tcp_where_the_private_directory_is_not_private(short_tmp, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    (short_tmp / f"cdclake-{os.getuid()}").mkdir()
    os.chmod(short_tmp / f"cdclake-{os.getuid()}", 0o777)  # the mode mkdir got is masked by the umask
    settings = session_settings(None, None, "/opt/python")
    assert SOCKETS not in settings and TMPDIR not in settings[JAVA_OPTIONS]


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "k8s://https://host:6443"])
def test_a_cluster_session_keeps_the_clusters_own_settings_but_runs_in_utc(master):
    settings = session_settings(master, None, "/opt/python")
    # a cluster's executors have their own temporary directories: no socket directory of this machine
    assert settings == {"spark.sql.session.timeZone": "UTC", "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
                        "spark.pyspark.python": "/opt/python"}
    assert set(PER_SESSION) <= settings.keys()


def test_a_connect_server_elsewhere_is_configured_once_the_session_exists():
    assert session_settings(None, "sc://host:15002", "/opt/python") == {}


@pytest.mark.parametrize(("master", "remote"), [(None, None), ("yarn", None), (None, "sc://host:15002")])
def test_the_users_settings_win(master, remote):
    mine = {"spark.sql.session.timeZone": "Asia/Tokyo", "spark.executor.memory": "8g"}
    assert session_settings(master, remote, "/opt/python", mine).items() >= mine.items()


def test_a_short_run_on_this_machine_compiles_quickly_unless_the_user_chose_jvm_options():
    assert _jvm_options(session_settings(None, None, "/opt/python", short_run=True)) == [
        *LOCAL_DEFAULTS[JAVA_OPTIONS].split(), *SHORT_RUN_JAVA_OPTIONS.split(), TMPDIR, QUIET]
    assert _jvm_options(session_settings(None, None, "/opt/python")) == [
        *LOCAL_DEFAULTS[JAVA_OPTIONS].split(), TMPDIR, QUIET]
    mine = {JAVA_OPTIONS: "-Xss4m"}
    assert _jvm_options(session_settings(None, None, "/opt/python", mine, short_run=True)) == ["-Xss4m", TMPDIR, QUIET]
    assert JAVA_OPTIONS not in session_settings("yarn", None, "/opt/python", short_run=True)


def test_a_local_session_starts_quietly_unless_the_user_configures_logging(tmp_path):
    # Spark's start-up lines come before a session can set its level: the JVM starts at ERROR (errors still show).
    # The Python gateway's logger at the root's level is what keeps Spark from saying "Setting default log level".
    (option,) = [o for o in session_settings(None, None, "/opt/python")[JAVA_OPTIONS].split() if o.startswith(QUIET)]
    path = Path(option.removeprefix(QUIET).removeprefix("file://"))
    assert path.parent == tmp_path / "cache" / f"cdclake-{os.getuid()}"
    lines = set(path.read_text().splitlines())
    assert {"rootLogger.level = error", "logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer",
            "logger.gateway.level = error"} <= lines
    mine = {JAVA_OPTIONS: "-Dlog4j2.configurationFile=file:///etc/mine.properties"}
    options = session_settings(None, None, "/opt/python", mine)[JAVA_OPTIONS].split()
    assert options[0] == mine[JAVA_OPTIONS] and [o for o in options if o.startswith(QUIET)] == [mine[JAVA_OPTIONS]]
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert _jvm_options(session_settings(None, None, "/opt/python")) == [*LOCAL_DEFAULTS[JAVA_OPTIONS].split(), TMPDIR]


def test_the_users_own_temporary_directory_for_the_jvm_wins():
    mine = {JAVA_OPTIONS: "-Djava.io.tmpdir=/data/tmp -Xss4m"}
    assert session_settings(None, None, "/opt/python", mine)[JAVA_OPTIONS].split()[:2] == mine[JAVA_OPTIONS].split()
    assert _jvm_options(session_settings(None, None, "/opt/python", mine)) == [TMPDIR, "-Xss4m", QUIET]


def test_a_new_scratch_directory_removes_those_no_live_process_holds(short_tmp):
    home = short_tmp / f"cdclake-{os.getuid()}"
    living = scratch_directory(short_tmp)  # this process holds it
    scratch_directory.cache_clear()
    dead = home / "run-dead"  # a killed process's: its lock file, which nobody holds, and Spark's files
    (dead / "blockmgr-1").mkdir(parents=True)
    (dead / ".in-use").touch()
    being_made = home / "run-new"  # made a moment ago, its lock file not yet
    being_made.mkdir()
    abandoned = home / "run-old"  # without a lock file for long: its remover died
    abandoned.mkdir()
    os.utime(abandoned, (time.time() - 3600, time.time() - 3600))
    (home / "run-file").touch()  # not a directory of cdclake's: left alone, and no failure
    mine = scratch_directory(short_tmp)
    assert sorted(p.name for p in home.iterdir()) == sorted([living.name, being_made.name, "run-file", mine.name])
    scratch_directory.cache_clear()


def test_the_users_listening_on_a_port_are_read_from_the_kernels_socket_tables(tmp_path):
    (tmp_path / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:3A9A 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0\n"
        "   1: 0100007F:3A9A 0100007F:9F97 01 00000000:00000000 00:00000000 00000000  1002        0 2 1 0\n"
        "   2: 00000000:3A9B 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1003        0 3 1 0\n")
    (tmp_path / "tcp6").write_text(
        "  sl  local_address                         remote_address                        st tx_queue rx_queue tr"
        " tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000000000000000000001000000:3A9A 00000000000000000000000000000000:0000 0A 00000000:00000000"
        " 00:00000000 00000000  1001        0 4 1 0\n")
    tables = (str(tmp_path / "tcp"), str(tmp_path / "tcp6"), str(tmp_path / "missing"))
    assert listeners(15002, tables) == {1000, 1001}  # not 1002's connection, nor 1003's listener on 15003


def test_a_port_that_only_this_user_listens_on_is_found_listening(tmp_path):
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert listeners(server.getsockname()[1]) == {os.getuid()}


def test_a_run_takes_the_token_of_cdclake_serve_only_to_a_port_this_user_listens_on(monkeypatch):
    from cdclake.spark import session

    address = server_address_file(15002)
    assert served_here("sc://localhost:15002") == "sc://localhost:15002"  # no server left its address
    private_directory(address.parent.parent)
    address.write_text("sc://localhost:15002/;token=secret\n")
    address.chmod(0o600)
    monkeypatch.setattr(session, "listeners", lambda port: {os.getuid()})
    assert served_here("sc://localhost:15002") == "sc://localhost:15002/;token=secret"
    assert served_here("sc://localhost:15003") == "sc://localhost:15003"
    assert served_here("sc://db.example:15002") == "sc://db.example:15002"
    # The server was killed, and another user's process took the port.
    monkeypatch.setattr(session, "listeners", lambda port: {os.getuid(), os.getuid() + 1})
    with pytest.raises(ValueError, match=r"port 15002 is another user's .* the address in .* is stale"):
        served_here("sc://localhost:15002")

