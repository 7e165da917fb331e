"""The benchmarks, each a module run from the repository's root: ``python -m bench.NAME`` (docs/benchmarks.md)."""
