"""GET/PUT /specdecode/v1/steps: 401 without a valid token, 422 for non-candidates, 200 otherwise."""

import pytest
from aiohttp import web

from specdecode_runtime.contract.step_table import STEPS_PATH, StepTable, StepTableError, parse_step_table
from specdecode_runtime.control import add_step_routes


class Sink:
    candidates = [0, 1, 3, 5]

    def __init__(self):
        self.table = StepTable.single(3)
        self.applied = []

    def current_table(self):
        return self.table

    async def apply_table(self, table):
        self.applied.append(table)
        self.table = table
        return {"queued": len(self.applied)}


@pytest.fixture
def token_file(tmp_path):
    p = tmp_path / "token"
    p.write_text("s3cret\n")
    return p


@pytest.fixture
async def client(aiohttp_client_factory, token_file):
    sink = Sink()
    app = web.Application()
    add_step_routes(app, sink, token_file)
    c = await aiohttp_client_factory(app)
    c.sink = sink
    return c


@pytest.fixture
async def aiohttp_client_factory():
    from aiohttp.test_utils import TestClient, TestServer

    clients = []

    async def make(app):
        c = TestClient(TestServer(app))
        await c.start_server()
        clients.append(c)
        return c

    yield make
    for c in clients:
        await c.close()


AUTH = {"Authorization": "Bearer s3cret"}
TABLE = {"table": [{"minBatch": 1, "steps": 5}, {"minBatch": 8, "steps": 3}, {"minBatch": 32, "steps": 1}]}


async def test_get_and_put_with_token(client):
    r = await client.get(STEPS_PATH, headers=AUTH)
    assert r.status == 200
    assert (await r.json())["table"] == [{"minBatch": 1, "steps": 3}]
    r = await client.put(STEPS_PATH, json=TABLE, headers=AUTH)
    body = await r.json()
    assert r.status == 200, body
    assert body["table"] == TABLE["table"] and body["status"] == {"queued": 1}
    assert client.sink.table.lookup(1) == 5 and client.sink.table.lookup(20) == 3 and client.sink.table.lookup(99) == 1


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}])
async def test_unauthorized(client, headers):
    for method in (client.get, client.put):
        r = await method(STEPS_PATH, json=TABLE, headers=headers)
        assert r.status == 401
    assert client.sink.applied == []


async def test_missing_or_empty_token_file_refuses_everything(aiohttp_client_factory, tmp_path):
    for path in (tmp_path / "absent", None):
        app = web.Application()
        add_step_routes(app, Sink(), path)
        c = await aiohttp_client_factory(app)
        assert (await c.get(STEPS_PATH, headers={"Authorization": "Bearer "})).status == 401
        assert (await c.get(STEPS_PATH, headers=AUTH)).status == 401
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    app = web.Application()
    add_step_routes(app, Sink(), empty)
    c = await aiohttp_client_factory(app)
    assert (await c.get(STEPS_PATH, headers={"Authorization": "Bearer "})).status == 401


async def test_token_rotation_is_picked_up(client, token_file):
    token_file.write_text("rotated-token")
    assert (await client.get(STEPS_PATH, headers=AUTH)).status == 401
    assert (await client.get(STEPS_PATH, headers={"Authorization": "Bearer rotated-token"})).status == 200


async def test_non_candidate_is_422_with_allowed_set(client):
    r = await client.put(STEPS_PATH, json={"table": [{"minBatch": 1, "steps": 4}]}, headers=AUTH)
    body = await r.json()
    assert r.status == 422
    assert body["allowed"] == [0, 1, 3, 5]
    assert "table[0].steps: 4 is not a captured candidate" in body["details"]
    assert client.sink.applied == []


@pytest.mark.parametrize(
    "payload, expect",
    [
        ({"table": [{"minBatch": 8, "steps": 3}]}, "minBatch 1"),
        ({"table": []}, "table:"),
        ({"table": [{"minBatch": 1, "steps": -1}]}, "table[0].steps:"),
        ({"table": [{"minBatch": 1, "steps": 1}, {"minBatch": 1, "steps": 3}]}, "appears twice"),
        ({"table": [{"minBatch": 1, "step": 1}]}, "table[0].step: unknown field"),
    ],
)
async def test_malformed_tables_are_422_with_field_paths(client, payload, expect):
    r = await client.put(STEPS_PATH, json=payload, headers=AUTH)
    assert r.status == 422
    assert any(expect in d for d in (await r.json())["details"]), await r.json()


async def test_body_that_is_not_json_is_400(client):
    r = await client.put(STEPS_PATH, data=b"{nope", headers={**AUTH, "Content-Type": "application/json"})
    assert r.status == 400


def test_lookup_uses_the_largest_min_batch_not_above():
    t = parse_step_table(
        {"table": [{"minBatch": 32, "steps": 1}, {"minBatch": 1, "steps": 5}, {"minBatch": 8, "steps": 3}]}
    )
    assert [t.lookup(b) for b in (1, 7, 8, 31, 32, 500)] == [5, 5, 3, 3, 1, 1]
    with pytest.raises(StepTableError) as exc:
        t.check_candidates([1, 3])
    assert exc.value.allowed == [1, 3]


async def test_channel_as_sink_queues_for_rank0_and_503_before_a_table(aiohttp_client_factory, token_file):
    from specdecode_runtime.control import StepControlChannel

    ch = StepControlChannel(candidates=[1, 3], lead=2, every=1000)  # exchange only at iteration 0 (not reached)
    app = web.Application()
    add_step_routes(app, ch, token_file)
    c = await aiohttp_client_factory(app)
    assert (await c.get(STEPS_PATH, headers=AUTH)).status == 503
    r = await c.put(STEPS_PATH, json={"table": [{"minBatch": 1, "steps": 3}]}, headers=AUTH)
    assert r.status == 200 and (await r.json())["status"] == {"queued": 1}
    assert (await (await c.get(STEPS_PATH, headers=AUTH)).json())["table"] == [{"minBatch": 1, "steps": 3}]
    msg = ch.encode(iteration=7)  # what rank 0 broadcasts at its next exchange
    assert msg[:6] == [7, 1, 9, 1, 1, 3]
    ch.decode(msg, iteration=7)
    assert ch.step(8) is None  # not yet in force: it applies at iteration 7 + lead
    assert ch.step(9).pairs() == [(1, 3)] and ch.applied == [(9, 1)]
    with pytest.raises(StepTableError):
        ch.submit(StepTable.single(5))


async def test_a_refusal_says_what_to_send(client):
    r = await client.get(STEPS_PATH)
    assert r.status == 401
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="specdecode"'
    assert await r.json() == {
        "error": "missing or invalid bearer token (Authorization: Bearer <token from the "
        "mounted Secret, or the operator's ServiceAccount token>)"
    }


def test_channel_takes_at_most_the_table_bound_and_numbers_each_submit():
    from specdecode_runtime.contract.step_table import MAX_TABLE_ENTRIES
    from specdecode_runtime.control import StepControlChannel

    ch = StepControlChannel()
    full = StepTable.from_pairs([(1 + i, 1) for i in range(MAX_TABLE_ENTRIES)])
    assert ch.submit(StepTable.single(2)) == 1
    assert ch.submit(full) == 2  # replaces the queued table: the later one travels
    assert ch.current_table() is full
    # the model refuses a longer table when it is built; one grown afterwards must not overflow the fixed-size
    # broadcast message either
    grown = StepTable.from_pairs([(1 + i, 1) for i in range(MAX_TABLE_ENTRIES)])
    grown.table.append(StepTable.single(1).table[0].model_copy(update={"min_batch": 99}))
    with pytest.raises(StepTableError) as err:
        ch.submit(grown)
    assert err.value.errors == [f"table: at most {MAX_TABLE_ENTRIES} entries"]
    assert ch.current_table() is full and ch.submit(StepTable.single(3)) == 3


verifiers: list = []


class _Verifier:
    """Stands in for the cluster's token review: accepts one token, refuses others with the given status."""

    def __init__(self, settings):
        self.settings = settings
        verifiers.append(self)

    async def verify(self, token):
        from specdecode_runtime.sa_token_auth import Refused

        if token == "sa-token":
            return "system:serviceaccount:specdecode-system:specdecode-operator"
        raise Refused(403 if token == "other-sa" else 401, f"refused {token}")


async def test_the_pod_environment_turns_on_serviceaccount_tokens(aiohttp_client_factory, token_file, monkeypatch):
    from specdecode_runtime import sa_token_auth
    from specdecode_runtime.control import UNAUTHORIZED

    monkeypatch.setattr(sa_token_auth, "ServiceAccountVerifier", _Verifier)
    verifiers.clear()
    for issuer in ("", "  "):  # unset or blank: the shared token only
        monkeypatch.setenv("SPECDECODE_CONTROL_ISSUER", issuer)
        app = web.Application()
        add_step_routes(app, Sink(), token_file)
        c = await aiohttp_client_factory(app)
        assert (await c.get(STEPS_PATH, headers={"Authorization": "Bearer sa-token"})).status == 401
        assert (await c.get(STEPS_PATH, headers=AUTH)).status == 200
    monkeypatch.setenv("SPECDECODE_CONTROL_ISSUER", "https://kubernetes.default.svc")
    monkeypatch.setenv("SPECDECODE_CONTROL_AUDIENCE", "specdecode-runtime")
    monkeypatch.setenv("SPECDECODE_CONTROL_SUBJECTS", "system:serviceaccount:specdecode-system:specdecode-operator")
    app = web.Application()
    add_step_routes(app, Sink(), token_file)
    c = await aiohttp_client_factory(app)
    assert (await c.get(STEPS_PATH, headers={"Authorization": "Bearer sa-token"})).status == 200
    assert (await c.get(STEPS_PATH, headers=AUTH)).status == 200  # the shared token still works beside it
    made = [v for v in verifiers if v.settings is not None]
    assert [(v.settings.issuer, v.settings.audience) for v in made] == [
        ("https://kubernetes.default.svc", "specdecode-runtime")
    ]
    r = await c.get(STEPS_PATH, headers={"Authorization": "Bearer other-sa"})
    # the answers say no more than their status; the verifier's reason is logged only
    assert r.status == 403 and (await r.json()) == {"error": "this caller may not change speculative steps"}
    r = await c.get(STEPS_PATH, headers={"Authorization": "Bearer forged"})
    assert r.status == 401 and (await r.json()) == {"error": UNAUTHORIZED}
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="specdecode"'
    for header in ({}, {"Authorization": "sa-token"}):  # no bearer: not handed to the verifier
        assert (await c.get(STEPS_PATH, headers=header)).status == 401


async def test_every_answer_names_what_went_wrong(client, aiohttp_client_factory, token_file):
    r = await client.get(STEPS_PATH, headers=AUTH)
    assert await r.json() == {"table": [{"minBatch": 1, "steps": 3}], "candidates": [0, 1, 3, 5]}
    r = await client.put(STEPS_PATH, data=b"{nope", headers={**AUTH, "Content-Type": "application/json"})
    body = await r.json()
    assert r.status == 400 and body["expected"] == 'application/json: {"table": [{"minBatch": 1, "steps": N}]}'
    assert body["error"]
    r = await client.put(STEPS_PATH, json={"table": [{"minBatch": 1, "steps": 4}]}, headers=AUTH)
    assert (await r.json())["error"] == "invalid step table"
    from specdecode_runtime.control import StepControlChannel

    app = web.Application()
    add_step_routes(app, StepControlChannel(candidates=[1, 3]), token_file)
    c = await aiohttp_client_factory(app)
    r = await c.get(STEPS_PATH, headers=AUTH)
    assert r.status == 503 and await r.json() == {"error": "no step table yet (the runtime is still starting)"}


def test_no_token_file_means_no_token(tmp_path):
    from specdecode_runtime.control import TokenFile

    assert TokenFile(None).token() == ""
    assert TokenFile(tmp_path / "absent").token() == ""
    assert not TokenFile(tmp_path / "absent").authorized("Bearer ")


def test_the_token_file_is_read_again_only_when_it_changes(tmp_path, monkeypatch, caplog):
    from specdecode_runtime import control

    reads = []
    real = control.read_text
    monkeypatch.setattr(control, "read_text", lambda *a, **k: reads.append(a) or real(*a, **k))
    path = tmp_path / "token"
    path.write_text("one")
    tokens = control.TokenFile(path)
    assert [tokens.token() for _ in range(3)] == ["one"] * 3 and len(reads) == 1
    path.write_text("two!")  # a rotated Secret: another size (and mtime)
    assert tokens.token() == "two!" and len(reads) == 2
    path.write_bytes(b"x" * (control.MAX_TOKEN_BYTES + 1))
    with caplog.at_level("WARNING", logger="specdecode_runtime.control"):
        assert tokens.token() == ""
    assert [r.getMessage() for r in caplog.records if r.name == "specdecode_runtime.control"][0].startswith(
        "control token unusable, every request is refused: "
    )
    assert str(control.MAX_TOKEN_BYTES) in caplog.text
