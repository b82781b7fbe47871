"""The Delta sink provides every method of the sink interface the pipeline is written against, with the same
parameters (a Spark-MERGE sink on a cluster implements the same interface)."""

from __future__ import annotations

import inspect

from cdclake.lake.delta import DeltaSink
from cdclake.lake.sink import Sink


def test_delta_sink_has_every_method_of_the_interface_with_the_same_parameters():
    wanted = {name: member for name, member in vars(Sink).items()
              if callable(member) and not name.startswith("_")}
    assert len(wanted) >= 15
    for name, member in wanted.items():
        implementation = getattr(DeltaSink, name, None)
        assert implementation is not None, f"DeltaSink lacks {name}"
        assert list(inspect.signature(implementation).parameters) == list(inspect.signature(member).parameters), name
