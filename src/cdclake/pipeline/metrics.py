"""Prometheus metrics of a running pipeline, fed from its batch reports and served over HTTP while it runs.

A registry of its own (not prometheus_client's global one), so two runs in one process never share counters.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from cdclake.pipeline.batch import BatchReport, Progress
    from cdclake.pipeline.config import PipelineConfig
    from cdclake.sources.kafka import KafkaClient

logger = logging.getLogger(__name__)

# How long the end offsets are asked for after a batch (which waits meanwhile) before the lag keeps its last value.
LAG_RETRY_S = 5.0

# Batch phases last from tens of milliseconds (an idle poll) to minutes (a first load of millions of records).
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class Metrics:
    """The pipeline's metrics; :meth:`observe` takes one batch report."""

    def __init__(self, config: PipelineConfig) -> None:
        self.pipeline = config.name
        self.registry = CollectorRegistry(auto_describe=True)
        self.records = Counter("cdclake_records", "Records read, by what became of them.",
                               ["pipeline", "source", "outcome"], registry=self.registry)
        self.rows = Counter("cdclake_rows", "Rows changed in the lake's tables.", ["pipeline", "table", "change"],
                            registry=self.registry)
        self.seconds = Histogram("cdclake_batch_seconds", "Time a batch spent, by phase (plan: read, decode and "
                                 "plan; apply: write the tables; total).", ["pipeline", "source", "phase"],
                                 buckets=BUCKETS, registry=self.registry)
        self.lag = Gauge("cdclake_source_lag_records", "Kafka records after the last one applied, per partition.",
                         ["pipeline", "topic", "partition"], registry=self.registry)
        self.last_commit_ts = Gauge("cdclake_last_commit_ts", "Commit ts of the last change applied to a table, "
                                    "as the source gives it.", ["pipeline", "table"], registry=self.registry)
        self.stopped = Gauge("cdclake_tables_stopped", "Tables stopped, as this run's batches found them.",
                             ["pipeline"], registry=self.registry)
        self.stopped.labels(self.pipeline).set(0)
        self.stopped_tables: set[str] = set()
        self.kafka = {s.name: s for s in config.sources if s.kafka is not None}
        self.clients: dict[str, KafkaClient] = {}  # per Kafka source, made at its first batch
        self.lock = threading.Lock()  # sources following at once report from their own threads

    def observe(self, report: BatchReport) -> None:
        p = self.pipeline
        with self.lock:
            # The outcomes add up to the records read (a record may hold several events; held changes count as read).
            applied = max(report.records - report.dead_letters - report.skipped, 0)
            for outcome, count in (("applied", applied), ("dead_letter", report.dead_letters),
                                   ("skipped", report.skipped)):
                self.records.labels(p, report.source, outcome).inc(count)
            for table, changes in report.rows.items():
                for change, count in changes.items():
                    self.rows.labels(p, table, change).inc(count)
            # Reports read back from the lake (Spark Connect) have no phases.
            phases = [("plan", report.plan_seconds), ("apply", report.apply_seconds)] if report.plan_seconds else []
            for phase, seconds in [*phases, ("total", report.seconds)]:
                self.seconds.labels(p, report.source, phase).observe(seconds)
            for table, ts in report.last_commit_ts.items():
                if table not in report.stopped:
                    self.last_commit_ts.labels(p, table).set(ts)
            self.stopped_tables.update(report.stopped)
            self.stopped.labels(p).set(len(self.stopped_tables))
        if report.source in self.kafka and report.offsets:
            self._lag(report)

    def _lag(self, report: BatchReport) -> None:
        """End offset minus the next offset to apply, for the partitions the batch read."""
        from cdclake.sources import kafka  # confluent_kafka only for a pipeline that reads Kafka

        applied = {}
        for coords, offset in report.offsets.items():  # "topic:partition"; a topic name has no ":"
            if offset is None:  # a partition the batch read nothing of
                continue
            topic, partition = coords.rsplit(":", 1)
            applied[(topic, int(partition))] = offset
        if report.source not in self.clients:
            settings = self.kafka[report.source].client_settings().retrying_for(LAG_RETRY_S)
            self.clients[report.source] = kafka.KafkaClient(settings)
        try:
            latest = self.clients[report.source].latest(sorted(applied))
        except Exception as exc:  # the run goes on; the gauge keeps its last value
            logger.warning("metrics: the end offsets of source %s: %s", report.source, exc)
            return
        for (topic, partition), offset in applied.items():
            end = latest.get(topic, {}).get(partition)
            if end is not None:
                self.lag.labels(self.pipeline, topic, str(partition)).set(max(end - offset - 1, 0))

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


@contextlib.contextmanager
def serving(config: PipelineConfig, progress: Progress | None) -> Iterator[Progress | None]:
    """``progress`` that also feeds the metrics served on ``config.metrics_host:metrics_port`` until the block
    ends (``progress`` itself when no port is set)."""
    if config.metrics_port is None:
        yield progress
        return
    metrics = Metrics(config)
    try:
        server, thread = start_http_server(config.metrics_port, config.metrics_host, registry=metrics.registry)
    except OSError as exc:
        raise ValueError(f"cannot serve metrics on {config.metrics_host}:{config.metrics_port}: "
                         f"{exc.strerror or exc}") from None
    logger.info("metrics at http://%s:%d/metrics", config.metrics_host, server.server_port)

    def both(report: BatchReport) -> None:
        metrics.observe(report)
        if progress:
            progress(report)

    try:
        yield both
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        metrics.close()
