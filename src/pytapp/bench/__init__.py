"""Benchmarks: cases, harness, peers and reports (``pytapp bench``)."""
