"""The Dockerfile, parsed (no Docker engine here): stages, pinned bases, users, extras and entrypoints match
pyproject.toml's console scripts and extras."""

import json
import re
import tomllib

import pytest

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
