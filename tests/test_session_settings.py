"""Which settings a new session is built with: this machine's tuning only for a session that runs here."""

from __future__ import annotations

import pytest

from cdclake.spark.session import JAVA_OPTIONS, LOCAL_DEFAULTS, PER_SESSION, SHORT_RUN_JAVA_OPTIONS, session_settings


@pytest.mark.parametrize(("master", "remote"), [(None, None), ("local[2]", None), (None, "local[2]")])
def test_a_session_on_this_machine_gets_its_tuning(master, remote):
    settings = session_settings(master, remote, "/opt/python")
    assert settings == {**LOCAL_DEFAULTS, "spark.pyspark.python": "/opt/python"}
    assert settings["spark.sql.shuffle.partitions"] == "4"


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "k8s://https://host:6443"])
def test_a_cluster_session_keeps_the_clusters_own_settings_but_runs_in_utc(master):
    settings = session_settings(master, None, "/opt/python")
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
    assert session_settings(None, None, "/opt/python", short_run=True)[JAVA_OPTIONS] == (
        f"{LOCAL_DEFAULTS[JAVA_OPTIONS]} {SHORT_RUN_JAVA_OPTIONS}")
    assert session_settings(None, None, "/opt/python")[JAVA_OPTIONS] == LOCAL_DEFAULTS[JAVA_OPTIONS]
    mine = {JAVA_OPTIONS: "-Xss4m"}
    assert session_settings(None, None, "/opt/python", mine, short_run=True)[JAVA_OPTIONS] == "-Xss4m"
    assert JAVA_OPTIONS not in session_settings("yarn", None, "/opt/python", short_run=True)
