"""The command line as a user meets it: help, version, exit codes, conflicting flags, paths that are not lakes."""

from __future__ import annotations

import typer.main
import typer.rich_utils
from typer.testing import CliRunner

from cdclake.cli import app


def test_every_command_renders_its_help_with_each_options_help_and_default(monkeypatch):
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 1000)  # each option on one line
    commands = typer.main.get_command(app).commands
    assert len(commands) >= 12
    for name, command in commands.items():
        result = CliRunner().invoke(app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)  # a MarkupError crash exits 1
        lines = result.output.splitlines()
        for param in command.params:
            if param.name == "help":
                continue
            row = " ".join(next(line for line in lines if {param.opts[0], f"{param.opts[0]}..."}
                                & set(line.strip("│ ").split()[:4])).split())
            # Escaped for rich, shown as written (e.g. "[/REGISTRY]", "[default: 600]").
            assert " ".join(param.help.replace("\\[", "[").split()) in row, (name, param.name, row)
            if param.default not in (None, "", []) and param.show_default is not False:
                shown = (param.opts[0] if param.default else param.secondary_opts[0]).lstrip("-") \
                    if getattr(param, "is_bool_flag", False) and param.secondary_opts else str(param.default)
                assert f"[default: {shown}]" in row, (name, param.name, row)


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("cdclake 0.")
