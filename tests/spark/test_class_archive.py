"""The archive of the classes a local session's JVM loads (``cdclake class-archive``): built from a real
training run, mapped by every later local session of the same Java and Spark jars, and never by another's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdclake.spark import session
from cdclake.spark.session import JAVA_OPTIONS, LOCAL_DEFAULTS, _trusted, class_archive, session_settings

CDCLAKE = str(Path(sys.executable).with_name("cdclake"))

# What the new session's JVM runs with: "sharing" in java.vm.info means it maps class-data archives, and a JVM
# told to map one it cannot maps none at all, so "sharing" with this option means it maps this archive.
SHOW = """
from cdclake.spark.session import get_session
jvm = get_session().sparkContext._jvm
print(jvm.System.getProperty("java.vm.info"))
kind = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(kind)
print(bean.getVMOption("SharedArchiveFile").getValue())
"""


# A session whose JVM records a flight from its start: Java then hooks every class load, and Java 17 crashed on
# loading a class that Java itself generated into an archive. The small pipeline run loads such classes.
RECORDED = """
import sys, tempfile
from pathlib import Path
from cdclake.cli import demo
from cdclake.spark.session import JAVA_OPTIONS, LOCAL_DEFAULTS, get_session
options = f"{LOCAL_DEFAULTS[JAVA_OPTIONS]} -XX:StartFlightRecording=filename={sys.argv[1]}"
print(get_session(conf={JAVA_OPTIONS: options}).sparkContext.getConf().get(JAVA_OPTIONS))
with tempfile.TemporaryDirectory() as tmp:
    print(demo.run(Path(tmp, "demo"), events=20, say=lambda _: None))
"""


def in_cache(cache: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(cache)}


def without_given_paths(options: str) -> str:
    """JVM options without the log configuration and the scratch directory every local session gets (see
    test_session_settings)."""
    given = ("-Dlog4j2.configurationFile=", "-Djava.io.tmpdir=")
    return " ".join(o for o in options.split() if not o.startswith(given))


@pytest.mark.spark
def test_a_built_archive_is_mapped_by_the_next_local_session_and_replaces_an_older_installs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    archive = class_archive()
    assert archive is not None
    older = archive.with_name("spark-classes-0123456789abcdef.jsa")
    older.parent.mkdir(mode=0o700, parents=True)
    older.write_bytes(b"an archive of another install")
    built = subprocess.run([CDCLAKE, "class-archive", "--events", "20"], env=in_cache(tmp_path),
                           capture_output=True, text=True, timeout=1200, check=False)
    try:
        assert built.returncode == 0, built.stdout + built.stderr
        assert f"Local Spark sessions now start from {archive}" in built.stdout
        assert sorted(archive.parent.glob("*.jsa")) == [archive] and _trusted(archive)
        shown = subprocess.run([sys.executable, "-c", SHOW], env=in_cache(tmp_path), capture_output=True, text=True,
                               timeout=600, check=True).stdout.splitlines()
        assert "sharing" in shown[-2] and shown[-1] == str(archive)
        recorded = subprocess.run([sys.executable, "-c", RECORDED, str(tmp_path / "flight.jfr")],
                                  env=in_cache(tmp_path), capture_output=True, text=True, timeout=900, check=False)
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr[-3000:]
        options, ran = recorded.stdout.splitlines()[-2:]
        assert without_given_paths(options).endswith(
            f"-XX:StartFlightRecording=filename={tmp_path / 'flight.jfr'} -XX:SharedArchiveFile={archive}")
        assert ran == "True"
    finally:
        archive.unlink(missing_ok=True)  # about 200 MB


def test_a_local_session_maps_the_archive_given_and_a_clusters_never(tmp_path):
    archive = tmp_path / "spark-classes-x.jsa"
    local = session_settings("local[2]", None, "/opt/python", archive=archive)
    assert without_given_paths(local[JAVA_OPTIONS]) == (
        f"{LOCAL_DEFAULTS[JAVA_OPTIONS]} -XX:SharedArchiveFile={archive}")
    assert JAVA_OPTIONS not in session_settings("spark://host:7077", None, "/opt/python", archive=archive)
    spaced = tmp_path / "a b" / "x.jsa"
    quoted = session_settings(None, None, "/opt/python", archive=spaced)[JAVA_OPTIONS]
    assert quoted.endswith(f"-XX:SharedArchiveFile='{spaced}'")


def test_the_users_own_jvm_options_keep_the_archive_unless_they_choose_how_classes_are_shared(tmp_path):
    archive = tmp_path / "spark-classes-x.jsa"
    own = session_settings(None, None, "/opt/python", {JAVA_OPTIONS: "-Xss4m"}, archive)[JAVA_OPTIONS]
    assert without_given_paths(own) == f"-Xss4m -XX:SharedArchiveFile={archive}"
    for sharing in ("-Xshare:off", "-XX:SharedArchiveFile=/opt/mine.jsa", "-XX:DumpLoadedClassList=/tmp/c.lst"):
        options = session_settings(None, None, "/opt/python", {JAVA_OPTIONS: sharing}, archive)[JAVA_OPTIONS]
        assert without_given_paths(options) == sharing


def test_the_archive_is_named_by_the_java_the_jars_and_the_recipe_it_is_for(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    (jars / "spark-core.jar").write_bytes(b"1")
    first = class_archive()
    assert first is not None and first.parent == tmp_path / "cache" / f"cdclake-{os.getuid()}"
    assert class_archive() == first
    (jars / "spark-core.jar").write_bytes(b"22")  # an upgrade
    assert class_archive() != first
    (jars / "spark-core.jar").write_bytes(b"1")
    os.utime(jars / "spark-core.jar", ns=(0, 0))
    assert class_archive() != first
    before = class_archive()
    monkeypatch.setattr(session, "_ARCHIVE_RECIPE", "built another way")
    assert class_archive() != before
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    assert class_archive() is None


def test_only_an_archive_that_no_one_else_could_write_is_mapped(tmp_path):
    archive = tmp_path / "spark-classes-x.jsa"
    assert not _trusted(archive)
    archive.write_bytes(b"x")
    archive.chmod(0o644)
    assert _trusted(archive)
    archive.chmod(0o664)
    assert not _trusted(archive)
    assert not _trusted(tmp_path)


def test_the_command_says_why_it_cannot_build_an_archive(tmp_path):
    not_a_directory = tmp_path / "cache"
    not_a_directory.write_text("")
    # A process of its own: in this one another test's Spark session may be running, which the command refuses.
    result = subprocess.run([CDCLAKE, "class-archive"],
                            env=in_cache(not_a_directory), capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("cdclake: class-archive: ") and str(not_a_directory) in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
