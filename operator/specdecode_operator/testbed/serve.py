"""``python -m specdecode_operator.testbed.serve``: the API emulator as a process (benchmarks keep its memory and
CPU apart from the operator's). Prints the URL on the first line of stdout, serves until stdin closes."""

from __future__ import annotations

import argparse
import sys

from .runner import EmulatorServer, standard_emulator


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-admission", action="store_true")
    parser.add_argument("--keep-history", action="store_true")
    args = parser.parse_args()
    with EmulatorServer(standard_emulator(admission=not args.no_admission, keep_history=args.keep_history)) as srv:
        print(srv.url, flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
