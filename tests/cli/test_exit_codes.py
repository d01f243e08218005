"""Each input mistake a user can make ends in exit 2 and a message naming the file and field; never a traceback.

One test per case that used to end in a traceback (exit 1) or be silently accepted."""

from __future__ import annotations

import socket

import pytest
import yaml

from tests.cli.clitest import EXAMPLE, NVLINK_EXAMPLE, RUNTIME_EXAMPLE, SEED, deep_yaml, refused, runtime, specdecode


@pytest.fixture
def latin1(tmp_path):
    f = tmp_path / "latin1.yaml"
    f.write_bytes(EXAMPLE.read_text().replace("glm5-pcie", "glm5-p\u00e9").encode("latin-1"))
    return f


@pytest.fixture
def deep(tmp_path):
    f = tmp_path / "deep.yaml"
    f.write_text(deep_yaml())
    return f


def test_non_utf8_files(latin1):
    for r in (
        specdecode("validate", "-f", latin1),
        specdecode("render", "-f", latin1),
        specdecode("plan", "-f", EXAMPLE, "--scenario", latin1),
        runtime("simulate", "--scenario", latin1, "--offline"),
        runtime("launch", "--config", latin1, "--dry-run"),
    ):
        refused(r, str(latin1), "not UTF-8 text")


def test_deeply_nested_yaml(deep):
    for r in (
        specdecode("validate", "-f", deep),
        specdecode("plan", "-f", EXAMPLE, "--scenario", deep),
        runtime("launch", "--config", deep, "--dry-run"),
    ):
        refused(r, str(deep), "nested deeper than")


def test_invalid_yaml_to_launch_dry_run(tmp_path):
    f = tmp_path / "runtime.yaml"
    f.write_text("name: x\ntarget: [unclosed\n")
    refused(runtime("launch", "--config", f, "--dry-run"), f"{f}: line 3", "not valid YAML")


def test_duplicate_keys_are_refused(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text(EXAMPLE.read_text().replace("spec:\n", "spec:\n  replicas: 1\n  replicas: 2\n", 1))
    refused(specdecode("validate", "-f", f), "duplicate key 'replicas'")
    s = tmp_path / "dup-scenario.yaml"
    s.write_text(SEED.read_text() + "seed: 2\n")
    refused(runtime("simulate", "--scenario", s, "--offline"), "duplicate key 'seed'")


def test_runtime_port_out_of_range(tmp_path):
    f = tmp_path / "runtime.yaml"
    f.write_text(RUNTIME_EXAMPLE.read_text().replace("port: 30000", "port: 70000"))
    refused(runtime("launch", "--config", f, "--dry-run"), "server.port: Input should be less than or equal to 65535")


def test_runtime_config_errors_are_field_lines(tmp_path):
    data = yaml.safe_load(RUNTIME_EXAMPLE.read_text())
    del data["target"]
    data["speculative"]["numSteps"] = "three"
    data["nccl"]["profil"] = "PCIe"
    f = tmp_path / "runtime.yaml"
    f.write_text(yaml.safe_dump(data))
    err = refused(runtime("launch", "--config", f, "--dry-run"))
    lines = [line.strip() for line in err.splitlines()]
    assert "target: required" in lines
    assert "nccl.profil: unknown field" in lines
    assert any(line.startswith("speculative.numSteps: ") for line in lines)
    assert "https://" not in err and "For further information" not in err  # no pydantic links


def test_sdd_given_as_runtime_config_gets_a_hint():
    err = refused(runtime("launch", "--config", EXAMPLE, "--dry-run"), "this is a SpecDecodeDeployment")
    assert "-runtime ConfigMap" in err and "-o runtime-config" in err
    assert err.count("\n") <= 2  # one message, not one per missing field


def test_metadata_name_errors_name_the_field(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(EXAMPLE.read_text().replace("name: glm5-pcie", "name: GLM5_pcie"))
    err = refused(specdecode("validate", "-f", f))
    assert "metadata.name: metadata.name must be a DNS-1035 label" in err and "<root>" not in err


def test_plan_runs_the_cel_rules_and_accepts_multi_document_files(tmp_path):
    bad = tmp_path / "ranks.yaml"
    bad.write_text(EXAMPLE.read_text().replace("ranks: [0]", "ranks: [9]"))
    refused(specdecode("plan", "--file", bad, "--scenario", SEED), "spec.draft.ranks")
    both = tmp_path / "both.yaml"
    second = EXAMPLE.read_text().replace("name: glm5-pcie", "name: glm5-pcie-b")
    both.write_text(EXAMPLE.read_text() + "\n---\n" + second)
    r = specdecode("plan", "-f", both, "--scenario", SEED)
    assert r.returncode == 0, r.stderr
    assert "llm/glm5-pcie\n" in r.stdout and "llm/glm5-pcie-b\n" in r.stdout
    assert r.stdout.count("recommendation:") == 2


def test_plan_refuses_a_scenario_of_another_shape():
    err = refused(specdecode("plan", "-f", NVLINK_EXAMPLE, "--scenario", SEED), "describes another deployment")
    assert "draftTp.targetTp is 8 but spec.target.tensorParallelSize is 4" in err
    assert "interconnect is PCIe but spec.placement.interconnect is NVLink" in err


def test_simulate_offline_steps_must_be_a_candidate():
    refused(
        runtime("simulate", "--scenario", SEED, "--offline", "--candidates", "1,2", "--steps", "5"),
        "--steps 5 is not among --candidates; allowed: [1, 2]",
    )


def test_simulate_busy_port_says_so_before_running():
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        r = runtime("simulate", "--scenario", SEED, "--port", port, "--token-file", "/dev/null", timeout=60)
    err = refused(r, f"--port {port}: cannot listen")
    assert "running" not in err and "simulated runtime (SIMULATED" not in err


@pytest.mark.parametrize(
    "change, fragment",
    [
        ("batchSize: 1\n", "phases[0].batchSize: batch sizes must be whole numbers within 1..1000000, got 1e+30"),
        ("seconds: 600\n", "phases[0].seconds: Input should be less than or equal to 31536000, got 1e+300"),
        ("overhead: 0.3\n", "cost.overhead: must be a finite number, got nan"),
    ],
)
def test_scenario_numeric_bounds(tmp_path, change, fragment):
    replacement = {"batchSize": "batchSize: 1e30\n", "seconds: ": "seconds: 1e300\n", "overhead": "overhead: .nan\n"}
    new = next(v for k, v in replacement.items() if change.startswith(k))
    f = tmp_path / "s.yaml"
    text = SEED.read_text()
    assert change in text
    f.write_text(text.replace(change, new, 1))
    refused(specdecode("plan", "-f", EXAMPLE, "--scenario", f), fragment)


def test_operator_run_with_a_missing_kubeconfig_exits_2_at_once():
    r = specdecode(
        "operator",
        "run",
        "--metrics-port",
        "0",
        "--liveness-port",
        "0",
        env={"KUBECONFIG": "/nonexistent/kubeconfig", "KUBERNETES_SERVICE_HOST": ""},
        timeout=30,
    )
    refused(r, "no usable Kubernetes credentials", "/nonexistent/kubeconfig")


def test_operator_run_refuses_bad_and_busy_ports(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    env = {"KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": ""}
    refused(
        specdecode("operator", "run", "--liveness-port", "70000", env=env), "--liveness-port must be within 0..65535"
    )
    refused(specdecode("operator", "run", "--liveness", "nonsense", env=env), "--liveness must be an http://")
    with socket.create_server(("0.0.0.0", 0)) as busy:
        port = busy.getsockname()[1]
        refused(
            specdecode("operator", "run", "--metrics-port", "0", "--liveness-port", port, env=env, timeout=30),
            f"--liveness-port: cannot listen on 0.0.0.0:{port}",
        )


@pytest.mark.engine  # a real launch imports SGLang's server
@pytest.mark.slow
def test_missing_runtime_dependency_in_a_real_launch(tmp_path):
    """A real `launch` (no --dry-run) where a module SGLang imports is missing: a message, not a traceback."""
    import subprocess
    import sys

    from tests.cli.clitest import ROOT

    code = (
        "import sys; sys.modules['uvloop'] = None\n"  # as if uvloop were not installed
        "from specdecode_runtime.cli import main\n"
        f"sys.exit(main(['launch', '--config', {str(RUNTIME_EXAMPLE)!r}]))"
    )
    env = {
        "SPECDECODE_STATE_DIR": str(tmp_path / "state"),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "PATH": "/usr/bin:/bin",
    }
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    err = refused(r, "cannot start SGLang: Python module")
    # the module named is one that is really missing: uvloop, or whichever SGLang needs first that this
    # installation lacks (torchvision outside the runtime image; sglang itself where it is not installed)
    import re

    missing = re.search(r"Python module '([^']+)' is not installed", err).group(1)
    # asked in a fresh interpreter: this test process may hold the CPU mode's in-process torchvision stand-in
    probe = subprocess.run(
        [sys.executable, "-c", f"import importlib.util as u; print(u.find_spec({missing.split('.')[0]!r}))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert missing == "uvloop" or probe.stdout.strip() == "None", (err, probe.stdout)


def test_simulations_are_bounded_in_work(tmp_path):
    """A scenario whose decode step takes no time, or whose timeline holds too many steps, would never finish."""
    zero = tmp_path / "zero.yaml"
    zero.write_text(
        SEED.read_text()
        .replace("verify: {base: 10.7, perToken: 0.11}", "verify: {base: 0}")
        .replace("overhead: 0.3", "overhead: 0")
    )
    refused(
        runtime("simulate", "--scenario", zero, "--offline", "--steps", "0"),
        f"{zero}: cost: verify.base + verify.perToken + overhead must be > 0 ms",
    )
    long = tmp_path / "long.yaml"
    long.write_text(SEED.read_text().replace("seconds: 600", "seconds: 31536000"))
    refused(runtime("simulate", "--scenario", long, "--offline"), "phases: 3.1536e+07 simulated seconds", "shorten")
    refused(
        runtime("simulate", "--scenario", SEED, "--offline", "--duration", "1e8"),
        "--duration 1e+08 is too long for this scenario",
    )


def test_demo_with_an_unusable_kubeconfig(tmp_path):
    refused(
        specdecode("demo", "--kubeconfig", tmp_path / "missing", "--out", tmp_path / "out"),
        f"--kubeconfig {tmp_path / 'missing'}: cannot load",
    )


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["simulate", "--scenario", str(SEED), "--offline", "--speed", "nan"],
            "--speed: must be > 0 (a finite number)",
        ),
        (["simulate", "--scenario", str(SEED), "--offline", "--duration", "nan"], "--duration: must be > 0"),
        (["simulate", "--scenario", str(SEED), "--offline", "--speed", "1e12"], "--speed: must be at most 10000"),
        (["simulate", "--scenario", str(SEED), "--offline", "--seed", "-5"], "--seed: must be within 0.."),
        (["simulate", "--scenario", str(SEED), "--offline", "--candidates", "0,1,99999999999"], "within 0..64"),
        (["simulate", "--scenario", str(SEED), "--offline", "--steps", "65"], "--steps: must be within 0..64"),
    ],
)
def test_simulate_number_flags_are_bounded(args, fragment):
    refused(runtime(*args), fragment)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["demo", "--speed", "inf"], "--speed: must be > 0 (a finite number), got inf"),
        (["demo", "--max-seconds", "nan"], "--max-seconds: must be > 0"),
        (["operator", "run", "--resync-seconds", "nan"], "--resync-seconds: must be > 0"),
        (["operator", "run", "--tune-restart-seconds", "-1"], "--tune-restart-seconds: must be > 0"),
    ],
)
def test_specdecode_number_flags_are_bounded(args, fragment):
    refused(specdecode(*args), fragment)
