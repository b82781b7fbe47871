"""cdclake: database change streams into Delta Lake tables, on Spark.

Packages, lowest layer first; each imports only from its own layer or the ones before it:
``errors``, ``support``, ``native`` → ``model`` → ``formats``, ``sources`` → ``lake`` → ``spark`` → ``pipeline``
(the application layer: :mod:`cdclake.pipeline`) → ``simulator`` → ``cli``.
"""
