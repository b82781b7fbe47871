"""The Prometheus metrics of a run: batch reports in, the values a scraper reads over HTTP on the loopback out."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cdclake.lake.delta import DeltaSink
from cdclake.pipeline import config as C
from cdclake.pipeline import metrics
from cdclake.pipeline.batch import BatchReport
from cdclake.pipeline.runner import _LakeReports
from tests.helpers.kafka_broker import free_port


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample served, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _config(port: int | None, name: str = "shop") -> C.PipelineConfig:
    return C.PipelineConfig(lake="/l", name=name, metrics_port=port, sources=[
        C.SourceConfig("canal-json", "/in/a", "a"), C.SourceConfig("canal-json", "/in/b", "b")])


def test_batch_reports_become_the_metrics_served_and_the_server_stops_with_the_run():
    seen = []
    reports = [
        BatchReport("a", 0, records=10, events=12, failed=1, skipped=2, inserted=7, updated=2, deleted=1,
                    dead_letters=1, seconds=1.5, plan_seconds=1.0, apply_seconds=0.5,
                    rows={"db.t": {"insert": 5, "update": 2, "delete": 1}, "db.u": {"insert": 2, "update": 0,
                                                                                   "delete": 0}},
                    offsets={"in:0": 9}, last_commit_ts={"db.t": 400, "db.u": 300}),
        # Table db.u stops: its records are dead letters, its commit ts stays what the lake has.
        BatchReport("a", 1, records=4, events=4, dead_letters=3, seconds=0.2, plan_seconds=0.1, apply_seconds=0.1,
                    rows={"db.t": {"insert": 1, "update": 0, "delete": 0}}, stopped={"db.u": "bad type"},
                    last_commit_ts={"db.t": 500, "db.u": 600}),
        BatchReport("b", 0, records=3, events=3, seconds=0.3, plan_seconds=0.2, apply_seconds=0.1,
                    rows={"db.t": {"insert": 0, "update": 3, "delete": 0}}, last_commit_ts={"db.t": 450}),
        BatchReport("a", 2, records=1, events=1, dead_letters=1, seconds=0.1, stopped={"db.u": "bad type"}),
    ]
    port = free_port()
    with metrics.serving(_config(port), seen.append) as progress:
        assert progress is not None
        for report in reports:
            progress(report)
        got = scrape(port)
    assert seen == reports  # the run's own progress still gets every report

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted({"pipeline": "shop", **labels}.items())))]

    assert value("cdclake_records_total", source="a", outcome="applied") == (10 - 1 - 2) + (4 - 3) + 0
    assert value("cdclake_records_total", source="a", outcome="dead_letter") == 5
    assert value("cdclake_records_total", source="a", outcome="skipped") == 2
    assert value("cdclake_records_total", source="b", outcome="applied") == 3
    assert value("cdclake_rows_total", table="db.t", change="insert") == 6
    assert value("cdclake_rows_total", table="db.t", change="update") == 5
    assert value("cdclake_rows_total", table="db.t", change="delete") == 1
    assert value("cdclake_rows_total", table="db.u", change="insert") == 2
    assert value("cdclake_batch_seconds_count", source="a", phase="total") == 3
    assert value("cdclake_batch_seconds_sum", source="a", phase="total") == pytest.approx(1.8)
    assert value("cdclake_batch_seconds_sum", source="a", phase="plan") == pytest.approx(1.1)
    assert value("cdclake_batch_seconds_sum", source="b", phase="apply") == pytest.approx(0.1)
    assert value("cdclake_batch_seconds_bucket", source="a", phase="total", le="1.0") == 2
    assert value("cdclake_last_commit_ts", table="db.t") == 450  # the last report's, source b's
    assert value("cdclake_last_commit_ts", table="db.u") == 300
    assert value("cdclake_tables_stopped") == 1
    # File sources have no end offset to measure a lag by.
    assert not [key for key in got if key[0] == "cdclake_source_lag_records"]
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_hostile_table_names_stay_label_values():
    # A table name comes from the messages: it must not end its label, add a sample, or break the exposition.
    names = ['db.t"} 1e9\ncdclake_tables_stopped{pipeline="shop"} 99', "db.\\x", "db.\u2028\u00e9", "db." + "x" * 5000]
    port = free_port()
    with metrics.serving(_config(port), None) as progress:
        progress(BatchReport("a", 0, records=1, events=1, rows={n: {"insert": 1} for n in names},
                             last_commit_ts={n: 7 for n in names}))
        got = scrape(port)
    assert sorted(dict(labels)["table"] for name, labels in got if name == "cdclake_rows_total") == sorted(names)
    assert got[("cdclake_tables_stopped", (("pipeline", "shop"),))] == 0


def test_two_runs_in_one_process_count_apart():
    for _ in range(2):
        port = free_port()
        with metrics.serving(_config(port), None) as progress:
            progress(BatchReport("a", 0, records=2, events=2))
            assert scrape(port)[("cdclake_records_total", (("outcome", "applied"), ("pipeline", "shop"),
                                                                  ("source", "a")))] == 2


def test_without_a_port_nothing_is_served():
    def show(report: BatchReport) -> None:
        pass

    with metrics.serving(_config(port=None), show) as progress:
        assert progress is show


def test_a_port_in_use_is_a_one_line_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ValueError, match=r"cannot serve metrics on 127\.0\.0\.1:\d+: "), \
                metrics.serving(_config(port=taken.getsockname()[1]), None):
            pass


@pytest.mark.parametrize(("text", "message"), [
    ('[metrics]\nport = "x"\n', "[metrics] 'port' must be a whole number, not 'x'"),
    ('[metrics]\nhost = 1\n', "[metrics] 'host' must be a string, not 1"),
    ('[metrics]\nport = 1\npath = "/m"\n', "[metrics] unknown key(s) path"),
    ('metrics = 9464\n', "'metrics' must be a table, not 9464"),
])
def test_the_metrics_table_of_a_pipeline_file_is_checked(tmp_path, text, message):
    path = tmp_path / "PIPELINE.toml"
    path.write_text('lake = "/l"\n' + text + '[[source]]\nformat = "canal-json"\ninput = "/in"\n')
    with pytest.raises(ValueError) as raised:
        C.load(str(path))
    assert message in str(raised.value)


def test_the_metrics_table_of_a_pipeline_file_sets_port_and_host(tmp_path):
    path = tmp_path / "PIPELINE.toml"
    path.write_text('lake = "/l"\n[metrics]\nport = 9464\nhost = "0.0.0.0"\n'
                    '[[source]]\nformat = "canal-json"\ninput = "/in"\n')
    loaded = C.load(str(path))
    assert (loaded.metrics_port, loaded.metrics_host) == (9464, "0.0.0.0")
    path.write_text('lake = "/l"\n[[source]]\nformat = "canal-json"\ninput = "/in"\n')
    loaded = C.load(str(path))
    assert (loaded.metrics_port, loaded.metrics_host) == (None, "127.0.0.1")
    loaded.metrics_port = 70000
    with pytest.raises(ValueError, match="the metrics port must be 0 to 65535, not 70000"):
        loaded.validate()


def test_reports_read_back_from_the_lake_carry_each_tables_commit_ts(tmp_path):
    # Spark Connect: the batches run on the server, and the run reads their reports from the lake's progress table.
    sink = DeltaSink(str(tmp_path), "shop.a")
    sink.record_progress({"batch": 0, "records": 3, "events": 3, "inserted": 3, "duration_s": 0.5, "offsets": {},
                          "tables": {"db.t": {"last_seq": f"{1234:020d}/x", "stopped": None},
                                     "db.u": {"last_seq": f"{99:020d}/y", "stopped": "bad type"}}}, 999)
    port = free_port()
    with metrics.serving(_config(port), None) as progress:
        _LakeReports(sink, "a", 0, progress).poll()
        got = scrape(port)
    assert got[("cdclake_last_commit_ts", (("pipeline", "shop"), ("table", "db.t")))] == 1234
    assert ("cdclake_last_commit_ts", (("pipeline", "shop"), ("table", "db.u"))) not in got  # stopped
    assert got[("cdclake_tables_stopped", (("pipeline", "shop"),))] == 1
    assert got[("cdclake_records_total", (("outcome", "applied"), ("pipeline", "shop"), ("source", "a")))] == 3
    assert got[("cdclake_batch_seconds_count", (("phase", "total"), ("pipeline", "shop"), ("source", "a")))] == 1
    assert ("cdclake_batch_seconds_count", (("phase", "plan"), ("pipeline", "shop"), ("source", "a"))) not in got


def test_the_metrics_flags_go_with_a_pipeline_file_and_override_it(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cdclake.cli.main import app
    from cdclake.pipeline import runner as pipeline

    ran: list[C.PipelineConfig] = []
    monkeypatch.setattr(pipeline, "run",
                        lambda config, progress=None, say=None: ran.append(config) or pipeline.RunSummary())
    path = tmp_path / "PIPELINE.toml"
    path.write_text(f'lake = "{tmp_path / "lake"}"\n[metrics]\nport = 9464\n'
                    f'[[source]]\nformat = "canal-json"\ninput = "{tmp_path}"\n')
    runner = CliRunner()
    assert runner.invoke(app, ["run", str(path), "--follow"]).exit_code == 0
    assert runner.invoke(app, ["run", str(path), "--metrics-port", "9500", "--metrics-host", "::1"]).exit_code == 0
    assert [(c.metrics_port, c.metrics_host) for c in ran] == [(9464, "127.0.0.1"), (9500, "::1")]
    result = runner.invoke(app, ["run", str(path), "--metrics-port", "70000"])
    assert result.exit_code == 2 and "the metrics port must be 0 to 65535, not 70000" in result.output
