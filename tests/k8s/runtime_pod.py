"""A runtime pod in its own process, for API servers without a kubelet: the simulated runtime (the app of
``specdecode-runtime simulate``) on one loopback address, serving the ports of the pod's runtime.yaml (``http`` for
/metrics, ``control`` for the step endpoint), with the step endpoint configured by the process environment exactly
as the real runtime's is (``SPECDECODE_CONTROL_*``: ServiceAccount tokens checked against the issuer's keys).

Every request is logged to stdout as ``METHOD PATH STATUS`` so that a test can see what the operator sent and what
the runtime answered.

    python -m tests.k8s.runtime_pod --ip 127.0.0.9 --config runtime.yaml --scenario s.yaml --speed 10 --token-file F
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pathlib
import sys

from aiohttp import web

from specdecode_runtime.contract.capabilities import step_candidates
from specdecode_runtime.contract.config import RuntimeConfig
from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.contract.step_table import StepTable
from specdecode_runtime.simulate.engine import SimEngine
from specdecode_runtime.simulate.server import create_app


async def serve(args: argparse.Namespace) -> None:
    from specdecode_runtime.launch import METRICS_DIR_ENV

    if os.environ.get(METRICS_DIR_ENV):  # made by the real runtime's launcher before anything imports the client
        pathlib.Path(os.environ[METRICS_DIR_ENV]).mkdir(parents=True, exist_ok=True)
    cfg = RuntimeConfig.from_yaml(pathlib.Path(args.config).read_text())
    engine = SimEngine(load_scenario(args.scenario), seed=0, draft_tp=cfg.draft.tensor_parallel_size)
    app = create_app(engine, step_candidates(cfg), args.token_file, speed=args.speed, model=cfg.target.model)
    engine.set_step_table(StepTable.single(cfg.speculative.num_steps))
    runner = web.AppRunner(app, access_log=logging.getLogger("aiohttp.access"), access_log_format="%r %s")
    await runner.setup()
    for port in sorted({cfg.server.port, cfg.server.control_port}):
        await web.TCPSite(runner, args.ip, port).start()
    print(f"serving on {args.ip}:{cfg.server.port} and :{cfg.server.control_port}", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.k8s.runtime_pod")
    p.add_argument("--ip", required=True)
    p.add_argument("--config", required=True, help="the pod's runtime.yaml (its ConfigMap's data)")
    p.add_argument("--scenario", required=True)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--token-file", required=True, help="the shared control token's path (missing: none accepted)")
    args = p.parse_args(argv)
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s", force=True)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
