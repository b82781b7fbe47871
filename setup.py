"""Compiled fast paths (C, built at install time). Each has a pure-Python twin with the same results, which
runs wherever the extension could not be built (``optional``); the tests hold the two to each other. The
extensions share ``native/common.h`` (a byte buffer and a JSON scanner), listed in ``depends`` so that a
change to it rebuilds them."""

from setuptools import Extension, setup

_COMMON = ["src/cdclake/native/common.h"]


def _extension(name: str) -> Extension:
    return Extension(f"cdclake.native.{name}", [f"src/cdclake/native/{name}.c"], depends=_COMMON, optional=True,
                     extra_compile_args=["-O3"])


setup(ext_modules=[_extension("_canal"), _extension("_images"), _extension("_records")])
