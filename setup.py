"""Compiled fast paths (C, built at install time). Each has a pure-Python twin with the same results, which
runs wherever the extension could not be built (``optional``); the tests hold the two to each other."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("cdclake.native._canal", ["src/cdclake/native/_canal.c"], optional=True, extra_compile_args=["-O3"]),
    Extension("cdclake.native._records", ["src/cdclake/native/_records.c"], optional=True, extra_compile_args=["-O3"]),
])
