"""Property: whatever file a user hands either CLI - random or adversarial - the command ends with exit 0 or 2 and
never a traceback. Files are the shipped examples mutated (huge numbers, NaN, wrong types, deep nesting, long
strings), then possibly broken as text (duplicate keys, extra documents) or as bytes (non-UTF-8, truncation).

Commands run in-process (the same ``main`` the console scripts call), so hypothesis can try many files quickly."""

from __future__ import annotations

import contextlib
import copy
import io
import math
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdecode_operator import cli as operator_cli
from specdecode_runtime import cli as runtime_cli
from tests.cli.clitest import EXAMPLE, RUNTIME_EXAMPLE, SEED

BASES = {
    "sdd": yaml.safe_load(EXAMPLE.read_text()),
    "scenario": yaml.safe_load(SEED.read_text()),
    "runtime": yaml.safe_load(RUNTIME_EXAMPLE.read_text()),
}
COMMANDS = {  # {file} is the generated file
    "sdd": [
        ("specdecode", ["validate", "-f", "{file}"]),
        ("specdecode", ["render", "-f", "{file}"]),
        ("specdecode", ["plan", "-f", "{file}", "--scenario", str(SEED)]),
    ],
    "scenario": [
        ("specdecode", ["plan", "-f", str(EXAMPLE), "--scenario", "{file}"]),
        ("specdecode-runtime", ["simulate", "--scenario", "{file}", "--offline", "--duration", "30"]),
    ],
    "runtime": [("specdecode-runtime", ["launch", "--config", "{file}", "--dry-run"])],
}

ADVERSARIAL = st.one_of(
    st.sampled_from(
        [
            10**30,
            -(10**30),
            2**63,
            -1,
            0,
            1e300,
            -1e300,
            math.nan,
            math.inf,
            -0.0,
            1e-300,
            True,
            None,
            "",
            "x" * 5000,
            "\u202e\u0000",
            [],
            {},
            [[[[[]]]]],
            {"a": {"b": {"c": {}}}},
            "1e30",
            "0x10",
        ]
    ),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=5),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, (*prefix, i))


def mutate(doc, path, value):
    if not path:
        return value
    out = copy.deepcopy(doc)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


@st.composite
def files(draw):
    kind = draw(st.sampled_from(sorted(BASES)))
    doc = BASES[kind]
    for _ in range(draw(st.integers(0, 3))):
        doc = mutate(doc, draw(st.sampled_from(list(paths(doc)))), draw(ADVERSARIAL))
    text = yaml.safe_dump(doc, allow_unicode=True) if doc is not None else ""
    shape = draw(st.sampled_from(["plain", "deep", "duplicate", "multi", "truncated"]))
    if shape == "deep":
        text += "zzz: " + "[" * draw(st.integers(30, 3000)) + "\n"
    elif shape == "duplicate" and text.strip():
        first = text.splitlines()[0]
        text += first + "\n"
    elif shape == "multi":
        text += "---\n" + text
    elif shape == "truncated":
        text = text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    data = text.encode("utf-8")
    if draw(st.booleans()) and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xe9t\xe9"])) + data[at:]
    return kind, data


def run(prog: str, argv: list[str]) -> tuple[int, str]:
    main = operator_cli.main if prog == "specdecode" else runtime_cli.main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse
            code = e.code
    return code, err.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(files())
def test_no_file_gives_a_traceback_or_another_exit_code(generated):
    kind, data = generated
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input.yaml"
        path.write_bytes(data)
        for prog, argv in COMMANDS[kind]:
            code, err = run(prog, [a.replace("{file}", str(path)) for a in argv])
            assert code in (0, 2), (prog, argv, code, err[-2000:], data[:500])
            if code == 2:
                assert err.strip(), (prog, argv, "exit 2 without a message")
