"""What each command offers besides errors: versions, shell completion, the runtime.yaml example, port/endpoint
overrides, and the demo's failure exit."""

from __future__ import annotations

import argparse
from importlib import metadata

import pytest

from tests.cli.clitest import EXAMPLE, ROOT, RUNTIME_EXAMPLE, runtime, specdecode

RUNTIME_EXAMPLE_COMMAND = (
    f"specdecode render -f examples/{EXAMPLE.name} -o runtime-config > examples/runtime/{RUNTIME_EXAMPLE.name}"
)


def test_versions_come_from_the_package_metadata():
    version = metadata.version("specdecode-operator")
    assert specdecode("--version").stdout.strip() == f"specdecode {version}"
    assert runtime("--version").stdout.strip() == f"specdecode-runtime {version}"


def test_shipped_runtime_yaml_is_what_render_prints():
    """examples/runtime/ holds the runtime.yaml the operator puts into the example's ConfigMap."""
    r = specdecode("render", "-f", EXAMPLE, "-o", "runtime-config")
    assert r.returncode == 0, r.stderr
    assert r.stdout == RUNTIME_EXAMPLE.read_text(), f"stale example; regenerate with: {RUNTIME_EXAMPLE_COMMAND}"
    dry = runtime("launch", "--config", RUNTIME_EXAMPLE, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "--tp-size 8" in dry.stdout


@pytest.mark.parametrize("prog, run", [("specdecode", specdecode), ("specdecode-runtime", runtime)])
def test_completion_script_and_protocol(tmp_path, prog, run):
    script = run("completion", "bash")
    assert script.returncode == 0 and "complete -o nospace -o default -o bashdefault -F" in script.stdout
    assert prog in script.stdout
    # What the shell does on <TAB>: argcomplete's protocol, answered by the real parser.
    out = tmp_path / "completions"
    line = f"{prog} " + ("ren" if prog == "specdecode" else "sim")
    r = run(
        env={
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_IFS": "\n",
            "_ARGCOMPLETE_SHELL": "bash",
        }
    )
    assert r.returncode == 0, r.stderr
    assert out.read_text().split() == (["render"] if prog == "specdecode" else ["simulate"])
    line = "specdecode plan --sc" if prog == "specdecode" else "specdecode-runtime launch --dr"
    r = run(
        env={
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_IFS": "\n",
            "_ARGCOMPLETE_SHELL": "bash",
        }
    )
    assert out.read_text().split() == (["--scenario"] if prog == "specdecode" else ["--dry-run"])


def test_help_does_not_load_the_operator_or_torch():
    import subprocess
    import sys

    code = (
        "import sys\nfrom specdecode_operator.cli import main\n"
        "try:\n    main(['validate', '-f', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('kopf', 'torch', 'aiohttp', 'matplotlib', 'sglang') if m in sys.modules)\n"
        "print(heavy)"
    )
    r = subprocess.run([sys.executable, "-c", code, str(EXAMPLE)], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout + r.stderr


def _operator_args(*flags: str) -> argparse.Namespace:
    from specdecode_operator.cli import build_parser

    return build_parser("operator").parse_args(["operator", "run", *flags])


@pytest.mark.parametrize(
    "flags, endpoint",
    [
        ((), "http://0.0.0.0:8081/healthz"),
        (("--liveness-port", "0"), None),
        (("--liveness", "off"), None),
        (("--liveness-port", "9100"), "http://0.0.0.0:9100/healthz"),
        (("--liveness", "http://127.0.0.1:9101/healthz"), "http://127.0.0.1:9101/healthz"),
    ],
)
def test_liveness_overrides_are_honoured(flags, endpoint, monkeypatch):
    import os

    from specdecode_operator.cli.operator import config_from_args

    for var in [v for v in os.environ if v.startswith("SPECDECODE_")]:
        monkeypatch.delenv(var)
    assert config_from_args(_operator_args(*flags)).liveness_endpoint == endpoint


def test_an_explicit_none_override_turns_an_endpoint_off():
    """The demo's and the tests' operators run with liveness_endpoint=None: it must not fall back to :8081."""
    from specdecode_operator.config import OperatorConfig

    assert OperatorConfig.from_env({}, liveness_endpoint=None).liveness_endpoint is None
    assert OperatorConfig.from_env({}).liveness_endpoint == "http://0.0.0.0:8081/healthz"


def test_demo_exits_non_zero_with_the_reason(monkeypatch, capsys, tmp_path):
    from specdecode_operator import cli
    from specdecode_operator.demo import run as demo_run

    def operator_died(options):
        raise demo_run.DemoFailed("the operator stopped: OSError(98, 'address already in use')")

    monkeypatch.setattr(demo_run, "run_demo", operator_died)
    assert cli.main(["demo", "--out", str(tmp_path)]) == 1
    assert "demo failed: the operator stopped: OSError(98" in capsys.readouterr().err


def test_demo_refuses_when_nothing_ran():
    from specdecode_operator.demo.run import DemoFailed, _check_it_ran

    with pytest.raises(DemoFailed, match="no simulated runtime pod started.*boom"):
        _check_it_ran([], 0.0, {}, ["boom"])
    with pytest.raises(DemoFailed, match="produced no tokens"):
        _check_it_ran([object()], 0.0, {"Ready": "True"}, [])
    with pytest.raises(DemoFailed, match="no status conditions"):
        _check_it_ran([object()], 10.0, {}, [])
    _check_it_ran([object()], 10.0, {"Ready": "True"}, [])


def test_demo_checks_its_input_files_first(tmp_path):
    bad = tmp_path / "sdd.yaml"
    bad.write_text(EXAMPLE.read_text().replace("tensorParallelSize: 1", "tensorParallelSize: 3"))
    r = specdecode("demo", "-f", bad, "--out", tmp_path / "out")
    assert r.returncode == 2 and "spec.draft.tensorParallelSize" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_every_command_loads_and_answers_help(capsys):
    """Each lazily loaded command module declares the command it is registered under, with its own arguments."""
    from specdecode_operator import cli

    for name in cli.COMMANDS:
        with pytest.raises(SystemExit) as done:
            cli.build_parser(name).parse_args([name, "--help"])
        assert done.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: specdecode {name}")


def test_help_loads_no_command_module():
    """`specdecode --help` lists every command by name without importing any of them (nor pydantic or PyYAML)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom specdecode_operator.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('specdecode_operator.cli.') or m.split('.')[0] in "
        "('pydantic', 'yaml', 'kubernetes', 'jsonschema', 'cel')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout + r.stderr
    for name in ("render", "validate", "crd", "plan", "bench", "demo", "operator", "completion"):
        assert f"    {name}" in r.stdout


def test_runtime_commands_loaded_lazily_keep_their_own_help():
    """`specdecode-runtime --help` shows, for a command not loaded, the help its module declares."""
    from specdecode_runtime import cli as runtime_cli

    def helps(parser):
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {c.dest: c.help for c in action._choices_actions}

    assert helps(runtime_cli.build_parser("*")) == helps(runtime_cli.build_parser(None))
