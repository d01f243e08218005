"""live_tune.py's order within a batch: every replayed measurement runs with no background load on the GPU.

Why this exists: main() once restarted the tuner's steady ``Load`` before the no-speculation and tier-0 replays, so
the pod served two request sets at once and the server without speculation shared the GPU with it (tier 0 read
0.45x of no speculation at batch 64 on a GPU, while the same tier alone served more). Here main() runs with every
piece that touches a process, the GPU or HTTP stubbed, and the log of what ran says which measurements overlapped
the load: none may, and the tuner's run must.
"""

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench/gpu/campaigns/live_tune.py"
POD, NOSPEC = "http://pod", "http://nospec"


def _live_tune():
    """A fresh copy of the script (a private name: the module other tests load stays theirs)."""
    spec = importlib.util.spec_from_file_location("live_tune_order_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_replay_overlaps_the_background_load_and_the_tuner_runs_under_it(tmp_path, monkeypatch):
    lt = _live_tune()
    events, running = [], set()  # running: the background loads started and not yet closed

    class FakeLoad:
        def __init__(self, url, prompts, batch, max_new_tokens):
            self.url, self.records, self.errors = url, [], []

        def start(self):
            running.add(self)
            events.append(("load start", self.url))
            return self

        def close(self):
            running.discard(self)

        def tokens_per_s(self, t0, t1):
            return 1.0

    def replay(url, prompts, batch, per_thread, max_new_tokens):
        events.append(("replay", url, len(running)))
        return 150.0 if url == NOSPEC else 100.0  # no speculation wins: the paired rounds replay it too

    def run_live(a, url, control, load, batch):
        events.append(("run_live", url, load in running))
        return {"final_table": [[1, 3]], "tokens_per_s_last": 1.0}

    def start_server(a, work, server=None):
        url = NOSPEC if server == "nospec" else POD
        return SimpleNamespace(pid=-1, wait=lambda timeout=None: 0), url, {"port": 0, "token": "t"}

    sampler = SimpleNamespace(proc=None, start=lambda: sampler, stop=lambda: None, samples=list, window=lambda *t: {})
    for name, value in {
        "Load": FakeLoad,
        "replay": replay,
        "run_live": run_live,
        "start_server": start_server,
        "wait_ready": lambda url, proc, timeout_s: 1.0,
        "greedy_outputs": lambda url, prompts, n: [],
        "put_table": lambda control, body: 200,
        "pod_samples": lambda url: {},
        "gpu_clocks": dict,
    }.items():
        monkeypatch.setattr(lt, name, value)
    monkeypatch.setattr(lt.host_probe, "HostSampler", lambda path: sampler)
    monkeypatch.setattr(lt.host_probe, "scheduler_stats", dict)
    monkeypatch.setattr(os, "killpg", lambda pid, sig: None)  # the fake servers' pid is -1: never signal it
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # main()'s work folder

    heldout, out = tmp_path / "heldout.txt", tmp_path / "live.json"
    heldout.write_text("\n".join(f"{i} " + "text " * 60 for i in range(40)))
    argv = f"--server live --target t --draft d --heldout {heldout} --out {out} --nospec-alongside --replay 2"
    argv += " --pairs 2 --pair-replay 1 --tier0-pairs 2 --batches 8 --statics 0,3 --live-seconds 1"
    monkeypatch.setattr(sys, "argv", ["live_tune.py", *argv.split()])
    assert lt.main() == 0

    replays = [e for e in events if e[0] == "replay"]
    assert {url for _, url, _ in replays} == {POD, NOSPEC}
    assert [e for e in replays if e[2]] == [], f"replayed with the background load running: {events}"
    assert [e for e in events if e[0] == "run_live"] == [("run_live", POD, True)]
    row = json.loads(out.read_text())["batches"]["8"]
    assert {"static", "nospec", "tier0_vs_nospec", "live", "paired"} <= set(row)
    assert row["baseline"] == "nospec" and row["tier0_vs_nospec"]["median_ratio"] == round(100 / 150, 4)
