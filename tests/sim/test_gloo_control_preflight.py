"""StepControlChannel ordering and the NCCL preflight, on 4 real gloo processes (CPU)."""

import multiprocessing as mp
import os
import random
import socket
import threading
import time

import pytest

from specdecode_runtime.contract.step_table import StepTable
from specdecode_runtime.control import StepControlChannel

pytestmark = pytest.mark.slow
WORLD = 4
ITERATIONS = 60
SCRIPTED = {10: [(1, 5)], 11: [(1, 1), (8, 3)], 40: [(1, 3)], 41: [(1, 0)]}  # 40 and 41 land in one exchange at every=4


def _worker(rank, port, queue):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch.distributed as dist

    from specdecode_runtime import preflight

    t0 = time.perf_counter()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        every1 = StepControlChannel(lead=2, every=1, initial=StepTable.single(3), candidates=[0, 1, 3, 5])
        every4 = StepControlChannel(lead=1, every=4, initial=StepTable.single(3), candidates=[0, 1, 3, 5])
        threaded = StepControlChannel(lead=2, every=1, initial=StepTable.single(3))
        stop = threading.Event()

        def submit_randomly():  # an HTTP handler thread on rank 0, racing the scheduler loop
            rng = random.Random(5)
            while not stop.is_set():
                threaded.submit(StepTable.single(rng.choice([0, 1, 3, 5])))
                time.sleep(rng.random() * 0.003)

        if rank == 0:
            t = threading.Thread(target=submit_randomly)
            t.start()
        rng = random.Random(rank)
        logs = {"every1": [], "every4": [], "threaded": []}
        for it in range(ITERATIONS):
            if rank == 0 and it in SCRIPTED:
                every1.submit(StepTable.from_pairs(SCRIPTED[it]))
                every4.submit(StepTable.from_pairs(SCRIPTED[it]))
            for name, ch in (("every1", every1), ("every4", every4), ("threaded", threaded)):
                logs[name].append(ch.step(it).pairs())
            time.sleep(rng.random() * 0.0005)  # ranks drift in wall-clock time, never in iterations
        if rank == 0:
            stop.set()
            t.join()
        t1 = time.perf_counter()
        timings = preflight.run_preflight(iterations=30, warmup=5, broadcast_shape=(4, 6))
        queue.put(
            (
                rank,
                logs,
                every1.applied,
                every4.applied,
                preflight.summary(timings),
                [(r.op, r.nbytes, r.seconds) for r in timings],
                (t1 - t0, time.perf_counter() - t1),
            )
        )
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("forkserver")  # torch is imported once in the server, not in each of 4 children
    ctx.set_forkserver_preload(["torch.distributed", "specdecode_runtime.preflight"])
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    out = {}
    try:
        for _ in range(WORLD):
            rank, *rest = queue.get(timeout=60)
            out[rank] = rest
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    print("channel/preflight seconds per rank:", {r: v[-1] for r, v in out.items()})
    return out


def test_every_rank_switches_at_the_same_iteration(results):
    logs = {r: v[0] for r, v in results.items()}
    for name in ("every1", "every4", "threaded"):
        assert all(logs[r][name] == logs[0][name] for r in range(WORLD)), name
    assert len({tuple(map(tuple, x)) for x in logs[0]["threaded"]}) > 1  # the racing submitter did change tables


def test_scripted_changes_land_lead_iterations_after_the_exchange(results):
    log = results[0][0]["every1"]
    assert log[11] == [(1, 3)] and log[12] == [(1, 5)]  # submitted before step(10), lead 2
    assert log[13] == [(1, 1), (8, 3)]
    assert log[42] == [(1, 3)] and log[43] == [(1, 0)] and log[-1] == [(1, 0)]
    # every=4, lead 1: submissions at 10 and 11 travel together at 12 (the later one wins) and apply at 13
    log4 = results[0][0]["every4"]
    assert log4[12] == [(1, 3)] and log4[13] == [(1, 1), (8, 3)]
    # 40 travels in the exchange at 40 and applies at 41; 41 waits for the exchange at 44 and applies at 45
    assert log4[40] == [(1, 1), (8, 3)] and log4[41] == [(1, 3)] and log4[44] == [(1, 3)] and log4[45] == [(1, 0)]
    assert [a for a, _ in results[0][1]] == [12, 13, 42, 43]
    assert [a for a, _ in results[0][2]] == [13, 41, 45]
    assert all(results[r][1] == results[0][1] and results[r][2] == results[0][2] for r in range(WORLD))


def test_preflight_reports_the_same_numbers_on_every_rank(results):
    summaries = [results[r][3] for r in range(WORLD)]
    assert all(s == summaries[0] for s in summaries)
    assert set(summaries[0]["all_reduce"]) == {"4096", "65536", "1048576"}
    assert summaries[0]["broadcast"] == {str(4 * 6 * 8): pytest.approx(summaries[0]["broadcast"]["192"])}
    assert all(sec > 0 for _, _, sec in results[0][4])
    assert all(sec < 1.0 for _, _, sec in results[0][4])  # seconds, not microseconds or nanoseconds


def test_out_of_sync_ranks_are_detected():
    ch = StepControlChannel()
    with pytest.raises(RuntimeError, match="out of sync"):
        ch.decode([7] + [0] * (ch.message_size() - 1), iteration=8)
