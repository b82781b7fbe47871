"""Compiled fast paths (C, built at install time). Each has a pure-Python twin with the same results, which
runs wherever the extension could not be built (``optional``); the tests hold the two to each other."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("cdclake._canal", ["src/cdclake/_canal.c"], optional=True, extra_compile_args=["-O3"]),
    Extension("cdclake._records", ["src/cdclake/_records.c"], optional=True, extra_compile_args=["-O3"]),
])
