"""The Dockerfile, parsed (no Docker engine here): stages, pinned bases, users, extras and entrypoints match
pyproject.toml's console scripts and extras."""

import json
import re
import tomllib

import pytest

from specdecode_runtime.contract.versions import SGLANG_VERSION
from tests.chart.chartlib import ROOT

TEXT = (ROOT / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", TEXT)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> dict[str, dict]:
    args = {}
    result: dict[str, dict] = {}
    current = None
    for word, rest in instructions():
        if word == "ARG" and current is None:
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)\s+AS\s+(\S+)", rest, re.I)
            image = re.sub(r"\$\{(\w+)\}", lambda g: args[g.group(1)], m.group(1))
            current = result.setdefault(m.group(2), {"from": image, "user": None, "entrypoint": None, "run": []})
        elif current is not None and word == "USER":
            current["user"] = rest
        elif current is not None and word == "ENTRYPOINT":
            current["entrypoint"] = json.loads(rest)
        elif current is not None and word == "RUN":
            current["run"].append(rest)
    return result


def test_stages_exist():
    assert {"build", "operator", "runtime"} <= set(stages())


@pytest.mark.parametrize("stage", ["build", "operator", "runtime"])
def test_base_images_are_pinned(stage):
    image = stages()[stage]["from"]
    assert "@sha256:" in image or re.search(r":[\w][\w.-]*$", image.split("/")[-1]), image
    assert not image.endswith(":latest")


DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# A tag that names one release (MAJOR.MINOR.PATCH, optionally v-prefixed and with a variant suffix such as
# -slim-bookworm), not a moving one (latest, 3.11, 3.11-slim, stable, nightly).
PINNED_TAG = re.compile(r":v?[0-9]+\.[0-9]+\.[0-9]+([-_.+][A-Za-z0-9][-A-Za-z0-9_.+]*)?$")


def from_problems(text: str) -> list[str]:
    """Every FROM line (any stage, named or not) whose image is neither pinned by digest nor by a release tag,
    after the global ARG defaults are substituted; ``scratch`` and earlier stages are not images."""
    args: dict[str, str] = {}
    seen_stages: set[str] = set()
    problems = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "ARG" and not seen_stages and "=" in rest:
            name, _, default = rest.strip().partition("=")
            args[name] = default.strip().strip('"')
        if word.upper() != "FROM":
            continue
        parts = [p for p in rest.split() if not p.startswith("--")]
        if not parts:
            problems.append(f"{line.strip()}: no image")
            continue
        image = re.sub(r"\$\{?(\w+)\}?", lambda g: args.get(g.group(1), ""), parts[0])
        if len(parts) >= 3 and parts[1].upper() == "AS":
            seen_stages.add(parts[2])
        if image == "scratch" or image in seen_stages - ({parts[2]} if len(parts) >= 3 else set()):
            continue
        if not (DIGEST.search(image) or PINNED_TAG.search(image.rsplit("/", 1)[-1])):
            problems.append(f"{line.strip()}: {image or '(empty)'} is pinned neither by digest nor by a release tag")
    return problems


def test_every_from_line_is_pinned_by_digest_or_a_release_tag():
    assert from_problems(TEXT) == []


@pytest.mark.parametrize(
    "line,pinned",
    [
        ("FROM python:3.11.11-slim-bookworm AS a", True),
        (f"FROM lmsysorg/sglang:v{SGLANG_VERSION} AS a", True),
        ("FROM python@sha256:" + "0" * 64 + " AS a", True),
        ("FROM registry.example:5000/team/img:1.2.3 AS a", True),
        ("FROM scratch", True),
        ("FROM python:3.11-slim AS a", False),
        ("FROM python:3.11 AS a", False),
        ("FROM python AS a", False),
        ("FROM python:latest AS a", False),
        ("FROM registry.example:5000/team/img AS a", False),
        ("FROM python@sha256:abc AS a", False),
        ("FROM --platform=$BUILDPLATFORM python:3.11 AS a", False),
        ("ARG BASE=python:3.11\nFROM ${BASE} AS a", False),
        ("ARG BASE\nFROM $BASE AS a", False),
        ("ARG BASE=python:3.11.11\nFROM ${BASE} AS a\nFROM a AS b", True),
        ("FROM b AS a", False),  # a stage not defined earlier is an image named b
    ],
)
def test_the_pin_check_itself(line, pinned):
    assert (from_problems(line) == []) is pinned, from_problems(line)


def test_runtime_is_built_from_the_pinned_sglang():
    from specdecode_operator.images import SGLANG_IMAGE
    from specdecode_runtime.contract.versions import SGLANG_VERSION

    assert stages()["runtime"]["from"] == SGLANG_IMAGE == f"lmsysorg/sglang:v{SGLANG_VERSION}"


def test_operator_runs_as_non_root_with_uid_matching_the_chart():
    import yaml

    user = stages()["operator"]["user"]
    uid = int(user.split(":")[0])
    assert uid != 0
    values = yaml.safe_load((ROOT / "charts" / "specdecode-operator" / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == uid


@pytest.mark.parametrize("stage,extra", [("operator", "operator"), ("runtime", "runtime")])
def test_each_image_installs_only_its_extra(stage, extra):
    installs = [r for r in stages()[stage]["run"] if "pip install" in r]
    assert len(installs) == 1
    extras = re.findall(r"\.whl\)\[([\w,-]+)\]", installs[0])
    assert extras == [extra]
    assert extra in PYPROJECT["project"]["optional-dependencies"]
    assert "torch" not in " ".join(PYPROJECT["project"]["optional-dependencies"]["operator"])


@pytest.mark.parametrize(
    "stage,script,subcommand",
    [("operator", "specdecode", ["operator", "run"]), ("runtime", "specdecode-runtime", ["launch"])],
)
def test_entrypoints_are_the_packages_console_scripts(stage, script, subcommand):
    entry = stages()[stage]["entrypoint"]
    assert entry == [script, *subcommand]
    assert script in PYPROJECT["project"]["scripts"]


def test_wheel_name_matches_the_project_name():
    name = PYPROJECT["project"]["name"].replace("-", "_")
    for stage in ("operator", "runtime"):
        assert f"/wheels/{name}-*.whl" in stages()[stage]["run"][-1]


def test_dockerignore_keeps_the_context_small():
    ignored = {
        l.strip() for l in (ROOT / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")
    }
    assert {".git", ".venv", "tests", "charts"} <= ignored
    copied = re.findall(r"^COPY (?!--from)(.+?) \S+$", TEXT, re.M)
    for src in " ".join(copied).split():
        assert src not in ignored, src


def test_runtime_runs_as_the_non_root_uid_the_rendered_pod_sets():
    from specdecode_operator.render.pod import RUNTIME_UID

    user = stages()["runtime"]["user"]
    assert user == f"{RUNTIME_UID}:{RUNTIME_UID}" and RUNTIME_UID != 0
