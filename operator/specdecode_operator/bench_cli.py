"""``specdecode bench``: benchmarks that users can run against their own scenario files."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="benchmarks (simulated unless stated otherwise)")
    sub = p.add_subparsers(dest="bench", metavar="BENCHMARK")
    sub.required = True
    from .tuner import bench_tuner

    bench_tuner.add_parser(sub)
    return p
