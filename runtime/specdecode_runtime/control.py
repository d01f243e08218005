"""Live step control: the step table's HTTP endpoint and the rank-0 -> all-ranks control message (the table itself
is :mod:`specdecode_runtime.contract.step_table`); the draft endpoint, whose swaps travel in the same message
(:mod:`specdecode_runtime.draft_swap`).

A step change is only safe if (a) the step count was captured at startup (CUDA graphs and buffers exist for it)
and (b) every TP rank switches at the same scheduler iteration; otherwise ranks run different graphs and the
collectives deadlock or mix shapes. The endpoint enforces (a) with a 422 naming the allowed set;
``StepControlChannel`` enforces (b) by stamping each table with the iteration it applies at.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import logging
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence

from .contract.draft_swap import DRAFT_PATH, DraftRequestError, SwapBusy, parse_draft_request
from .contract.http_limits import MAX_BODY_BYTES, BodyError, read_json
from .contract.input_files import InputError, read_text
from .contract.step_table import MAX_TABLE_ENTRIES, STEPS_PATH, StepTable, StepTableError, parse_step_table

log = logging.getLogger(__name__)

MAX_TOKEN_BYTES = 4096  # a Secret's token is 64 hex characters
# What a refused caller is told; why is logged only.
UNAUTHORIZED = (
    "missing or invalid bearer token (Authorization: Bearer <token from the mounted Secret, or the operator's "
    "ServiceAccount token>)"
)
FORBIDDEN = "this caller may not change speculative steps"
FORBIDDEN_DRAFT = "this caller may not change the draft"
UNAVAILABLE = "caller tokens cannot be verified now; retry later"
DRAFT_WAIT_S = 900.0  # a POST waits this long for its swap's outcome (a checkpoint read on every rank, then the copy)


# ------------------------------------------------------------------ HTTP endpoint
class StepTableSink(Protocol):
    """What the endpoint drives: the simulator's engine, or the real runtime's StepControlChannel."""

    @property
    def candidates(self) -> Sequence[int]: ...  # the tiers served now (read only: a restarted pod may serve others)

    def current_table(self) -> StepTable: ...

    def apply_table(self, table: StepTable) -> Any: ...  # may be a coroutine; its result is returned as "status"


class TokenFile:
    """The bearer token from a mounted Secret, re-read when the file changes (Secrets rotate in place). A missing or
    empty file means no token, and then every request is refused: an unauthenticated knob that reshapes GPU work
    must never be open by accident."""

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[float, int] | None = None
        self._token = ""

    def token(self) -> str:
        if self.path is None:
            return ""
        try:
            st = self.path.stat()
        except OSError:
            self._stamp, self._token = None, ""
            return ""
        stamp = (st.st_mtime, st.st_size)
        if stamp != self._stamp:
            try:  # bounded and UTF-8 like every input file; an unreadable token refuses every request
                self._token = read_text(str(self.path), max_bytes=MAX_TOKEN_BYTES).strip()
            except InputError as err:
                log.warning("control token unusable, every request is refused: %s", err)
                self._token = ""
            self._stamp = stamp
        return self._token

    def authorized(self, header: str | None) -> bool:
        expected = self.token()
        if not expected or not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), expected.encode())


def _default_verifier(verifier):
    """The ``verifier`` given, else the one the pod's ``SPECDECODE_CONTROL_*`` environment configures, if any."""
    if verifier is None and os.environ.get("SPECDECODE_CONTROL_ISSUER", "").strip():
        from . import sa_token_auth  # PyJWT: needed only where ServiceAccount tokens are accepted

        settings = sa_token_auth.settings_from_env()
        if settings is not None:
            verifier = sa_token_auth.ServiceAccountVerifier(settings)
    return verifier


def _refusal_check(tokens: TokenFile, verifier, forbidden: str = FORBIDDEN):
    """``async refusal(request)``: None when the caller may use the endpoint, else the 401/403/503 answer. The
    answer says no more than its status (no issuer, audience or allowed caller); the reason is logged."""
    from aiohttp import web

    def _unauthorized() -> web.Response:
        return web.json_response(
            {"error": UNAUTHORIZED}, status=401, headers={"WWW-Authenticate": 'Bearer realm="specdecode"'}
        )

    async def _refusal(request: web.Request) -> web.Response | None:
        header = request.headers.get("Authorization")
        if tokens.authorized(header):
            return None
        if verifier is None or not header or not header.startswith("Bearer "):
            return _unauthorized()
        from .sa_token_auth import Refused

        try:
            await verifier.verify(header[len("Bearer ") :].strip())
        except Refused as err:
            log.info("control refused (%d): %s", err.status, err.message)
            if err.status == 403:
                return web.json_response({"error": forbidden}, status=403)
            if err.status == 503:
                return web.json_response({"error": UNAVAILABLE}, status=503, headers={"Retry-After": "5"})
            return _unauthorized()
        except Exception:  # a verifier defect is still no reason to answer 500 or to let the caller in
            log.exception("control: token verification failed")
            return _unauthorized()
        return None

    return _refusal


def add_step_routes(app, sink: StepTableSink, token_file: str | os.PathLike | None, verifier=None) -> None:
    """Mount GET/PUT /specdecode/v1/steps on an aiohttp application.

    A caller presents either the shared token of the mounted Secret, or a ServiceAccount token verified against the
    cluster's issuer keys (``verifier``, a ``sa_token_auth.ServiceAccountVerifier``, whose ``async verify(token)``
    returns the caller or raises ``Refused``; by default the one the pod's ``SPECDECODE_CONTROL_*`` environment
    configures, if any)."""
    from aiohttp import web

    _refusal = _refusal_check(TokenFile(token_file), _default_verifier(verifier))

    def _body(table: StepTable, **extra: Any) -> dict[str, Any]:
        return {**table.to_json(), "candidates": sorted(sink.candidates), **extra}

    async def get_steps(request: web.Request) -> web.Response:
        if (refused := await _refusal(request)) is not None:
            return refused
        table = sink.current_table()
        if table is None:
            return web.json_response({"error": "no step table yet (the runtime is still starting)"}, status=503)
        return web.json_response(_body(table))

    async def put_steps(request: web.Request) -> web.Response:
        if (refused := await _refusal(request)) is not None:
            return refused
        try:
            data = await read_json(request)
        except BodyError as err:
            return web.json_response(
                {"error": err.message, "expected": 'application/json: {"table": [{"minBatch": 1, "steps": N}]}'},
                status=err.status,
            )
        try:
            table = parse_step_table(data, sink.candidates)
        except StepTableError as err:
            return web.json_response(
                {"error": "invalid step table", "details": err.errors, "allowed": sorted(sink.candidates)},
                status=422,
            )
        status = sink.apply_table(table)
        if inspect.isawaitable(status):
            status = await status
        return web.json_response(_body(table, status=status))

    app.router.add_get(STEPS_PATH, get_steps)
    app.router.add_put(STEPS_PATH, put_steps)


class DraftSwapSink(Protocol):
    """What the draft endpoint drives: :class:`~specdecode_runtime.draft_swap.DraftRequests` on TP rank 0."""

    def status(self) -> dict[str, Any]: ...

    def submit(self, source: str) -> Any: ...  # a concurrent.futures.Future of an Outcome; raises SwapBusy


def add_draft_routes(
    app, sink: DraftSwapSink, token_file: str | os.PathLike | None, verifier=None, wait_s: float = DRAFT_WAIT_S
) -> None:
    """Mount GET/POST /specdecode/v1/draft: the draft served now, and loading a new one in place. Same callers as the
    step endpoint. POST answers 200 with the new identity, 422 naming the cause when the checkpoint cannot replace
    the served draft (the old one keeps serving), 409 while another swap runs, 504 if the outcome takes longer than
    ``wait_s`` (GET then shows it)."""
    from aiohttp import web

    _refusal = _refusal_check(TokenFile(token_file), _default_verifier(verifier), FORBIDDEN_DRAFT)

    async def get_draft(request: web.Request) -> web.Response:
        if (refused := await _refusal(request)) is not None:
            return refused
        return web.json_response(sink.status())

    async def post_draft(request: web.Request) -> web.Response:
        if (refused := await _refusal(request)) is not None:
            return refused
        expected = 'application/json: {"source": "/absolute/path/to/draft"}'
        try:
            source = parse_draft_request(await read_json(request))
        except BodyError as err:
            return web.json_response({"error": err.message, "expected": expected}, status=err.status)
        except DraftRequestError as err:
            return web.json_response(
                {"error": err.message, "field": err.field, "cause": "source", "expected": expected}, status=422
            )
        try:
            future = sink.submit(source)
        except SwapBusy as err:
            return web.json_response({"error": str(err), **sink.status()}, status=409, headers={"Retry-After": "5"})
        try:  # shielded: a caller that gives up must not cancel the swap, whose outcome GET still shows
            outcome = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), wait_s)
        except TimeoutError:
            return web.json_response(
                {"error": f"the swap to {source} has not ended within {wait_s:g} s; GET shows its outcome"},
                status=504,
            )
        return web.json_response(outcome.to_json(), status=outcome.status)

    app.router.add_get(DRAFT_PATH, get_draft)
    app.router.add_post(DRAFT_PATH, post_draft)


def create_control_app(
    sink: StepTableSink, token_file: str | os.PathLike | None, verifier=None, draft: DraftSwapSink | None = None
):
    """A standalone aiohttp app with the step endpoint, and the draft endpoint when ``draft`` is given (the real
    runtime serves them on its control port)."""
    from aiohttp import web

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    add_step_routes(app, sink, token_file, verifier)
    if draft is not None:
        add_draft_routes(app, draft, token_file, verifier)
    return app


# ------------------------------------------------------------------ rank 0 -> all ranks
class StepControlChannel:
    """Carries step tables from TP rank 0 to every rank so that all switch at the same scheduler iteration.

    Every rank calls ``step(iteration)`` exactly once per scheduler iteration, with the same iteration numbers. On
    exchange iterations (``iteration % every == 0``) rank 0 broadcasts a fixed-size int64 message; a table submitted
    on rank 0 (from any thread, e.g. the HTTP handler) travels in the next exchange and is stamped to apply
    ``lead`` iterations later, which leaves room for overlap schedulers that run the CPU one iteration ahead.
    ``step`` returns the table in force for that iteration (or None before the first one).

    Message: [iteration, sequence, apply_at, n_entries, minBatch_0, steps_0, ..., draft_swap], padded to a fixed
    size so that no shape has to be communicated first. ``encode``/``decode`` let a caller piggy-back the same message
    on a broadcast it already does (SGLang broadcasts received requests from rank 0 every iteration).

    The last slot carries a draft swap (:mod:`.draft_swap`): the sequence number of a swap queued on rank 0
    (``draft``, a ``DraftRequests``), 0 for none; when it is set, the exchange broadcasts the swap's source path
    right after, and every rank finds ``(sequence, source)`` in ``take_draft_request()`` at that iteration.
    """

    HEADER = 4

    def __init__(
        self,
        group=None,
        src: int = 0,
        lead: int = 2,
        every: int = 1,
        initial: StepTable | None = None,
        device: str = "cpu",
        candidates: Iterable[int] | None = None,
        draft: Any = None,
    ) -> None:
        if lead < 0 or every < 1:
            raise ValueError(f"lead must be >= 0 and every >= 1, got lead={lead} every={every}")
        self.group, self.src, self.lead, self.every, self.device = group, src, lead, every, device
        self.draft = draft  # rank 0: DraftRequests whose queued swap travels in the next exchange
        self._draft_out: tuple[int, str] | None = None  # rank 0: the swap encoded into the message being sent
        self._draft_seq = 0  # the message's draft slot as decoded
        self._draft_due: tuple[int, str] | None = None
        self.candidates = sorted(set(candidates)) if candidates is not None else []
        self._lock = threading.Lock()
        self._outbox: StepTable | None = None
        self._seq = 0
        self._pending: list[tuple[int, int, StepTable]] = []  # (apply_at, seq, table)
        self.table = initial
        self.applied: list[tuple[int, int]] = []  # (iteration, seq) history, for tests and status

    # ---- StepTableSink for the HTTP endpoint (rank 0)
    def current_table(self) -> StepTable | None:
        with self._lock:
            return self._outbox or (self._pending[-1][2] if self._pending else self.table)

    def apply_table(self, table: StepTable) -> dict[str, Any]:
        return {"queued": self.submit(table)}

    def submit(self, table: StepTable) -> int:
        """Rank 0 only: queue ``table``; a later submit before the next exchange replaces it. Returns its sequence."""
        if self.candidates:
            table.check_candidates(self.candidates)
        if len(table.table) > MAX_TABLE_ENTRIES:
            raise StepTableError([f"table: at most {MAX_TABLE_ENTRIES} entries"])
        with self._lock:
            self._outbox = table
            self._seq += 1
            return self._seq

    # ---- wire format
    @classmethod
    def message_size(cls) -> int:
        return cls.HEADER + 2 * MAX_TABLE_ENTRIES + 1  # the last slot: a draft swap's sequence number

    def encode(self, iteration: int) -> list[int]:
        msg = [0] * self.message_size()
        msg[0] = iteration
        with self._lock:
            table, self._outbox = self._outbox, None
            seq = self._seq
        if table is not None:
            msg[1], msg[2], msg[3] = seq, iteration + self.lead, len(table.table)
            for i, (b, s) in enumerate(table.pairs()):
                msg[self.HEADER + 2 * i], msg[self.HEADER + 2 * i + 1] = b, s
        self._draft_out = self.draft.take() if self.draft is not None else None
        if self._draft_out is not None:
            msg[-1] = self._draft_out[0]
        return msg

    def decode(self, msg: Sequence[int], iteration: int) -> None:
        if int(msg[0]) != iteration:
            raise RuntimeError(
                f"step control out of sync: rank {self.src} is at iteration {int(msg[0])}, this rank at {iteration}"
            )
        self._draft_seq = int(msg[-1]) if len(msg) >= self.message_size() else 0
        n = int(msg[3])
        if n:
            pairs = [(int(msg[self.HEADER + 2 * i]), int(msg[self.HEADER + 2 * i + 1])) for i in range(n)]
            self._pending.append((int(msg[2]), int(msg[1]), StepTable.from_pairs(pairs)))
            self._pending.sort(key=lambda p: (p[0], p[1]))

    def _exchange(self, iteration: int) -> None:
        import torch
        import torch.distributed as dist

        if not dist.is_initialized() or dist.get_world_size(self.group) == 1:
            self.decode(self.encode(iteration), iteration)  # a single rank: nothing to agree on
            if self._draft_seq and self._draft_out is not None:
                self._draft_due = self._draft_out
            return
        rank = dist.get_rank()
        if rank == self.src:
            buf = torch.tensor(self.encode(iteration), dtype=torch.int64, device=self.device)
        else:
            buf = torch.zeros(self.message_size(), dtype=torch.int64, device=self.device)
        dist.broadcast(buf, src=self.src, group=self.group)
        self.decode(buf.tolist(), iteration)
        if self._draft_seq:  # a draft swap: its source path follows, on every rank at this same iteration
            box = [self._draft_out[1] if rank == self.src and self._draft_out is not None else None]
            dist.broadcast_object_list(box, src=self.src, group=self.group)
            self._draft_due = (self._draft_seq, str(box[0]))

    def take_draft_request(self) -> tuple[int, str] | None:
        """The draft swap that arrived in this iteration's exchange, once (every rank, the same iteration)."""
        due, self._draft_due = self._draft_due, None
        return due

    def step(self, iteration: int) -> StepTable | None:
        """Call once per scheduler iteration on every rank, before choosing the step count for that iteration."""
        if iteration % self.every == 0:
            self._exchange(iteration)
        while self._pending and self._pending[0][0] <= iteration:
            _, seq, table = self._pending.pop(0)
            self.table = table
            self.applied.append((iteration, seq))
        return self.table
