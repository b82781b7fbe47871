"""``cdclake run`` as a user meets it, a real process each: what it says and how it exits when records fail, when
there is nothing to read, and when a signal reaches its whole process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdclake.cli.main import app
from cdclake.model.records import Record, write_records

pytestmark = pytest.mark.spark


def _cdclake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cdclake", *args], capture_output=True, text=True, timeout=600,
                          check=False)


def _generate(out: Path, fmt: str) -> Path:
    done = CliRunner().invoke(app, ["generate", "--format", fmt, "--out", str(out), "--events", "30"])
    assert done.exit_code == 0, done.output
    return out / "records"


def test_a_run_whose_records_all_fail_exits_1_and_names_the_format_they_look_like(tmp_path):
    records = _generate(tmp_path / "gen", "debezium-json")
    done = _cdclake("run", "--format", "canal-json", "--input", str(records), "--lake", str(tmp_path / "lake"))
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert "hint: none of the records decoded as canal-json; they look like debezium-json (--format debezium-json)" \
        in lines, done.stderr
    assert lines[-1] == ("cdclake: 32 of 37 records (86%) could not be decoded, more than max_dead_letter_ratio = 0 "
                         "allows"), done.stderr
    # Told to tolerate them: exit 0.
    again = _cdclake("run", "--format", "canal-json", "--input", str(records), "--lake", str(tmp_path / "lake2"),
                     "--max-dead-letter-ratio", "1")
    assert again.returncode == 0, again.stderr


def test_an_empty_input_is_a_warning_and_on_error_fail_stops_after_the_batch(tmp_path):
    (tmp_path / "empty").mkdir()
    lake = tmp_path / "lake"
    # Another run holds the lake (its batch, say): the run says whose turn it waits for.
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom cdclake.lake.lock import "
                               f"one_batch_at_a_time\nwith one_batch_at_a_time({str(lake)!r}):\n"
                               "    print('held', flush=True)\n    sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    with subprocess.Popen([sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input",
                           str(tmp_path / "empty"), "--lake", str(lake)], stderr=subprocess.PIPE, text=True) as run:
        assert run.stderr is not None
        watchdog = threading.Timer(400, run.kill)
        watchdog.start()
        said = []
        for line in run.stderr:
            said.append(line)
            if "waiting for the run holding" in line:
                break
        holder.communicate("")  # its batch ends
        said.append(run.stderr.read())
        watchdog.cancel()
        assert run.wait(timeout=60) == 0, "".join(said)
    output = "".join(said)
    assert f"waiting for the run holding lake {lake} (pid {holder.pid}, host {socket.gethostname()}) to finish " \
           "its batch" in output, output
    assert output.splitlines()[-1] == f"warning: {tmp_path / 'empty'}: no records in it", output

    good = _generate(tmp_path / "gen", "canal-json")
    (tmp_path / "in").mkdir()
    lines = [line for path in sorted(good.iterdir()) for line in path.read_text().splitlines()]
    (tmp_path / "in" / "1.jsonl").write_text("\n".join(lines[:10]) + "\n")
    write_records(tmp_path / "in" / "2.jsonl", [Record(value=b"not json", topic="cdc", offset=i) for i in range(3)])
    (tmp_path / "in" / "3.jsonl").write_text("\n".join(lines[10:]) + "\n")
    pipeline_file = tmp_path / "p.toml"
    pipeline_file.write_text(f'name = "p"\nlake = "{tmp_path / "lake"}"\non_error = "fail"\n\n[[source]]\n'
                             f'format = "canal-json"\ninput = "{tmp_path / "in"}"\nmax_records_per_batch = 10\n')
    failed = _cdclake("run", str(pipeline_file))
    assert failed.returncode == 1, failed.stderr
    assert failed.stderr.splitlines()[-1].startswith(
        "cdclake: stopped: batch 1 [source1] had 3 records that failed to decode (on_error = fail)"), failed.stderr
    assert "batch 2 " not in failed.stderr, failed.stderr  # the records after the failed batch are left to the next run


def test_sigint_to_a_following_run_and_then_its_process_group_stops_it_cleanly(tmp_path):
    # `timeout -s INT` sends the signal to the run and then to its process group, the run among it: one signal,
    # delivered twice. Before, the second delivery counted as a second Ctrl-C: `cdclake: interrupted`, exit 130.
    records = _generate(tmp_path / "gen", "canal-json")
    with subprocess.Popen([sys.executable, "-m", "cdclake", "run", "--format", "canal-json", "--input", str(records),
                           "--lake", str(tmp_path / "lake"), "--follow"],
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as run:
        assert run.stderr is not None
        watchdog = threading.Timer(400, run.kill)
        watchdog.start()
        lines = []
        for line in run.stderr:
            lines.append(line)
            if " batch 0 " in f" {line}":
                break
        os.kill(run.pid, signal.SIGINT)
        time.sleep(0.2)  # timeout's two sends are microseconds apart; apart enough here to be two signals for sure
        os.killpg(run.pid, signal.SIGINT)
        rest = run.stderr.read()
        watchdog.cancel()
        assert run.wait(timeout=120) == 0, "".join(lines) + rest
    assert "Traceback" not in rest and "interrupted" not in rest, rest
    assert rest.strip().splitlines()[-1].startswith("stopped: 1 batch, 31 records"), rest
