"""The simulated runtime over HTTP: SGLang's health endpoints, ``/metrics`` with the contract (every series labelled
``simulated="true"``) and the step-control endpoint, on a simulated clock that a background task advances at
``speed`` simulated seconds per wall second. The demo starts several of these on 127.0.0.1 as "simulated pods"."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Sequence

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from ..contract.http_limits import MAX_BODY_BYTES
from ..contract.step_table import StepTable
from ..control import add_step_routes
from .engine import SimEngine

ENGINE_KEY = web.AppKey("engine", SimEngine)


class EngineSink:
    """Adapts the engine to the step endpoint: a PUT takes effect from the next simulated cycle."""

    def __init__(self, engine: SimEngine, candidates: Sequence[int]) -> None:
        self.engine = engine
        engine.set_candidates(candidates)

    @property
    def candidates(self) -> list[int]:
        """The tiers the pod serves now: a restarted pod (Rollout) may have captured others."""
        return list(self.engine.candidates)

    def current_table(self) -> StepTable:
        return self.engine.table

    def apply_table(self, table: StepTable) -> dict[str, Any]:
        self.engine.set_step_table(table)
        return {"appliedAtSimSeconds": round(self.engine.now, 6), "simulated": True}


def create_app(
    engine: SimEngine,
    candidates: Sequence[int],
    token_file: str | None,
    speed: float = 1.0,
    tick: float = 0.05,
    model: str = "simulated",
) -> web.Application:
    if speed <= 0:
        raise ValueError(f"speed must be > 0 (simulated seconds per wall second), got {speed}")
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[ENGINE_KEY] = engine
    add_step_routes(app, EngineSink(engine, candidates), token_file)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    async def model_info(_: web.Request) -> web.Response:
        return web.json_response(
            {"model_path": model, "is_generation": True, "simulated": True, "scenario": engine.scenario.name}
        )

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=engine.metrics_text().encode(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def sim_status(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "simulated": True,
                "scenario": engine.scenario.name,
                "simSeconds": engine.now,
                "phase": engine.phase_index,
                "phaseName": engine.phase.name,
                "finished": engine.finished,
                "tokensTotal": engine.tokens_total,
                "cycles": engine.cycles_total,
                "speed": speed,
            }
        )

    async def clock(app: web.Application):
        async def run() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(tick)
                now = time.monotonic()
                engine.advance((now - last) * speed)
                last = now

        task = asyncio.create_task(run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    app.router.add_get("/model_info", model_info)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/specdecode/v1/sim", sim_status)
    app.cleanup_ctx.append(clock)
    return app
