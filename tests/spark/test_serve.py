"""`cdclake serve`: a Spark Connect server on this machine that runs attach to (`--remote sc://localhost:PORT`)
instead of starting a JVM each. Only with its token, which a file readable by this user alone holds; the server's
output never shows it; SIGTERM stops the server and removes the file."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from cdclake import simulator as workload
from cdclake.simulator.lakecheck import differences
from tests.helpers.kafka_broker import free_port

pytestmark = pytest.mark.spark


def cdclake(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cdclake", *arguments], capture_output=True, text=True, env=env,
                          timeout=900, check=False)


def test_runs_attach_to_the_server_of_cdclake_serve_with_its_token_alone(tmp_path):
    generated = workload.generate("canal-json", events=800, tables=2, seed=5, options={"flavour": "tidb"},
                                  partitions=2)
    workload.write_generated(tmp_path / "data", generated)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # where the server leaves its address
    port = free_port()
    address = tmp_path / "cache" / f"cdclake-{os.getuid()}" / f"spark-connect-{port}"
    errors = (tmp_path / "serve.err").open("w+")
    server = subprocess.Popen([sys.executable, "-m", "cdclake", "serve", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=errors)
    try:
        for _ in range(600):
            if address.exists() or server.poll() is not None:
                break
            time.sleep(0.5)
        assert address.exists(), (tmp_path / "serve.err").read_text()[-3000:]
        assert stat.S_IMODE(address.stat().st_mode) == 0o600
        token = address.read_text().strip().rpartition("token=")[2]
        assert len(token) >= 32

        lake = tmp_path / "lake"
        flags = ["--format", "canal-json", "--option", "flavour=tidb", "--input", str(tmp_path / "data" / "records"),
                 "--lake", str(lake)]
        first = cdclake("run", *flags, "--remote", f"sc://localhost:{port}", env=env)
        assert first.returncode == 0, first.stderr[-3000:]
        assert f"done: 1 batch, {generated.manifest['records']:,} records" in first.stderr
        problems = differences(str(lake), generated.expected, generated.key_names)
        assert not problems, "\n".join(problems)
        # A second run on the same server: nothing new to read.
        again = cdclake("run", *flags, "--remote", f"sc://localhost:{port}", env=env)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "done: 0 batches" in again.stderr

        stranger = cdclake("run", *flags, "--remote", f"sc://127.0.0.1:{port}", env=env)
        assert stranger.returncode == 2
        assert stranger.stderr.strip().splitlines()[-1] == (
            f"cdclake: the Spark Connect server at 127.0.0.1:{port} refused the session: "
            "No authentication token provided")
        nobody = cdclake("run", *flags, "--remote", f"sc://localhost:{free_port()}", env=env)
        assert nobody.returncode == 2
        assert "no Spark Connect server answers at localhost:" in nobody.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=120)
    errors.seek(0)
    said = errors.read()
    assert code == 0, said[-3000:]
    assert "the Spark Connect server stopped" in said
    assert token not in said
    assert not address.exists()


def test_serve_on_a_port_that_is_taken_says_so_in_a_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cdclake("serve", "--port", str(port), env=dict(os.environ))
    assert done.returncode == 2
    assert done.stderr.strip() == f"cdclake: serve: port {port} of 127.0.0.1 is taken (Address already in use): " \
                                  "--port chooses another"
