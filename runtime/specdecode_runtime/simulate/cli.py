"""``specdecode-runtime simulate``: serve a scenario over HTTP, or run it in-process with ``--offline``.

Bad input (scenario file, step values, flags) prints what is wrong and which values are allowed, and exits 2."""

from __future__ import annotations

import argparse
import json
import socket
import sys

from ..contract.capabilities import autotune_steps
from ..contract.cli_common import float_in, int_in, positive_float
from ..contract.config import TOKEN_PATH
from ..contract.http_limits import SERVER_LIMITS
from ..contract.scenario import MAX_STEPS, ScenarioError, allowed_draft_tps, load_scenario
from ..contract.step_table import StepTable, StepTableError

MAX_SPEED = 10_000.0  # simulated seconds per wall second; beyond it a request would wait on a long simulation
DEFAULT_CANDIDATES = autotune_steps("Live", 1, 7, 3)[1]  # the tiers a real Live pod with the CRD defaults serves


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(not 0 <= v <= MAX_STEPS for v in values):
        raise argparse.ArgumentTypeError(f"expected step counts within 0..{MAX_STEPS}, got {text!r}")
    return values


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--scenario", required=True, help="scenario YAML (docs/scenarios.md)")
    p.add_argument("--port", type=int, default=30000, help="HTTP port (default 30000; 0: any free port, printed)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument(
        "--speed", type=float_in(0, MAX_SPEED), default=1.0, help="simulated seconds per wall second (default 1)"
    )
    p.add_argument(
        "--token-file",
        default=TOKEN_PATH,
        help=f"bearer token for /specdecode/v1/steps (default {TOKEN_PATH}; missing/empty -> every request 401)",
    )
    p.add_argument(
        "--candidates",
        type=_int_list,
        default=DEFAULT_CANDIDATES,
        help=f"captured step counts the step table may use (default {','.join(map(str, DEFAULT_CANDIDATES))})",
    )
    p.add_argument(
        "--steps",
        type=int_in(0, MAX_STEPS),
        default=None,
        help="initial steps for every batch size (default: 3 if a "
        "candidate, else the largest candidate; 0 = no speculation)",
    )
    p.add_argument(
        "--draft-tp", type=int_in(1, 1024), default=None, help="simulate the draft on this many ranks (needs draftTp)"
    )
    p.add_argument("--seed", type=int_in(0, 2**63 - 1), default=None, help="override the scenario's seed")
    p.add_argument("--offline", action="store_true", help="no server: run the scenario in-process and print JSON")
    p.add_argument(
        "--duration", type=positive_float, default=None, help="--offline: simulated seconds (default: scenario)"
    )
    p.set_defaults(func=run)
    return p


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers ``simulate`` on the ``specdecode-runtime`` CLI; the parsed args carry ``func`` (returns an exit
    code)."""
    return configure(
        subparsers.add_parser("simulate", help="simulated runtime (all numbers simulated)", description=__doc__)
    )


def _fail(msg: str) -> int:
    print(f"specdecode-runtime simulate: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as err:
        return _fail(str(err))
    if args.draft_tp is not None and args.draft_tp not in allowed_draft_tps(scenario):
        return _fail(
            f"--draft-tp {args.draft_tp} is not described by the scenario's draftTp block; allowed: "
            f"{allowed_draft_tps(scenario) or 'none (no draftTp block)'}"
        )
    if args.duration is not None and args.duration > scenario.max_simulated_seconds():
        return _fail(
            f"--duration {args.duration:g} is too long for this scenario: at most "
            f"{scenario.max_simulated_seconds():.0f} simulated seconds ({scenario.plain_step_ms():g} ms per "
            "decode step)"
        )
    candidates = sorted(set(args.candidates))
    steps = args.steps if args.steps is not None else (3 if 3 in candidates else max(candidates))
    if steps < 0:
        return _fail(f"--steps must be >= 0, got {steps}")
    table = StepTable.single(steps)
    try:  # offline too: --candidates says which step counts the simulated pod has captured
        table.check_candidates(candidates)
    except StepTableError:
        return _fail(f"--steps {steps} is not among --candidates; allowed: {candidates}")
    if not 0 <= args.port < 65536:
        return _fail(f"--port must be within 0..65535 (0: any free port), got {args.port}")

    # lazy: `simulate --help` and completion skip the simulator engine and its numpy (0.35 s)
    from .engine import SimEngine

    engine = SimEngine(scenario, seed=args.seed, draft_tp=args.draft_tp)
    engine.set_candidates(candidates)
    engine.set_step_table(table)
    if args.offline:
        engine.advance(args.duration or scenario.duration)
        print(
            json.dumps(
                {
                    "simulated": True,
                    "scenario": scenario.name,
                    "steps": steps,
                    "draftTp": args.draft_tp,
                    "simSeconds": round(engine.now, 3),
                    "tokens": engine.tokens_total,
                    "cycles": engine.cycles_total,
                    "tokensPerSecond": round(engine.throughput(), 2),
                }
            )
        )
        return 0

    from aiohttp import web

    from .server import create_app

    try:  # bound before anything says "running": a busy port is the user's to fix, not a traceback
        sock = socket.create_server((args.host, args.port))
    except OSError as err:
        return _fail(f"--host {args.host} --port {args.port}: cannot listen: {err.strerror or err}")
    except (UnicodeError, ValueError) as err:
        return _fail(f"--host {args.host!r}: {err}")
    app = create_app(engine, candidates, args.token_file, speed=args.speed)
    print(
        f"simulated runtime (SIMULATED numbers) for scenario {scenario.name!r} on "
        f"http://{args.host}:{sock.getsockname()[1]} at {args.speed}x",
        file=sys.stderr,
        flush=True,
    )
    web.run_app(app, sock=sock, print=None, **SERVER_LIMITS)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = configure(argparse.ArgumentParser(prog="specdecode-runtime simulate", description=__doc__))
    return run(parser.parse_args(argv))
