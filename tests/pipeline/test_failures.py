"""What a failure means to the user (``pipeline/failures.py``): found in the text Spark hands back; through the CLI
in ``tests/pipeline/test_config.py``."""

from __future__ import annotations

from cdclake.pipeline.failures import file_system_problem, stopping_error


def test_a_refused_write_names_the_path_before_the_reason():
    failure = RuntimeError("Unable to open file /d/shop/t/part-1.parquet: No space left on device (os error 28)")
    assert file_system_problem(failure) == "/d/shop/t/part-1.parquet: No space left on device"
    assert file_system_problem(RuntimeError("Permission denied")) == "a file: Permission denied"
    assert file_system_problem(RuntimeError("division by zero")) is None


def test_an_error_that_stops_a_run_by_design_is_found_in_a_traceback():
    text = ("[STREAM_FAILED] …\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
            "cdclake.errors.RegistryError: registry at http://r:8081 is unreachable \n=== Streaming Query ===")
    assert stopping_error(RuntimeError(text)) == ("RegistryError", "registry at http://r:8081 is unreachable")
    assert stopping_error(RuntimeError("DataLoss: offsets 3 to 9 are gone")) == ("DataLoss", "offsets 3 to 9 are gone")
    assert stopping_error(RuntimeError("ValueError: bad")) is None
