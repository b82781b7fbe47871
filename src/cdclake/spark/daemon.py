"""Spark's Python daemon (``pyspark.daemon``) for local sessions, without a traceback for each worker whose socket
the JVM has closed.

Spark stops the Python workers that sat idle for a minute by closing their sockets, and it closes a cancelled task's
socket too. Each such worker then fails to flush its output and prints a ``BrokenPipeError`` traceback, so a
pipeline that follows its input would print some after every quiet minute. The JVM already
knows why it closed the socket, and a task's real failures reach it through the socket, so the worker just ends.

cdclake's launcher of local sessions' Python processes (see :func:`cdclake.spark.session.worker_python`) runs it
wherever Spark asks for ``python -m pyspark.daemon <worker module>``: for the data sources' helpers Spark names that
module itself, whatever ``spark.python.daemon.module`` says. It imports no more than ``pyspark.daemon`` does: the
daemon must start no thread before it forks its workers.
"""

from __future__ import annotations

import socket

import pyspark.daemon as spark_daemon

_spark_worker = spark_daemon.worker


def worker(sock: socket.socket, authenticated: bool) -> int:
    try:
        return _spark_worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1  # a worker whose code is not 0 is not reused: the daemon's child exits


spark_daemon.worker = worker

if __name__ == "__main__":
    spark_daemon.manager()
