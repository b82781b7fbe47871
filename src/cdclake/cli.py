"""``cdclake``: the command line."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from cdclake import formats
from cdclake.events import to_json
from cdclake.formats.base import Failure, parse_options
from cdclake.records import FileLine, Record, read_file

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Database change streams from Kafka into correct Delta Lake tables, on Spark.")

BATCH = 10_000

FormatName = Annotated[str, typer.Option("--format", "-f", help="Wire format: " + ", ".join(formats.names()))]
OptionPairs = Annotated[list[str] | None, typer.Option(
    "--option", "-o", help="Format option KEY=VALUE (repeatable); `cdclake formats` lists them.")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"cdclake: {message}", err=True)
    return typer.Exit(2)


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
        fmt = formats.create(format_name, parse_options(formats.get(format_name), option or []))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    for path in files:
        if not path.is_file():
            raise _fail(f"{path}: no such file")
    out = sys.stdout.buffer
    records = events = failed = skipped = 0
    for batch in _batches(files):
        where: dict[int, FileLine] = {}
        good: list[Record] = []
        for line in batch:
            records += 1
            if line.record is None:
                failed += 1
                typer.echo(f"{line.path}:{line.line}: {line.error}", err=True)
                if strict:
                    raise typer.Exit(1)
                continue
            where[id(line.record)] = line
            good.append(line.record)
        result = fmt.decode(good)
        for event in result.events:
            out.write(to_json(event) + b"\n")
        events += len(result.events)
        skipped += result.skipped
        failed += len(result.failures)
        for failure in result.failures:
            _report(failure, where[id(failure.record)])
            if strict:
                out.flush()
                raise typer.Exit(1)
    out.flush()
    typer.echo(f"{records} records: {events} events, {skipped} skipped, {failed} failed", err=True)
    if failed:
        raise typer.Exit(1)


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


def main() -> None:
    app()
