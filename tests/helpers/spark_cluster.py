"""A Spark standalone cluster for the tests, started by the very commands of the README's "On a cluster" section
(its ``sh`` block): a master and two workers of one core each, from the installed pyspark, on free loopback ports,
each worker with its work directory (where its executors run) and Spark's local directory under the test's
temporary folder. Each process runs in a process group of its own, so that a test can kill one worker with its
executor (:meth:`Cluster.kill_worker`); every wait is bounded, and :meth:`Cluster.stop` kills what is left."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.kafka_broker import free_port

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## On a cluster"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


def _readme_block(language: str, readme: Path = README) -> str:
    """The first ``language`` block of the README's "On a cluster" section."""
    text = readme.read_text()
    start = text.index(f"\n{SECTION}\n")
    end = text.find("\n## ", start + 1)
    block = re.search(rf"^```{language}\n(.*?)^```$", text[start:end if end > 0 else None], re.DOTALL | re.MULTILINE)
    if block is None:
        raise AssertionError(f"README.md's {SECTION!r} has no ```{language} block")
    return block.group(1)


def readme_commands() -> list[str]:
    """The commands of the README's "On a cluster" section (its ``sh`` block), one a line."""
    return [line for line in _readme_block("sh").splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _substituted(line: str, values: dict[str, str]) -> str:
    """``line`` (or lines) with each whole-word occurrence of a key of ``values`` replaced, in one pass."""
    words = "|".join(re.escape(key) for key in sorted(values, key=len, reverse=True))
    return re.sub(rf"(?<![\w/.-])(?:{words})(?![\w.-])", lambda match: values[match.group()], line)


def _children() -> dict[int, list[int]]:
    """Each process's children (Linux: /proc)."""
    found: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
            found.setdefault(parent, []).append(int(stat.parent.name))
    return found


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    children, found, todo = _children(), [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


@dataclass
class Cluster:
    master: str  # spark://127.0.0.1:PORT
    web: str  # the master's web UI, http://127.0.0.1:PORT
    preamble: list[str]  # the README block's `export` lines, with which every command runs
    values: dict[str, str]  # what the README names, as this cluster has it (ports, directories)
    folder: Path
    work_dirs: list[Path]
    processes: list[subprocess.Popen] = field(default_factory=list)  # the master, then the workers

    def environment(self) -> dict[str, str]:
        """This process's environment, with the interpreter's directory first on the PATH (the README's
        ``python`` and ``cdclake`` are those of the environment cdclake is installed in)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CDCLAKE_FAILPOINT", "PYSPARK_", "SPARK_"))}
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
        return env

    def script(self, line: str) -> list[str]:
        """The README's ``line`` (without a closing ``&``), as this cluster runs it: after the block's exports, with
        this cluster's ports and directories."""
        command = _substituted(line.rstrip().removesuffix("&").rstrip(), self.values)
        return ["bash", "-c", "\n".join([*self.preamble, f"exec {command}"])]

    def start(self, line: str, log: Path, **env: str) -> subprocess.Popen:
        with open(log, "wb") as out:
            process = subprocess.Popen(self.script(line), stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, env={**self.environment(), **env},
                                       process_group=0)
        self.processes.append(process)
        return process

    def status(self) -> dict:
        with urllib.request.urlopen(f"{self.web}/json/", timeout=5) as answer:
            return json.load(answer)

    def wait_for_workers(self, count: int, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise AssertionError(f"a cluster process ended (exit {process.returncode}):\n{self.logs()}")
            try:
                last = self.status().get("aliveworkers")
                if last == count:
                    return
            except (OSError, ValueError) as exc:  # not listening yet, or its UI still starting
                last = exc
            time.sleep(0.5)
        raise AssertionError(f"{count} workers not alive after {timeout:.0f} s ({last}):\n{self.logs()}")

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-tail:]}"
                         for log in sorted(self.folder.glob("*.log")))

    def executor_logs(self, worker: int) -> list[Path]:
        """The stderr files of the executors worker ``worker`` (0 or 1) ran: ``WORKDIR/APP/EXECUTOR/stderr``."""
        return sorted(self.work_dirs[worker].glob("app-*/*/stderr"))

    def kill_worker(self, worker: int) -> None:
        """SIGKILL to worker ``worker``'s process group: the worker and the executors it started."""
        process = self.processes[1 + worker]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(STOP_TIMEOUT_S)

    def stop(self) -> None:
        """Ends every process of the cluster: SIGTERM to each one's group and to the groups of their descendants
        (pyspark's daemon makes a group of its own), SIGKILL to those still there after a while."""
        groups = set()
        for process in self.processes:
            for pid in _tree(process.pid):
                with contextlib.suppress(OSError):
                    groups.add(os.getpgid(pid))
        groups.discard(os.getpgid(0))
        for how in (signal.SIGTERM, signal.SIGKILL):  # SIGKILL: whatever outlived the SIGTERM
            for group in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, how)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for process in self.processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(max(0.1, deadline - time.monotonic()))


def start_cluster(folder: Path) -> Cluster:
    """The README's master and workers, running, on free ports; ``PIPELINE.toml`` in the README is
    ``folder/pipeline.toml``."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = readme_commands()
    preamble = [line for line in lines if line.startswith("export ")]
    background = [line for line in lines if line.rstrip().endswith("&")]
    work_dirs = [folder / f"worker-{n}" for n in (1, 2)]
    ports = {name: str(free_port()) for name in ("7077", "8080", "8081", "8082")}
    values = {**ports, "/tmp/spark-worker-1": str(work_dirs[0]), "/tmp/spark-worker-2": str(work_dirs[1]),
              "PIPELINE.toml": str(folder / "pipeline.toml")}
    text = "\n".join(lines)
    missing = [name for name in values if not re.search(rf"(?<![\w/.-]){re.escape(name)}(?![\w.-])", text)]
    assert not missing, f"README.md's {SECTION!r} no longer names {missing}: update tests/helpers/spark_cluster.py"
    assert len(background) == 3 and "deploy.master.Master" in background[0], background
    cluster = Cluster(f"spark://127.0.0.1:{ports['7077']}", f"http://127.0.0.1:{ports['8080']}", preamble, values,
                      folder, work_dirs)
    try:
        cluster.start(background[0], folder / "master.log")
        for n, (line, work_dir) in enumerate(zip(background[1:], work_dirs, strict=True), 1):
            (work_dir / "local").mkdir(parents=True)
            # Spark's block and shuffle files under the test's folder too, not the temporary directory.
            cluster.start(line, folder / f"worker-{n}.log", SPARK_LOCAL_DIRS=str(work_dir / "local"))
        cluster.wait_for_workers(2)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def readme_pipeline(cluster: Cluster) -> str:
    """The pipeline file's ``[spark]`` tables that the README's "On a cluster" section shows (its ``toml`` block),
    naming this cluster's master."""
    return _substituted(_readme_block("toml"), cluster.values)


def run_command() -> str:
    """The README block's last line, which runs the pipeline."""
    last = readme_commands()[-1]
    assert last.startswith("cdclake run "), last
    return last
