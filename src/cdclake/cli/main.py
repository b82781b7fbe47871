"""``cdclake``: the command line."""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from cdclake import formats, pipeline
from cdclake.errors import KafkaSourceError, LakeError, RegistryError
from cdclake.formats import Failure
from cdclake.formats.base import parse_options
from cdclake.model.events import to_json
from cdclake.model.records import FileLine, Record, read_file, write_records


class _PlainHelp:
    """Help texts shown as written: rich would read ``[/REGISTRY]`` or ``[default: 600]`` in them as markup (and
    crash on the first, drop the second)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.help = self.help and escape(self.help)
        for param in self.params:
            if getattr(param, "help", None):
                param.help = escape(param.help)


class _Command(_PlainHelp, TyperCommand):
    pass


class _Group(_PlainHelp, TyperGroup):
    pass


app = typer.Typer(add_completion=False, no_args_is_help=True, cls=_Group,
                  help="Database change streams from Kafka into correct Delta Lake tables, on Spark.")

BATCH = 10_000

# Exit codes, one meaning each (README, "Exit codes"): scripts and schedulers tell a typo from an outage.
DATA_ERRORS = 1  # records that could not be decoded or applied (beyond the tolerance), rows that failed a check
USAGE = 2  # a flag, file or path that is wrong: running again as it is fails again
STOPPED_TABLES = 3  # tables stopped (see README, "DDL"): the other tables are up to date
UNREACHABLE = 4  # Kafka, a schema registry or storage could not be reached, or refused the run
INTERRUPTED = 130  # a signal ended a run that was to stop by itself


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"cdclake {importlib.metadata.version('cdclake')}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = False) -> None:
    pass

FormatName = Annotated[str, typer.Option("--format", "-f", help="Wire format: " + ", ".join(formats.names()))]
OptionPairs = Annotated[list[str] | None, typer.Option(
    "--option", "-o", help="Format option KEY=VALUE (repeatable); `cdclake formats` lists them.")]
KafkaServers = Annotated[str | None, typer.Option("--kafka", help="Kafka bootstrap servers HOST:PORT[,HOST:PORT…].")]
Topics = Annotated[list[str] | None, typer.Option("--topic", help="Kafka topic(s): T[,T…] (repeatable).")]
TopicPattern = Annotated[str | None, typer.Option(help="Kafka topics whose whole name matches this regex.")]
StartingOffsets = Annotated[str, typer.Option(
    help='Where to start reading: earliest, latest or per partition, e.g. \'{"orders": {"0": 42}}\'.')]
KafkaOptionPairs = Annotated[list[str] | None, typer.Option(
    "--kafka-option", help="Kafka client setting KEY=VALUE (repeatable), e.g. security.protocol=SASL_SSL.")]
KafkaRetrySeconds = Annotated[float | None, typer.Option(
    help="How long Kafka is waited for, when unreachable or short of records it had, before giving up "
         "[default: 600].")]


def _fail(message: str, code: int = USAGE) -> typer.Exit:
    typer.echo(f"cdclake: {message}", err=True)
    return typer.Exit(code)


def _require_files(paths: list[Path]) -> None:
    for path in paths:
        if not path.is_file():
            raise _fail(f"{path}: a directory; give its files ({path}/*)" if path.is_dir() else f"{path}: no such file")


def _require_lake(lake: Path) -> None:
    try:
        pipeline.check_lake(str(lake))
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _batches(paths: list[Path]) -> Iterator[list[FileLine]]:
    batch: list[FileLine] = []
    for path in paths:
        for line in read_file(path):
            batch.append(line)
            if len(batch) >= BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


@app.command()
def decode(
    files: Annotated[list[Path], typer.Argument(help="Captured-records files or message-per-line files.")],
    format_name: FormatName,
    option: OptionPairs = None,
    strict: Annotated[bool, typer.Option(help="Stop at the first message that cannot be decoded.")] = False,
) -> None:
    """Print one canonical JSON change event per line, in source order."""
    try:
        fmt = formats.create_decoder(format_name, parse_options(formats.get(format_name), option or []))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    _require_files(files)
    out = sys.stdout.buffer
    records = events = failed = skipped = keyless = 0
    samples: list[Record] = []  # a few records that failed to decode, for a hint at their format
    waiting: list[Record] = []  # decoded again with the next batch (see Decoded.waiting)
    where: dict[int, FileLine] = {}
    for batch in itertools.chain(_batches(files), [None]):
        good = list(waiting)
        for line in batch or ():
            records += 1
            if line.record is None:
                failed += 1
                typer.echo(f"{line.path}:{line.line}: {line.error}", err=True)
                if strict:
                    raise typer.Exit(1)
                continue
            where[id(line.record)] = line
            good.append(line.record)
            keyless += line.record.key is None
        try:
            result = fmt.decode(good, more=batch is not None)
        except fmt.fatal as exc:  # e.g. a schema registry that is down, or corruption-handling=error
            out.flush()
            raise _fail(f"{format_name}: stopped: {exc}", _stopping_code(type(exc).__name__)) from None
        for event in result.events:
            out.write(to_json(event) + b"\n")
        events += len(result.events)
        skipped += result.skipped
        failed += len(result.failures)
        samples.extend(failure.record for failure in result.failures[:SAMPLES - len(samples)])
        for failure in result.failures:
            _report(failure, where[id(failure.record)])
            if strict:
                out.flush()
                raise typer.Exit(1)
        waiting = result.waiting
        where = {id(r): where[id(r)] for r in waiting}
    out.flush()
    typer.echo(f"{_n(records, 'record')}: {_n(events, 'event')}, {skipped:,} skipped, {failed:,} failed", err=True)
    if failed and not events:
        _say_what_they_look_like(samples, format_name)
    if keyless and format_name in KEYS_FROM_KAFKA:
        typer.echo(f"warning: {_n(keyless, 'record')} without a Kafka key: {format_name} takes a row's key from "
                   "it, and without one the whole row is the key (`cdclake capture` keeps the keys)", err=True)
    if failed:
        raise typer.Exit(DATA_ERRORS)


# The formats whose rows take their key from the Kafka record's key (README, "Keys").
KEYS_FROM_KAFKA = ("debezium-avro", "debezium-json")

# How many of the records that failed to decode are tried in every format, for a hint at the one they are in.
SAMPLES = 5


def _say_what_they_look_like(samples: list[Record], format_name: str) -> None:
    """When every record failed: the formats that would have decoded some of them, if any."""
    others = [name for name in formats.looks_like(samples) if name != format_name]
    if others:
        typer.echo(f"hint: none of the records decoded as {format_name}; they look like {' or '.join(others)} "
                   f"(--format {others[0]})", err=True)


def _report(failure: Failure, line: FileLine) -> None:
    typer.echo(f"{line.path}:{line.line}: {failure.format}: {failure.reason}", err=True)


@app.command("formats")
def list_formats() -> None:
    """List the registered formats and their options."""
    for name in formats.names():
        cls = formats.get(name)
        typer.echo(name)
        for opt in cls.options:
            choices = f" [{'|'.join(opt.choices)}]" if opt.choices else ""
            typer.echo(f"  {opt.name}={opt.default!r}{choices}  {opt.help}")


@app.command()
def run(
    ctx: typer.Context,
    pipeline_file: Annotated[Path | None, typer.Argument(
        help="PIPELINE.toml (instead of the flags; --follow may be added).")] = None,
    format_name: Annotated[str | None, typer.Option("--format", "-f", help="Wire format of the input.")] = None,
    input_dir: Annotated[Path | None, typer.Option("--input", help="Directory (or file) of captured records.")] = None,
    kafka_servers: KafkaServers = None,
    topic: Topics = None,
    topic_pattern: TopicPattern = None,
    starting_offsets: StartingOffsets = "earliest",
    kafka_option: KafkaOptionPairs = None,
    kafka_retry_seconds: KafkaRetrySeconds = None,
    connector: Annotated[str, typer.Option(help="Kafka connector: cdclake (no jar) or spark (its own).")] = "cdclake",
    lake: Annotated[Path | None, typer.Option(help="Lake root directory.")] = None,
    checkpoint: Annotated[Path | None, typer.Option(help="Checkpoint directory (default: under the lake).")] = None,
    option: OptionPairs = None,
    follow: Annotated[bool, typer.Option(help="Keep watching the input for new records.")] = False,
    max_records_per_batch: Annotated[int, typer.Option(help="At most this many records per batch (0: all).")] = 0,
    name: Annotated[str, typer.Option(help="Pipeline id (names checkpoints and commit markers).")] = "default",
    consistency: Annotated[str, typer.Option(
        help="none, or resolved-ts: apply only whole transactions, up to the smallest resolved ts of all "
             "partitions (ticdc-open, TiCDC canal-json).")] = "none",
    remote: Annotated[str | None, typer.Option(
        help="A Spark Connect server to run on, sc://HOST:PORT; sc://localhost:PORT finds the token of "
             "`cdclake serve`.")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        help="Serve Prometheus metrics on this port while the run lasts (0: any free one).")] = None,
    metrics_host: Annotated[str | None, typer.Option(help="The address the metrics listen on.")] = None,
    on_error: Annotated[str, typer.Option(
        help="A record that cannot be decoded goes to the dead letters (dead-letter), or also stops the run after "
             "its batch (fail).")] = "dead-letter",
    max_dead_letter_ratio: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="The share of the records that may go to the dead letters before the run exits 1 "
                               "(1: never).")] = 0.0,
) -> None:
    """Apply change records to Delta tables: every batch exactly once, with progress and a summary. Exits 3 when
    tables are stopped (the summary names them and why), 130 when a signal ended a run that was to stop by itself."""
    try:
        if pipeline_file is not None:
            alongside = ("pipeline_file", "follow", "metrics_port", "metrics_host")
            given = [max(p.opts, key=len) for p in ctx.command.params if p.name not in alongside
                     and p.name is not None and ctx.get_parameter_source(p.name).name == "COMMANDLINE"]
            if given:
                raise ValueError(f"{pipeline_file} says what to run: leave out {', '.join(given)} (of the flags, "
                                 "only --follow and --metrics-* go with a pipeline file)")
            cfg = pipeline.load_config(str(pipeline_file))
            cfg.follow = cfg.follow or follow
        else:
            if not (format_name and lake) or (input_dir is None) == (kafka_servers is None):
                raise ValueError("give PIPELINE.toml, or --format, --lake and one of --input and --kafka")
            kafka_only = [max(p.opts, key=len) for p in ctx.command.params if p.name in _KAFKA_ONLY
                          and ctx.get_parameter_source(p.name).name == "COMMANDLINE"]
            if input_dir is not None and kafka_only:
                raise ValueError(f"{', '.join(kafka_only)} for Kafka: --input reads files")
            fmt_cls = formats.get(format_name)
            source = pipeline.SourceConfig(format=format_name, input=str(input_dir) if input_dir else None,
                                           options=parse_options(fmt_cls, option or []),
                                           max_records_per_batch=max_records_per_batch, kafka=kafka_servers,
                                           topics=topic or [], topic_pattern=topic_pattern,
                                           starting_offsets=starting_offsets, kafka_options=_pairs(kafka_option),
                                           connector=connector, consistency=consistency,
                                           kafka_retry_seconds=kafka_retry_seconds)
            cfg = pipeline.PipelineConfig(lake=str(lake), sources=[source], name=name, follow=follow,
                                          checkpoint=str(checkpoint) if checkpoint else None, spark_remote=remote,
                                          on_error=on_error, max_dead_letter_ratio=max_dead_letter_ratio)
        cfg.metrics_port = cfg.metrics_port if metrics_port is None else metrics_port
        cfg.metrics_host = metrics_host or cfg.metrics_host
        cfg.validate()
    except (ValueError, OSError) as exc:
        raise _fail(str(exc)) from None
    def show(report) -> None:  # noqa: ANN001 - a BatchReport; imported lazily with Spark
        stopped = f" STOPPED {report.stopped}" if report.stopped else ""
        if report.consistent_ts is not None:
            stopped += f", {report.held} held, consistent up to commit_ts {report.consistent_ts}"
        where = (f"; read+decode+plan {report.plan_seconds:.1f}s, apply {report.apply_seconds:.1f}s"
                 if report.plan_seconds else "")
        _say(f"batch {report.batch} [{report.source}]: {_n(report.records, 'record')}, "
             f"{_n(report.events, 'event')}, +{report.inserted:,} ~{report.updated:,} -{report.deleted:,} rows, "
             f"{_dead_letters(report.dead_letters, report.failed)}, {report.skipped:,} skipped, "
             f"{report.seconds:.1f}s ({_rate(report.records, report.seconds)}{where}){stopped}")

    try:
        started = time.monotonic()
        summary = pipeline.run(cfg, progress=show, say=_say)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    except KafkaSourceError as exc:
        raise _fail(str(exc), _stopping_code(type(exc).__name__)) from None
    except RegistryError as exc:  # found down before Spark started
        raise _fail(f"stopped: {exc}", UNREACHABLE) from None
    except KeyboardInterrupt:  # a signal before any batch (waiting for Kafka), or a second one
        raise _fail("interrupted", INTERRUPTED) from None
    except Exception as exc:
        stopped = pipeline.stopping_error(exc)
        if stopped is not None:
            kind, message = stopped
            raise _fail(f"stopped: {message}", _stopping_code(kind)) from None
        problem = pipeline.file_system_problem(exc)
        if problem is None:
            raise
        raise _fail(f"cannot write {problem}") from None
    # A signal is how a following run ends; a run that was to stop once caught up exits as interrupted (130), though
    # the batch the signal found was finished: running it again reads what it left, if anything.
    interrupted = summary.signalled and not cfg.follow
    ended = "stopped" if summary.signalled else "done"
    records, failed, seconds = summary.total("records"), summary.total("failed"), time.monotonic() - started
    typer.echo(f"{ended}: {_n(len(summary.batches), 'batch', 'batches')}, {_n(records, 'record')}, "
               f"{_n(summary.total('events'), 'event')}, {summary.total('inserted'):,} inserted, "
               f"{summary.total('updated'):,} updated, {summary.total('deleted'):,} deleted, "
               f"{_dead_letters(summary.total('dead_letters'), failed)}, {summary.total('skipped'):,} skipped "
               f"in {seconds:.1f}s ({_rate(records, seconds)})", err=True)
    for table, why in sorted(summary.stopped.items()):
        typer.echo(f"table {table} is STOPPED, its records go to the dead letters: {why}", err=True)
    if summary.total("dead_letters"):
        typer.echo(f"the dead letters, with why: cdclake dead-letters {cfg.lake} --pipeline {cfg.name}", err=True)
    for empty in [] if records else _empty_inputs(cfg):
        typer.echo(f"warning: {empty}: no records in it", err=True)
    if interrupted:
        raise typer.Exit(INTERRUPTED)
    if summary.stopped:
        raise typer.Exit(STOPPED_TABLES)
    if summary.gave_up:
        raise _fail(f"stopped: {summary.gave_up}", DATA_ERRORS)
    if failed > cfg.max_dead_letter_ratio * records:
        if not summary.total("events"):
            _say_what_they_look_like(_dead_letter_samples(cfg), cfg.sources[0].format if len(cfg.sources) == 1
                                     else "")
        raise _fail(f"{failed:,} of {records:,} records ({failed / records:.0%}) could not be decoded, more than "
                    f"max_dead_letter_ratio = {cfg.max_dead_letter_ratio:g} allows", DATA_ERRORS)


def _empty_inputs(cfg: pipeline.PipelineConfig) -> list[str]:
    """The file inputs of the pipeline that hold no record (a mistyped folder, or a producer that wrote nothing)."""
    def holds_some(path: Path) -> bool:
        files = path.rglob("*") if path.is_dir() else [path]
        return any(each.is_file() and each.stat().st_size for each in files)

    return [source.input for source in cfg.sources if source.input and not holds_some(Path(source.input))]


def _say(line: str) -> None:
    """A progress line, with the time it is said."""
    typer.echo(f"{time.strftime('%H:%M:%S')} {line}", err=True)


def _n(count: int, word: str, words: str | None = None) -> str:
    """``1 record``, ``1,234 records``."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"


def _rate(records: int, seconds: float) -> str:
    return f"{records / seconds:,.0f} records/s" if seconds > 0 else "- records/s"


def _dead_letter_samples(cfg: pipeline.PipelineConfig) -> list[Record]:
    """The last few records the pipeline dead-lettered, as they were read."""
    dead = pipeline.dead_letters(cfg.lake, pipeline=cfg.name, with_bytes=True)
    return pipeline.dead_letter_records(dead.slice(max(0, dead.num_rows - SAMPLES)))


# The flags of `run` that only a Kafka source reads.
_KAFKA_ONLY = ("topic", "topic_pattern", "starting_offsets", "kafka_option", "kafka_retry_seconds", "connector")


def _stopping_code(kind: str) -> int:
    """The exit code for an error that stops a run or a decode by design, by its class name: records that cannot be
    had as they should (corruption, records gone from Kafka) are data errors; the rest is a service unreachable."""
    return DATA_ERRORS if kind in ("CorruptionError", "DataLoss") else UNREACHABLE


def _dead_letters(dead_letters: int, failed: int) -> str:
    """The dead letters, with those of stopped tables apart: their records were decoded, and count as events too."""
    stopped = dead_letters - failed
    return _n(dead_letters, "dead letter") + (f" ({stopped:,} of stopped tables)" if stopped > 0 else "")


@app.command()
def status(
    lake: Annotated[Path, typer.Argument(help="Lake root directory.")],
    show_all: Annotated[bool, typer.Option("--all", help="Also the tables dropped or renamed.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="As one JSON object, every table in it.")] = False,
) -> None:
    """Per table, by name: rows, last applied commit_ts/position, last batch time; dead letters by reason. Exits 1
    when a table could not be read (its line says why)."""
    from cdclake.cli import status as S

    _require_lake(lake)
    state = pipeline.status(str(lake))
    typer.echo(json.dumps(state, indent=2, default=str) if as_json else S.render(state, show_all))
    if S.unreadable_tables(state):  # each named on its line above; the exit code tells a script
        raise typer.Exit(1)


@app.command("dead-letters")
def dead_letters(
    lake: Annotated[Path, typer.Argument(help="Lake root directory.")],
    reason: Annotated[str | None, typer.Option(help="Only those whose reason contains this text.")] = None,
    name: Annotated[str | None, typer.Option("--pipeline", help="Only those of this pipeline (its --name).")] = None,
    format_name: Annotated[str | None, typer.Option("--format", help="Only those of this format.")] = None,
    limit: Annotated[int, typer.Option(min=0, help="List at most this many (0: all).")] = 20,
    write: Annotated[Path | None, typer.Option(
        help="Also write them all, with their bytes and where they were read, to this captured-records file: "
             "input for `cdclake run --input` once their cause is fixed.")] = None,
) -> None:
    """List the records the lake could not apply: where each was read, its format, pipeline and batch, and why.
    Oldest first."""
    from cdclake.cli import status as S

    _require_lake(lake)
    if name is not None:
        try:
            pipeline.check_pipeline(str(lake), name)
        except ValueError as exc:
            raise _fail(str(exc)) from None
    try:
        dead = pipeline.dead_letters(str(lake), reason, name, format_name, with_bytes=write is not None)
    except LakeError as exc:
        raise _fail(str(exc)) from None
    shown = S.dead_letter_lines(dead if not limit else dead.slice(0, limit))
    for line in shown:
        typer.echo(line)
    more = f" ({len(shown)} listed; --limit 0 lists all)" if len(shown) < dead.num_rows else ""
    typer.echo(f"{_n(dead.num_rows, 'dead letter')}{more}", err=True)
    if write is not None:
        kinds = sorted(set(dead["format"].to_pylist()))
        if len(kinds) > 1:
            raise _fail(f"they are of {len(kinds)} formats ({', '.join(kinds)}): choose one with --format, as a run "
                        "reads one format from an input")
        try:
            count = write_records(write, pipeline.dead_letter_records(dead))
        except OSError as exc:
            raise _fail(f"{write}: {exc.strerror or exc}") from None
        typer.echo(f"wrote {_n(count, 'record')} to {write}", err=True)


@app.command()
def maintain(
    lake: Annotated[Path, typer.Argument(help="Lake root directory.")],
    retention_hours: Annotated[int, typer.Option(
        min=0, help="Keep the files that table versions of the last this many hours need.")] = 168,
    compact: Annotated[bool, typer.Option(
        help="Rewrite small files into larger ones first. Beside a running pipeline prefer --no-compact: a "
             "schema change that meets a compaction stops the run (the next run applies it).")] = True,
) -> None:
    """Compact each table's small files and delete the files no recent table version needs (Delta OPTIMIZE and
    VACUUM, for the source tables and the lake's own under _cdclake/)."""
    _require_lake(lake)
    for done in pipeline.maintain(str(lake), retention_hours, compact):
        typer.echo(f"{done.table}: {done.compacted} files compacted into {done.into}, {done.vacuumed} files deleted")


@app.command("migrate-names")
def migrate_names(lake: Annotated[Path, typer.Argument(help="Lake root directory.")]) -> None:
    """Move the tables that an earlier cdclake named as their source did (upper case, dots, `_` for no database) to
    the directories that name them now (README, "Lake layout"). Run it while no pipeline writes to the lake."""
    if not lake.is_dir():
        raise _fail(f"{lake}: no such lake directory")
    try:
        moved = pipeline.migrate_names(str(lake))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    for line in moved:
        typer.echo(line)
    typer.echo(f"{len(moved)} tables moved", err=True)


@app.command()
def generate(
    format_name: FormatName,
    out: Annotated[Path, typer.Option("--out", help="Directory for records/, expected/ and manifest.json.")],
    events: Annotated[int, typer.Option(min=1, help="Change events to simulate.")] = 10_000,
    tables: Annotated[int, typer.Option(min=1, help="Tables in the simulated database.")] = 3,
    seed: Annotated[int, typer.Option(help="Random seed: the same seed gives the same data.")] = 0,
    partitions: Annotated[int, typer.Option(min=1, help="Kafka partitions per topic.")] = 1,
    replays: Annotated[float, typer.Option(min=0.0, max=1.0, help="Fraction of records delivered twice.")] = 0.0,
    max_keys: Annotated[int | None, typer.Option(min=1, help=(
        "At most this many live rows over all tables, an equal share each; once a table holds its share, "
        "inserts become updates, so that a long run keeps changing the same keys (default: no limit)."))] = None,
    option: OptionPairs = None,
    kafka_servers: Annotated[str | None, typer.Option(
        "--kafka", help="Also produce the records to Kafka at HOST:PORT (topics created as needed).")] = None,
    kafka_option: KafkaOptionPairs = None,
) -> None:
    """Simulate a source database and write its changes as FORMAT records, with the expected final state."""
    from cdclake import simulator as W

    try:
        format_cls = formats.get(format_name)
        options = parse_options(format_cls, option or [])
        if "registry" in {o.name for o in format_cls.options} and not options.get("registry"):
            # Schemas must outlive this process for the records to be readable: a folder registry beside them.
            options["registry"] = str((out / "registry").resolve())
        formats.create(format_name, options)  # bad options fail here, before any work
        # Checked by librdkafka now: a misspelt setting is said before the simulation, not after.
        settings = pipeline.kafka_producer(kafka_servers, _pairs(kafka_option)) if kafka_servers else None
        pipeline.make_directory("--out", str(out))
        generated = W.generate(format_name, events=events, tables=tables, seed=seed, partitions=partitions,
                               replays=replays, options=options, max_keys=max_keys)
        files = W.write_generated(out, generated)
    except (ValueError, OSError) as exc:
        raise _fail(str(exc)) from None
    if settings is not None:
        _publish(settings, generated.records, partitions)
    profile = W.profile_for(format_name, options)
    manifest = generated.manifest
    typer.echo(f"{format_name}: {_n(manifest['events'], 'event')} ({_counts(manifest['event_counts'])}) → "
               f"{_n(manifest['records'], 'record')} in {_n(len(files), 'file')} under {out / W.RECORDS_DIR}; "
               f"expected: {_n(manifest['expected_rows'], 'row')} in {_n(len(generated.expected), 'table')}",
               err=True)
    if replays and not profile.replay_safe:
        typer.echo(f"note: {format_name} cannot make a redelivered record harmless (no exact commit order), "
                   "so a pipeline may not reach the expected state from these replays", err=True)
    if partitions > 1 and not profile.ordered:
        typer.echo(f"note: {format_name} cannot order a key's changes across partitions, so a key change that "
                   "moves a row to another partition may be applied out of order", err=True)


@app.command()
def verify(
    files: Annotated[list[Path], typer.Argument(help="Captured-records files.")],
    format_name: FormatName,
    registry: Annotated[str, typer.Option(help="Schema registry: http(s)://[user:password@]host:port, "
                                          "glue://REGION[/REGISTRY] (AWS Glue) or a folder of <id>.avsc "
                                          "files.")] = "",
    option: OptionPairs = None,
) -> None:
    """Recompute each row's checksum and compare it with the one in the message (e.g. TiCDC's row checksum).

    Lists every row that mismatched, was flagged corrupted by the producer, or could not be decoded, then the
    counts, with why rows were skipped. Exits 1 when any row mismatched, was flagged or failed to decode."""
    from cdclake.model.integrity import CORRUPTED, FAILED, MISMATCH, OK, SKIPPED

    try:
        cls = formats.get(format_name)
        options = parse_options(cls, option or [])
        if registry:
            options["registry"] = registry
        fmt = formats.create_decoder(format_name, options)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if not hasattr(fmt, "verify"):
        raise _fail(f"format {format_name} carries no row checksum to verify")
    _require_files(files)
    counts = dict.fromkeys((OK, MISMATCH, CORRUPTED, SKIPPED, FAILED), 0)
    skipped: dict[str, int] = {}
    records = 0
    for batch in _batches(files):
        lines = [line for line in batch if line.record is not None]
        records += len(batch)
        for line in batch:
            if line.record is None:
                counts[FAILED] += 1
                typer.echo(f"{line.path}:{line.line}: failed: {line.error}")
        try:
            checks = fmt.verify([line.record for line in lines])
        except RegistryError as exc:
            raise _fail(f"{format_name}: stopped: {exc}", UNREACHABLE) from None
        for line, check in zip(lines, checks, strict=True):
            counts[check.status] += 1
            if check.status == SKIPPED:
                skipped[check.reason] = skipped.get(check.reason, 0) + 1
            elif check.status != OK:
                row = f"{check.database}.{check.table} key={_json_text(check.key)} commit_ts={check.commit_ts}"
                label = "flagged corrupted" if check.status == CORRUPTED else check.status
                typer.echo(f"{line.path}:{line.line}: {label}: {row if check.table else check.where}: {check.reason}")
    checked = counts[OK] + counts[MISMATCH] + counts[CORRUPTED]
    typer.echo(f"{records} records: {checked} rows checked, {counts[OK]} ok, {counts[MISMATCH]} mismatched, "
               f"{counts[CORRUPTED]} flagged corrupted, {counts[SKIPPED]} skipped, {counts[FAILED]} failed to decode")
    for why, count in sorted(skipped.items(), key=lambda item: -item[1]):
        typer.echo(f"  skipped {count}: {why}")
    if counts[MISMATCH] or counts[CORRUPTED] or counts[FAILED]:
        raise typer.Exit(1)


def _pairs(pairs: list[str] | None) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {pair.split('=')[0]!r}…")  # never echo a secret value
        out[key.strip()] = value
    return out


def _publish(settings: Any, records: list[Record], partitions: int) -> None:
    """``records`` to Kafka with the settings of ``pipeline.kafka_producer``."""
    try:
        topics = pipeline.publish(settings, records, partitions)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    except KafkaSourceError as exc:
        raise _fail(str(exc), UNREACHABLE) from None
    typer.echo(f"produced {_n(len(records), 'record')} to Kafka at {settings.servers}: {', '.join(topics)} "
               f"({partitions} partition{'s' if partitions > 1 else ''} each)", err=True)


@app.command()
def capture(
    kafka_servers: Annotated[str, typer.Option("--kafka", help="Kafka bootstrap servers HOST:PORT[,HOST:PORT…].")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the files (one per topic-partition).")],
    topic: Topics = None,
    topic_pattern: TopicPattern = None,
    max_records: Annotated[int, typer.Option(min=0, help="At most this many records in all (0: all), shared "
                                             "fairly over partitions.")] = 0,
    starting_offsets: StartingOffsets = "earliest",
    kafka_option: KafkaOptionPairs = None,
    kafka_retry_seconds: KafkaRetrySeconds = None,
) -> None:
    """Write Kafka records to captured-records files, up to the end offsets seen at start: for offline replay
    (`cdclake run --input`), debugging and bug reports."""
    def show(done: Any) -> None:  # a Captured (cdclake.sources.kafka)
        typer.echo(f"{done.range}: {_n(done.records, 'record')} → {done.path}", err=True)

    try:
        captured, subscription = pipeline.capture(
            kafka_servers, out, topic, topic_pattern, starting_offsets, _pairs(kafka_option), kafka_retry_seconds,
            max_records or None, progress=show)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    except KafkaSourceError as exc:
        raise _fail(str(exc), _stopping_code(type(exc).__name__)) from None
    total = sum(c.records for c in captured)
    typer.echo(f"captured {_n(total, 'record')} from {_n(len(captured), 'partition')} of {subscription} "
               f"into {out}", err=True)


def _json_text(value: object) -> str:
    import msgspec

    return msgspec.json.encode(value).decode()


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))


@app.command()
def demo(
    workdir: Annotated[Path, typer.Option(help="Where the sample input and the lake are written (replaced).")] = Path(
        "demo-lake"),
    events: Annotated[int, typer.Option(min=10, help="Changes per simulated source database.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the simulated databases.")] = 1,
) -> None:
    """Four change streams (TiCDC Canal-JSON and Open Protocol, Debezium JSON, DTS Avro) → Spark → Delta
    tables, read back with DuckDB and Polars and checked against the sources' final state."""
    from cdclake.cli import demo as D

    if not D.run(workdir.resolve(), events=events, seed=seed, say=typer.echo):
        raise typer.Exit(1)


@app.command("class-archive")
def class_archive(
    events: Annotated[int, typer.Option(min=10, help="Changes per simulated source database of the training run.")
                      ] = 300,
) -> None:
    """Makes local Spark sessions start sooner: runs the demo's pipeline once on small sample data while Java
    lists the classes Spark loads, then archives them (Java class-data sharing, about 200 MB in ~/.cache). Every
    later local session maps the archive: starting Spark took 3.6-3.8 s instead of 6.1-6.7 s here. Run it again
    after upgrading Java, pyspark or cdclake; until then sessions start as they did without it."""
    from cdclake.cli import demo as D

    typer.echo("Running the demo's pipeline on small sample data while the JVM lists the classes it loads…")
    with tempfile.TemporaryDirectory() as tmp:
        def train(_spark: object) -> None:
            if not D.run(Path(tmp, "demo"), events=events, say=lambda _: None):
                raise RuntimeError("the training run's lake differs from its sample data")

        try:
            path = pipeline.build_class_archive(train, say=typer.echo)
        except (OSError, RuntimeError) as exc:  # no cache directory, no Java, a failed training run or dump
            typer.echo(f"cdclake: class-archive: {exc}", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"Local Spark sessions now start from {path} ({path.stat().st_size / 2**20:,.0f} MiB).")


@app.command()
def serve(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on 127.0.0.1.")] = 15002,
    conf: Annotated[list[str] | None, typer.Option(help="Spark setting KEY=VALUE (repeatable).")] = None,
) -> None:
    """Keeps a local Spark running for the runs on this machine (a Spark Connect server on the loopback) until
    Ctrl-C or SIGTERM: `cdclake run --remote sc://localhost:PORT` attaches to it instead of starting a JVM of its
    own, and runs on the code Spark compiled for the runs before. Only this user's runs can attach: the server wants
    a token, which they read from a file that only this user can read."""
    try:
        settings = _pairs(conf)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    stop = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stop.set())

    def until_stopped() -> None:
        while not stop.wait(1):
            pass

    try:
        pipeline.serve(port, settings, until_stopped, say=lambda line: typer.echo(line, err=True))
    except Exception as exc:
        raise _fail(f"serve: {exc}") from None
    typer.echo("cdclake: the Spark Connect server stopped", err=True)


for _info in app.registered_commands:  # every command's help shown as written (see _PlainHelp)
    _info.cls = _Command if _info.cls is TyperCommand else _info.cls


# Commands that only read the lake: they end without C++'s static destructors, one of which (of pyarrow's threads)
# aborted about one `cdclake status` in forty beside a run writing the lake: "terminate called without an active
# exception", exit 134, after all was said.
_EXIT_AT_ONCE = ("status", "dead-letters")


def main() -> None:
    try:
        app()
    except SystemExit as done:
        if len(sys.argv) > 1 and sys.argv[1] in _EXIT_AT_ONCE:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(done.code if isinstance(done.code, int) else 0 if done.code is None else 1)
        raise
