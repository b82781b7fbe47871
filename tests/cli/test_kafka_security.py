"""``cdclake run`` through the shared broker's SASL_PLAINTEXT (PLAIN) and SSL listeners, as production clusters
need: with the right settings it reads; with a wrong password or a CA that did not sign the broker's
certificate it stops at once with a one-line error that says why (it used to wait out the whole retry window,
ten minutes by default, saying only that all broker connections were down)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from cdclake import simulator as workload
from cdclake.simulator.lakecheck import differences as lake_differences
from tests.helpers.kafka_broker import USERS

pytestmark = pytest.mark.kafka

WRONG = "n0t-alices-Pa55"  # a wrong password, distinctive enough to spot in the output


def _sasl(user: str, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": password}


def _options(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--kafka-option", f"{key}={value}")]


@pytest.mark.spark
def test_a_run_reads_through_the_sasl_plain_and_tls_listeners(broker, tmp_path):
    # Debezium JSON, a topic per table: one table's topic is read over SASL, the other's over TLS.
    generated = workload.generate("debezium-json", events=200, tables=2, seed=21)
    prefix = f"secure-{uuid.uuid4().hex[:6]}"
    for record in generated.records:
        record.topic = f"{prefix}.{record.topic}"
    sasl_topic, tls_topic = sorted(broker.publish(generated.records))
    lake = tmp_path / "lake"
    listeners, ca = broker.listeners, broker.certificates.ca
    pipeline = tmp_path / "PIPELINE.toml"
    pipeline.write_text(f"""
lake = "{lake}"

[[source]]
name = "over-sasl"
format = "debezium-json"
kafka = "{listeners['SASL_PLAINTEXT']}"
topics = ["{sasl_topic}"]
[source.kafka_options]
"security.protocol" = "SASL_PLAINTEXT"
"sasl.mechanism" = "PLAIN"
"sasl.username" = "alice"
"sasl.password" = "{USERS['alice']}"

[[source]]
name = "over-tls"
format = "debezium-json"
kafka = "{listeners['SSL']}"
topics = ["{tls_topic}"]
[source.kafka_options]
"security.protocol" = "SSL"
"ssl.ca.location" = "{ca}"
""")
    done = subprocess.run([sys.executable, "-m", "cdclake", "run", str(pipeline)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert USERS["alice"] not in done.stderr + done.stdout
    problems = lake_differences(str(lake), generated.expected, generated.key_names)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("listener, options, why", [
    ("SASL_PLAINTEXT", _sasl("alice", WRONG), "Authentication failed: Invalid username or password"),
    ("SASL_PLAINTEXT", _sasl("mallory", WRONG), "Authentication failed: Invalid username or password"),
    ("SSL", {"security.protocol": "SSL", "ssl.ca.location": "OTHER_CA"}, "certificate verify failed"),
    ("SSL", {"security.protocol": "SSL"}, "certificate verify failed"),  # the system's CAs do not know it either
], ids=["wrong-password", "unknown-user", "untrusted-ca", "no-ca"])
def test_a_refused_login_or_certificate_stops_the_run_at_once_saying_why(broker, tmp_path, listener, options, why):
    options = {k: str(broker.certificates.other_ca) if v == "OTHER_CA" else v for k, v in options.items()}
    topic = broker.topic(1, "refused")
    servers = broker.listeners[listener]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "cdclake", "run", "--format", "debezium-json", "--kafka", servers,
                           "--topic", topic, "--lake", str(tmp_path / "lake"), *_options(options)],
                          capture_output=True, text=True, timeout=120, check=False)
    took = time.monotonic() - started
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 4, done.stderr[-3000:]  # a source that refuses: the README's exit codes
    assert last.startswith(f"cdclake: Kafka at {servers}: ") and why in last, done.stderr[-3000:]
    assert WRONG not in done.stderr + done.stdout
    assert "Spark" not in done.stderr and took < 60, (took, done.stderr[-3000:])
