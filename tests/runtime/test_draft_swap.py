"""Loading a new draft in place, below the engine: the checkpoint checks (every refusal names its cause and the old
draft is untouched), the digest, the agreement of every rank (real gloo, 2 processes: one rank refusing stops every
rank, a copy failing on one rank puts every rank back), the HTTP endpoint, and the SGLang binding on a stand-in
model (what the draft owns, in-place writes, the d2t map, a reallocating loader caught).

The real engine (SGLang's EAGLE-3 model, sharded and split layouts, requests in flight) is in
tests/sglang_e2e/test_draft_swap_cpu.py."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specdecode_runtime import draft_checkpoint as ck
from specdecode_runtime.contract import draft_swap as ds
from specdecode_runtime.contract.draft_swap import DRAFT_PATH, DraftIdentity, DraftRequestError, parse_draft_request
from specdecode_runtime.draft_swap import DraftRequests, DraftSwapper, Outcome, SwapBusy, decide

CONFIG = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4, "num_hidden_layers": 1}


def tensors(seed: int = 0, **override) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {"fc.weight": torch.randn(4, 8, generator=g), "norm.weight": torch.randn(4, generator=g)}
    out.update(override)
    return out


def write(path: Path, weights: dict, config: dict | None = None, split: bool = False, fmt: str = "safetensors"):
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(CONFIG if config is None else config))
    if fmt == "bin":
        torch.save(weights, path / "pytorch_model.bin")
    elif split:
        names = sorted(weights)
        parts = {"model-00001-of-00002.safetensors": names[:1], "model-00002-of-00002.safetensors": names[1:]}
        for f, ns in parts.items():
            save_file({n: weights[n].contiguous() for n in ns}, str(path / f))
        index = {"weight_map": {n: f for f, ns in parts.items() for n in ns}}
        (path / "model.safetensors.index.json").write_text(json.dumps(index))
    else:
        save_file({n: t.contiguous() for n, t in weights.items()}, str(path / "model.safetensors"))
    return str(path)


@pytest.fixture
def served(tmp_path):
    return write(tmp_path / "served", tensors(0))


# ------------------------------------------------------------------------------------------------ checkpoint checks
def test_a_compatible_checkpoint_loads_with_a_digest_of_its_tensors(tmp_path, served):
    ref = ck.reference(served)
    assert ref.tensors == {"fc.weight": ck.TensorSpec("F32", (4, 8)), "norm.weight": ck.TensorSpec("F32", (4,))}
    new = write(tmp_path / "new", tensors(1), config={**CONFIG, "_name_or_path": "elsewhere"})  # ignored key
    got = ck.load(new, ref)
    assert got.nbytes == 4 * (32 + 4) and set(got.tensors) == set(ref.tensors)
    assert torch.equal(got.tensors["fc.weight"], tensors(1)["fc.weight"])
    assert got.digest == ck.digest(new) != ck.digest(served)
    assert got.digest.startswith("sha256:") and len(got.digest) == 7 + 64


def test_the_digest_depends_on_the_tensors_not_the_files(tmp_path):
    one = ck.digest(write(tmp_path / "one", tensors(3)))
    assert ck.digest(write(tmp_path / "two", tensors(3), split=True)) == one  # index + two shards
    assert ck.digest(write(tmp_path / "bin", tensors(3), fmt="bin")) == one  # pytorch_model.bin
    bumped = tensors(3)
    bumped["norm.weight"][2] += 1e-6
    assert ck.digest(write(tmp_path / "bumped", bumped)) != one
    ref = ck.reference(str(tmp_path / "one"))
    assert ck.load(str(tmp_path / "two"), ref).digest == ck.load(str(tmp_path / "bin"), ref).digest == one


@pytest.mark.parametrize(
    ("make", "cause", "words"),
    [
        (lambda d: "relative/path", ds.SOURCE, "not an absolute path"),
        (lambda d: str(d / "nowhere"), ds.NOT_FOUND, "no such directory"),
        (lambda d: write(d / "x", tensors(1)) + "/config.json", ds.NOT_FOUND, "not a directory"),
        (lambda d: _without(write(d / "x", tensors(1)), "config.json"), ds.NOT_FOUND, "no config.json"),
        (lambda d: _without(write(d / "x", tensors(1)), "model.safetensors"), ds.NOT_FOUND, "no *.safetensors"),
        (lambda d: _overwrite(write(d / "x", tensors(1)), "config.json", b"{oops"), ds.UNREADABLE, "not valid JSON"),
        (lambda d: _overwrite(write(d / "x", tensors(1)), "model.safetensors", b"\xff" * 8), ds.UNREADABLE, "header"),
        (lambda d: _truncate(write(d / "x", tensors(1)), 40), ds.UNREADABLE, "does not fit"),
        (
            lambda d: write(d / "x", tensors(1), config={**CONFIG, "num_hidden_layers": 2, "norm_output": True}),
            ds.CONFIG,
            "2 key(s): norm_output (absent -> true), num_hidden_layers (1 -> 2)",
        ),
        (lambda d: write(d / "x", {"fc.weight": torch.zeros(4, 8)}), ds.MISSING_TENSOR, "['norm.weight']"),
        (lambda d: write(d / "x", tensors(1, d2t=torch.zeros(3, dtype=torch.int64))), ds.EXTRA_TENSOR, "['d2t']"),
        (
            lambda d: write(d / "x", tensors(1, **{"fc.weight": torch.zeros(4, 9)})),
            ds.SHAPE,
            "fc.weight [4, 9] (served [4, 8])",
        ),
        (
            lambda d: write(d / "x", tensors(1, **{"norm.weight": torch.zeros(4, dtype=torch.bfloat16)})),
            ds.DTYPE,
            "norm.weight BF16 (served F32)",
        ),
    ],
)
def test_every_refusal_names_its_cause(tmp_path, served, make, cause, words):
    ref = ck.reference(served)
    with pytest.raises(ck.Refused) as err:
        ck.load(make(tmp_path), ref)
    assert err.value.cause == cause and words in err.value.message, err.value.message


def _without(d: str, name: str) -> str:
    (Path(d) / name).unlink()
    return d


def _overwrite(d: str, name: str, data: bytes) -> str:
    (Path(d) / name).write_bytes(data)
    return d


def _truncate(d: str, by: int) -> str:
    p = Path(d) / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-by])
    return d


def test_the_request_body_names_the_field():
    assert parse_draft_request({"source": "/models/d2"}) == "/models/d2"
    for body, field, words in [
        ([], "body", "JSON object"),
        ({}, "source", "missing"),
        ({"source": "/d", "force": True}, "force", "unknown field"),
        ({"source": 3}, "source", "must be a string"),
        ({"source": ""}, "source", "1..4096"),
        ({"source": "/" + "a" * 4096}, "source", "1..4096"),
        ({"source": "/a\x00b"}, "source", "NUL"),
        ({"source": "pvc://claim/d"}, "source", "/mnt/pvc/CLAIM/PATH"),
        ({"source": "models/d"}, "source", "not an absolute path"),
    ]:
        with pytest.raises(DraftRequestError) as err:
            parse_draft_request(body)
        assert err.value.field == field and words in err.value.message, (body, err.value.message)


def test_decide_is_unanimous():
    ok = {"ok": True, "holds": True, "digest": "sha256:a"}
    assert decide([{**ok, "rank": 0}, {**ok, "rank": 1}], "/d") == (None, None, [], "sha256:a")
    bad = {"ok": False, "holds": True, "digest": None, "cause": ds.NOT_FOUND, "error": "/d: no such directory"}
    cause, msg, ranks, _ = decide([{**ok, "rank": 0}, {**bad, "rank": 1}], "/d")
    assert (cause, msg, ranks) == (ds.NOT_FOUND, "/d: no such directory (on rank 1)", [1])
    other = {**bad, "rank": 0, "cause": ds.SHAPE, "error": "shape"}
    assert decide([other, {**bad, "rank": 1}], "/d")[:3] == (
        ds.SHAPE,
        "rank 0: shape; rank 1: /d: no such directory",
        [0, 1],
    )
    cause, msg, ranks, _ = decide([{**ok, "rank": 0}, {**ok, "rank": 1, "digest": "sha256:b"}], "/d")
    assert cause == ds.RANKS_DISAGREE and ranks == [0, 1] and "different checkpoints" in msg
    nobody = {"ok": True, "holds": False, "digest": None}
    assert decide([{**nobody, "rank": 0}], "/d")[0] == ds.UNSUPPORTED
    assert decide([{**ok, "rank": 0, "holds": False}, {**nobody, "rank": 1, "holds": True}], "/d")[0] is None


# ------------------------------------------------------------------------------------------------ the protocol, 1 rank
class FakeTarget:
    """A draft of two tensors; ``fail_after`` names a tensor after which the copy raises (half written)."""

    def __init__(self, holds: bool = True, fail_after: str | None = None, unsupported: str | None = None):
        self.w = {"fc.weight": torch.zeros(4, 8), "norm.weight": torch.zeros(4)}
        self.ptrs = {n: t.data_ptr() for n, t in self.w.items()}
        self.holds, self.fail_after, self.why = holds, fail_after, unsupported
        self.loads = self.restores = 0

    @property
    def holds_draft(self) -> bool:
        return self.holds

    @property
    def unsupported(self):
        return self.why

    def snapshot(self):
        return {n: t.clone() for n, t in self.w.items()}

    def load(self, tensors):
        self.loads += 1
        for n in sorted(self.w):
            self.w[n].copy_(tensors[n])
            if n == self.fail_after:
                raise RuntimeError(f"device error after {n}")

    def restore(self, backup):
        self.restores += 1
        for n, t in backup.items():
            self.w[n].copy_(t)


class FakeMetrics:
    def __init__(self):
        self.draft: list[tuple[str, str]] = []
        self.swaps: list[tuple[str, float]] = []

    def set_draft(self, source, digest):
        self.draft.append((source, digest))

    def record_draft_swap(self, result, seconds):
        self.swaps.append((result, seconds))


def settle(swapper: DraftSwapper, seq: int, source: str, limit: float = 10.0) -> Outcome:
    swapper.begin(seq, source)
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        out = swapper.poll()
        if out is not None:
            return out
        time.sleep(0.005)
    raise AssertionError("the swap never settled")


def test_one_rank_swaps_in_place_and_refuses_without_touching_the_draft(tmp_path, served):
    target, metrics = FakeTarget(), FakeMetrics()
    requests = DraftRequests(DraftIdentity(served, None))
    sw = DraftSwapper(target, source=served, is_src=True, rank=0, requests=requests, metrics=metrics).start()
    first = sw.identity
    assert (
        first.digest == ck.digest(served) and requests.identity == first and metrics.draft == [(served, first.digest)]
    )
    new = write(tmp_path / "new", tensors(1))
    out = settle(sw, 1, new)
    assert out.ok and out.status == 200 and out.identity == DraftIdentity(new, ck.digest(new)) and out.previous == first
    assert torch.equal(target.w["fc.weight"], tensors(1)["fc.weight"])
    assert {n: t.data_ptr() for n, t in target.w.items()} == target.ptrs  # written in place
    wrong = write(tmp_path / "wrong", tensors(2, **{"fc.weight": torch.zeros(4, 9)}))
    out = settle(sw, 2, wrong)
    assert not out.ok and out.cause == ds.SHAPE and out.status == 422 and out.identity.source == new
    assert target.loads == 1 and torch.equal(target.w["fc.weight"], tensors(1)["fc.weight"])
    assert [r for r, _ in metrics.swaps] == ["ok", "refused"] and metrics.draft[-1] == (new, ck.digest(new))
    body = out.to_json()
    assert body["cause"] == "shape" and body["field"] == "source" and body["draft"]["source"] == new


def test_a_failed_copy_is_rolled_back_and_an_unsupported_draft_refused(tmp_path, served):
    target = FakeTarget(fail_after="fc.weight")
    sw = DraftSwapper(target, source=served, is_src=True, rank=0).start()
    before = target.snapshot()
    out = settle(sw, 1, write(tmp_path / "new", tensors(1)))
    assert not out.ok and out.cause == ds.COPY_FAILED and out.status == 500 and "device error" in out.error
    assert all(torch.equal(target.w[n], before[n]) for n in before) and target.restores == 1
    sw = DraftSwapper(FakeTarget(unsupported="a quantized draft"), source=served, is_src=True, rank=0).start()
    out = settle(sw, 1, str(tmp_path / "new"))
    assert out.cause == ds.UNSUPPORTED and out.status == 409 and "a quantized draft" in out.error
    sw = DraftSwapper(FakeTarget(), source=str(tmp_path / "gone"), is_src=True, rank=0).start()
    assert sw.identity.digest is None and "cannot be read" in (sw.reference_error or "")
    assert settle(sw, 1, str(tmp_path / "new")).cause == ds.UNSUPPORTED


def test_a_slow_read_is_refused_at_the_deadline(tmp_path, served):
    gate = threading.Event()

    def stuck(source, ref):
        gate.wait(5)
        return ck.load(source, ref)

    now = [0.0]
    sw = DraftSwapper(
        FakeTarget(), source=served, is_src=True, rank=0, prepare=stuck, deadline_s=30, clock=lambda: now[0]
    )
    sw.start()
    sw.begin(1, write(tmp_path / "new", tensors(1)))
    assert sw.poll() is None
    now[0] = 31.0
    out = sw.poll()
    gate.set()
    assert out is not None and out.cause == ds.TIMEOUT and out.status == 504


def test_requests_one_at_a_time():
    req = DraftRequests(DraftIdentity("/a", "sha256:a"))
    fut = req.submit("/b")
    with pytest.raises(SwapBusy, match="to /b is already running"):
        req.submit("/c")
    assert req.status()["swapping"] == {"source": "/b"} and req.take() == (1, "/b") and req.take() is None
    with pytest.raises(SwapBusy):
        req.submit("/c")
    done = Outcome(1, "/b", True, DraftIdentity("/b", "sha256:b"), DraftIdentity("/a", "sha256:a"))
    req.finish(done)
    assert fut.result(0) is done and req.status()["draft"] == {"source": "/b", "digest": "sha256:b"}
    assert req.status()["swapping"] is None and req.status()["lastSwap"]["result"] == "ok"
    assert req.submit("/c") is not fut


# ------------------------------------------------------------------------------------------------ 2 ranks over gloo
SCENARIOS = ("ok", "rank1_refuses", "rank1_copy_fails", "rank1_outside", "digests_differ")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, root: str) -> None:
    import torch.distributed as dist

    from specdecode_runtime import draft_checkpoint as ck
    from specdecode_runtime.contract.draft_swap import DraftIdentity
    from specdecode_runtime.control import StepControlChannel
    from specdecode_runtime.draft_swap import DraftRequests, DraftSwapper

    sys.path.insert(0, str(Path(__file__).parent))
    from test_draft_swap import FakeTarget

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    served, new = f"{root}/served", f"{root}/new"
    results = {}
    for name in SCENARIOS:
        target = FakeTarget(
            holds=not (name == "rank1_outside" and rank == 1),
            fail_after="norm.weight" if name == "rank1_copy_fails" and rank == 1 else None,
        )

        def prepare(source, ref, name=name):
            if name == "rank1_refuses" and rank == 1:
                raise ck.Refused("not_found", f"{source}: no such directory")
            got = ck.load(source, ref)
            if name == "digests_differ" and rank == 1:
                got.digest = "sha256:" + "0" * 64
            return got

        requests = DraftRequests(DraftIdentity(served, None)) if rank == 0 else None
        channel = StepControlChannel(src=0, lead=0, every=2, draft=requests)
        sw = DraftSwapper(target, source=served, is_src=rank == 0, rank=rank, requests=requests, prepare=prepare)
        sw.start()
        future = requests.submit(new) if rank == 0 else None
        arrived = settled = out = None
        for it in range(1, 4000):
            channel.step(it)
            due = channel.take_draft_request()
            if due is not None:
                arrived = (it, due)
                sw.begin(*due)
            if it % channel.every == 0 and (out := sw.poll()) is not None:
                settled = it
                break
            time.sleep(0.002)
        assert out is not None, f"{name}: the swap never settled on rank {rank}"
        results[name] = {
            "arrived": arrived,
            "settled": settled,
            "ok": out.ok,
            "cause": out.cause,
            "error": out.error,
            "ranks": out.ranks,
            "identity": [out.identity.source, out.identity.digest],
            "initial": [sw.outcomes[0].previous.source, sw.outcomes[0].previous.digest],
            "fc": target.w["fc.weight"].tolist(),
            "loads": target.loads,
            "restores": target.restores,
            "answered": future.result(0).ok if future is not None else None,
        }
    Path(root, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo(tmp_path_factory):
    import torch.multiprocessing as mp

    root = tmp_path_factory.mktemp("swap-gloo")
    write(root / "served", tensors(0))
    write(root / "new", tensors(1))
    mp.start_processes(_worker, args=(_free_port(), str(root)), nprocs=2, start_method="spawn", join=True)
    return {r: json.loads((root / f"rank{r}.json").read_text()) for r in (0, 1)}, str(root)


@pytest.mark.engine  # 2 gloo processes
@pytest.mark.slow
def test_two_ranks_agree_before_anyone_copies(gloo):
    ranks, root = gloo
    new_fc = tensors(1)["fc.weight"].tolist()
    old_fc = torch.zeros(4, 8).tolist()
    for name in SCENARIOS:
        a, b = ranks[0][name], ranks[1][name]
        # the swap reaches both ranks at the same iteration (an exchange) and settles at the same one
        assert a["arrived"] == b["arrived"] and a["arrived"][1] == [1, f"{root}/new"] and a["arrived"][0] % 2 == 0
        assert a["settled"] == b["settled"] and a["settled"] >= a["arrived"][0], name
        for k in ("ok", "cause", "error", "ranks", "identity", "initial"):
            assert a[k] == b[k], (name, k, a[k], b[k])
        assert a["initial"] == [f"{root}/served", ck.digest(f"{root}/served")]  # rank 1 learnt it from rank 0
        assert a["answered"] == a["ok"]
    ok = ranks[0]["ok"]
    assert ok["ok"] and ok["identity"] == [f"{root}/new", ck.digest(f"{root}/new")]
    assert ranks[0]["ok"]["fc"] == ranks[1]["ok"]["fc"] == new_fc
    refused = ranks[0]["rank1_refuses"]
    assert (refused["cause"], refused["ranks"]) == ("not_found", [1]) and "(on rank 1)" in refused["error"]
    assert [ranks[r]["rank1_refuses"]["loads"] for r in (0, 1)] == [0, 0]  # nobody copied
    assert refused["identity"] == ok["initial"]  # the old draft serves on, identity unchanged
    failed = ranks[0]["rank1_copy_fails"]
    assert failed["cause"] == "copy_failed" and failed["ranks"] == [1] and "rank 1: RuntimeError" in failed["error"]
    for r in (0, 1):  # rank 0 copied fine, then put the old draft back like rank 1
        assert ranks[r]["rank1_copy_fails"]["fc"] == old_fc and ranks[r]["rank1_copy_fails"]["restores"] == 1
    outside = ranks[1]["rank1_outside"]
    assert (
        outside["ok"]
        and outside["loads"] == 0
        and outside["fc"] == old_fc
        and ranks[0]["rank1_outside"]["fc"] == new_fc
    )
    differ = ranks[0]["digests_differ"]
    assert differ["cause"] == "ranks_disagree" and [ranks[r]["digests_differ"]["loads"] for r in (0, 1)] == [0, 0]


# ------------------------------------------------------------------------------------------------ the HTTP endpoint
@pytest.fixture
async def draft_client(tmp_path, served):
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from specdecode_runtime.control import add_draft_routes

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    target = FakeTarget()
    requests = DraftRequests(DraftIdentity(served, None))
    sw = DraftSwapper(target, source=served, is_src=True, rank=0, requests=requests).start()
    gate = threading.Event()
    gate.set()
    stop = threading.Event()

    def scheduler() -> None:  # the scheduler loop's side: exchange, then settle
        while not stop.is_set():
            if gate.is_set() and (due := requests.take()) is not None:
                sw.begin(*due)
            sw.poll()
            time.sleep(0.002)

    loop = threading.Thread(target=scheduler, daemon=True)
    loop.start()
    app = web.Application()
    add_draft_routes(app, requests, token, wait_s=5.0)
    client = TestClient(TestServer(app))
    await client.start_server()
    client.gate, client.target, client.swapper = gate, target, sw
    yield client
    stop.set()
    loop.join(5)
    await client.close()


AUTH = {"Authorization": "Bearer s3cret"}


async def test_the_endpoint_swaps_refuses_and_reports(draft_client, tmp_path, served):
    c = draft_client
    assert (await c.get(DRAFT_PATH)).status == 401
    r = await c.post(DRAFT_PATH, json={"source": "/x"}, headers={"Authorization": "Bearer wrong"})
    assert r.status == 401 and c.target.loads == 0
    got = await (await c.get(DRAFT_PATH, headers=AUTH)).json()
    assert got == {"draft": {"source": served, "digest": ck.digest(served)}, "swapping": None, "lastSwap": None}
    new = write(tmp_path / "new", tensors(1))
    r = await c.post(DRAFT_PATH, json={"source": new}, headers=AUTH)
    body = await r.json()
    assert r.status == 200, body
    assert body["result"] == "ok" and body["draft"] == {"source": new, "digest": ck.digest(new)}
    assert body["previous"]["source"] == served and body["seconds"] >= body["pauseSeconds"] >= 0
    assert (await (await c.get(DRAFT_PATH, headers=AUTH)).json())["draft"]["source"] == new
    for payload, status, words in [
        ({"source": str(tmp_path / "nowhere")}, 422, "no such directory"),
        ({"source": "relative"}, 422, "not an absolute path"),
        ({"source": new, "extra": 1}, 422, "unknown field"),
    ]:
        r = await c.post(DRAFT_PATH, json=payload, headers=AUTH)
        body = await r.json()
        assert r.status == status and words in body["error"] and body["field"] in ("source", "extra"), body
        assert body.get("draft", {"source": new})["source"] == new  # the old draft serves on
    r = await c.post(DRAFT_PATH, data=b"x" * 20000, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status == 413
    r = await c.post(DRAFT_PATH, data=b"{", headers={**AUTH, "Content-Type": "application/json"})
    assert r.status == 400 and "not valid JSON" in (await r.json())["error"]
    r = await c.post(DRAFT_PATH, data=b"{}", headers={**AUTH, "Content-Type": "text/plain"})
    assert r.status == 415
    assert c.target.loads == 1


async def test_a_second_swap_while_one_runs_is_409(draft_client, tmp_path):
    import asyncio

    c = draft_client
    c.gate.clear()  # the scheduler does not take the queued swap yet
    first = asyncio.ensure_future(c.post(DRAFT_PATH, json={"source": write(tmp_path / "a", tensors(1))}, headers=AUTH))
    for _ in range(200):
        if (await (await c.get(DRAFT_PATH, headers=AUTH)).json())["swapping"]:
            break
        await asyncio.sleep(0.01)
    r = await c.post(DRAFT_PATH, json={"source": write(tmp_path / "b", tensors(2))}, headers=AUTH)
    body = await r.json()
    assert r.status == 409 and "already running" in body["error"] and body["swapping"]["source"].endswith("/a")
    c.gate.set()
    assert (await first).status == 200


# ------------------------------------------------------------------------------------------------ the SGLang binding
class StandInEagle3(torch.nn.Module):
    """The parts of SGLang's LlamaForCausalLMEagle3 the binding relies on: ``load_weights`` that maps checkpoint
    names onto parameters and calls each one's ``weight_loader`` (default: copy), ``d2t`` into ``hot_token_id``."""

    def __init__(self, target_embed: torch.nn.Parameter, reallocate: bool = False):
        super().__init__()
        self.config = SimpleNamespace(hidden_size=4, target_hidden_size=4, tie_word_embeddings=False)
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(8, 4)
        self.model.embed_tokens.weight = target_embed  # set_embed: the target's own parameter
        self.model.fc = torch.nn.Linear(8, 4, bias=False)
        self.lm_head = torch.nn.Linear(4, 6, bias=False)
        self.register_buffer("inv_freq", torch.ones(2))
        self.load_lm_head_from_target, self.hot_token_id, self.quant_config = False, None, None
        self.reallocate = reallocate

    def load_weights(self, weights):
        from sglang.srt.model_loader.weight_utils import default_weight_loader

        params = dict(self.named_parameters())
        for name, w in weights:
            if "d2t" in name:
                self.hot_token_id = w + torch.arange(w.shape[0])
                continue
            pname = name if name in params else f"model.{name}"
            if self.reallocate and pname == "model.fc.weight":
                self.model.fc.weight = torch.nn.Parameter(w.clone())
                continue
            if pname in params:
                getattr(params[pname], "weight_loader", default_weight_loader)(params[pname], w)


def _worker_of(model, target, hot=None):
    dw = SimpleNamespace(
        draft_runner=SimpleNamespace(model=model, model_config=SimpleNamespace(model_path="/models/draft")),
        speculative_algorithm=SimpleNamespace(is_eagle3=lambda: True),
        hot_token_id=hot,
    )
    return SimpleNamespace(
        server_args=SimpleNamespace(speculative_draft_model_path="/models/draft"),
        _draft_worker=dw,
        _target_worker=SimpleNamespace(model_runner=SimpleNamespace(model=target)),
    )


def _ckpt(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "embed_tokens.weight": torch.randn(8, 4, generator=g),  # in the checkpoint, but the target's in SGLang
        "fc.weight": torch.randn(4, 8, generator=g),
        "lm_head.weight": torch.randn(6, 4, generator=g),
        "d2t": torch.tensor([0, 1, 1, 2, 2, 2], dtype=torch.int64),
    }


@pytest.mark.engine  # SGLang's weight loader
def test_the_binding_writes_only_what_the_draft_owns_in_place(runtime_sglang):
    from specdecode_runtime.sglang_patch.draft_swap import HOT_TOKEN_ID, SGLangDraftTarget

    target = torch.nn.Module()
    target.embed = torch.nn.Embedding(8, 4)
    model = StandInEagle3(target.embed.weight)
    hot = torch.arange(6)
    t = SGLangDraftTarget(_worker_of(model, target, hot))
    assert t.holds_draft and t.unsupported is None and t.source == "/models/draft"
    assert [n for n, _ in t.owned()] == ["lm_head.weight", "model.fc.weight"]
    embed_before = target.embed.weight.detach().clone()
    ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
    backup = t.snapshot()
    before = t.params_digest()
    t.load(_ckpt(1))
    assert torch.equal(model.model.fc.weight, _ckpt(1)["fc.weight"]) and torch.equal(
        model.lm_head.weight, _ckpt(1)["lm_head.weight"]
    )
    assert torch.equal(target.embed.weight, embed_before)  # the target's embedding untouched
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == ptrs
    assert hot.tolist() == [0, 2, 3, 5, 6, 7] and t.draft_worker.hot_token_id is hot  # d2t + arange, in place
    assert not any("weight_loader" in p.__dict__ for p in model.parameters())  # guards removed
    assert t.params_digest() != before
    t.restore(backup)
    assert t.params_digest() == before and hot.tolist() == list(range(6)) and set(backup) >= {HOT_TOKEN_ID}


@pytest.mark.engine  # SGLang's weight loader
def test_the_binding_catches_a_reallocating_loader_and_what_it_cannot_reload(runtime_sglang):
    from specdecode_runtime.sglang_patch.draft_swap import SGLangDraftTarget

    target = torch.nn.Module()
    target.embed = torch.nn.Embedding(8, 4)
    t = SGLangDraftTarget(_worker_of(StandInEagle3(target.embed.weight, reallocate=True), target))
    with pytest.raises(RuntimeError, match="reallocated"):
        t.load(_ckpt(1))
    quantized = StandInEagle3(target.embed.weight)
    quantized.quant_config = object()
    assert "quantized" in SGLangDraftTarget(_worker_of(quantized, target)).unsupported
    tied = StandInEagle3(target.embed.weight)
    tied.load_lm_head_from_target = True
    assert [n for n, _ in SGLangDraftTarget(_worker_of(tied, target)).owned()] == ["model.fc.weight"]
    outside = _worker_of(None, target)
    outside._draft_worker.draft_runner = SimpleNamespace()  # the remote draft worker: no model on this rank
    t = SGLangDraftTarget(outside)
    assert not t.holds_draft and t.unsupported is None and t.source == "/models/draft"


@pytest.fixture
def runtime_sglang():
    from runtime_testlib import sglang_or_skip

    sglang_or_skip()


# ------------------------------------------------------------------------------------------------ the self-test's part
def test_selftest_draft_swaps_flag():
    import argparse

    from specdecode_runtime.selftest.options import OptionError, add_arguments, from_namespace

    def opts(*argv):
        ap = argparse.ArgumentParser()
        add_arguments(ap)
        return from_namespace(ap.parse_args(["--layouts", "nospec,sharded", *argv]))

    assert opts("--draft-swaps", "noisy, served,/m/d").draft_swaps == ("noisy", "served", "/m/d")
    for argv, words in [
        (["--draft-swaps", "relative"], "noisy, served or an absolute path"),
        (["--draft-swaps", ",".join(["noisy"] * 9)], "1..8"),
        (["--draft-swaps", "noisy", "--live-steps", "1"], "cannot be combined"),
    ]:
        with pytest.raises(OptionError, match=words):
            opts(*argv)
    from specdecode_runtime.selftest.runner import max_new_tokens

    assert max_new_tokens(opts("--draft-swaps", "noisy,served")) == 6 * 3 * 4


def _swap(rank, seq, rnd, ok, before, after, pb, pa, holds=True):
    return {
        "event": "draft_swap",
        "rank": rank,
        "seq": seq,
        "round": rnd,
        "ok": ok,
        "holds": holds,
        "digest_before": before,
        "digest_after": after,
        "params_before": pb if holds else None,
        "params_after": pa if holds else None,
    }


def test_selftest_swap_check_catches_a_rank_that_did_not_copy():
    from specdecode_runtime.selftest.options import Options
    from specdecode_runtime.selftest.report import DRAFT_SWAP_CHECK, draft_swap_check
    from specdecode_runtime.selftest.runner import RunResult

    opts = Options(tp=2, layouts=("sharded",), draft_swaps=("noisy", "/x", "served"))
    answered = [{"status": 200}, {"status": 422}, {"status": 200}]

    def run(rank1):
        rank0 = [_swap(0, 1, 5, True, "A", "B", "pA", "pB"), _swap(0, 2, 9, False, "B", "B", "pB", "pB")]
        rank0.append(_swap(0, 3, 13, True, "B", "A", "pB", "pA"))
        return RunResult(layout="sharded", ranks={0: rank0, 1: rank1}, draft_swaps=answered)

    good = [_swap(1, 1, 5, True, "A", "B", "qA", "qB"), _swap(1, 2, 9, False, "B", "B", "qB", "qB")]
    good.append(_swap(1, 3, 13, True, "B", "A", "qB", "qA"))
    c = draft_swap_check(opts, run(good))
    assert c.name == DRAFT_SWAP_CHECK and c.ok, c.detail
    assert (
        "3 swaps (2 loaded) at decode rounds [5, 9, 13]" in c.detail and "weights written on ranks [0, 1]" in c.detail
    )
    skipped = [_swap(1, 1, 5, True, "A", "B", "qA", "qA"), _swap(1, 2, 9, False, "B", "B", "qA", "qA")]
    skipped.append(_swap(1, 3, 13, True, "B", "A", "qA", "qA"))
    c = draft_swap_check(opts, run(skipped))
    assert not c.ok and "rank 1: different checkpoints left the same weights" in c.detail
    late = [dict(e, round=e["round"] + 1) for e in good]
    assert "ranks differ" in draft_swap_check(opts, run(late)).detail
    written = [dict(e) for e in good]
    written[1]["params_after"] = "qX"
    assert "the refused swap 2 changed its weights" in draft_swap_check(opts, run(written)).detail
    outside = [
        _swap(1, s, r, ok, b, a, None, None, holds=False)
        for s, r, ok, b, a in [(1, 5, True, "A", "B"), (2, 9, False, "B", "B"), (3, 13, True, "B", "A")]
    ]
    assert draft_swap_check(opts, run(outside)).ok


def test_an_index_naming_files_elsewhere_is_refused(tmp_path, served):
    d = Path(write(tmp_path / "x", tensors(1), split=True))
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"fc.weight": "../served/model.safetensors"}})
    )
    with pytest.raises(ck.Refused, match="outside the directory") as err:
        ck.load(str(d), ck.reference(served))
    assert err.value.cause == ds.UNREADABLE
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"fc.weight": "gone.safetensors"}}))
    with pytest.raises(ck.Refused, match="names files that are not there"):
        ck.load(str(d), ck.reference(served))


class _OneSwap:
    """Rank 0's queued swap, as DraftRequests.take hands it to the exchange."""

    def __init__(self, seq: int, source: str) -> None:
        self.queued: tuple[int, str] | None = (seq, source)

    def take(self) -> tuple[int, str] | None:
        out, self.queued = self.queued, None
        return out


def test_a_swap_and_a_step_table_change_in_one_exchange_both_arrive():
    """A draft swap queued while a step-table change is in flight travels in the same control message; neither
    displaces the other: the table applies at its iteration, the swap is taken once, at the iteration it arrived."""
    from specdecode_runtime.contract.step_table import StepTable
    from specdecode_runtime.control import StepControlChannel

    ch = StepControlChannel(lead=2, initial=StepTable.single(3), candidates=[0, 3, 5], draft=_OneSwap(7, "/d/new"))
    ch.submit(StepTable.single(5))
    assert ch.step(10).lookup(1) == 3  # the table is stamped for iteration 12
    assert ch.take_draft_request() == (7, "/d/new")
    assert ch.take_draft_request() is None  # once
    assert ch.step(11).lookup(1) == 3
    assert ch.step(12).lookup(1) == 5 and ch.applied == [(12, 1)]
    assert ch.take_draft_request() is None
