"""One SGLang version: ``contract/versions.py`` holds it; every other mention must agree, and code derives it.

A version bump changes the pin, and this test then names each file that still says the old version (docs,
docstrings, the Dockerfile's base image, the CPU requirements). Recorded benchmark results keep the version they
were measured with, and are not checked.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from specdecode_runtime.contract.versions import SGLANG_VERSION

ROOT = Path(__file__).resolve().parents[1]
# "SGLang 0.5.23", "sglang==0.5.23", "lmsysorg/sglang:v0.5.23", "sglang-0.5.23"
MENTION = re.compile(r"(?i)sglang(?:==|:v|\s+v?|-)(\d+\.\d+\.\d+)")
RECORDS = ("bench/results/", "tests/golden/")  # measured or generated with a version of their own
SELF = "tests/test_sglang_pin.py"  # plants stale versions on purpose
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".yaml", ".yml", ".sh", ""}


def tracked_files(root: Path = ROOT) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        root / f
        for f in out
        if not f.startswith(RECORDS) and f != SELF and (root / f).suffix in TEXT_SUFFIXES and (root / f).is_file()
    ]


def wrong_mentions(files: list[Path], pin: str, root: Path = ROOT) -> list[str]:
    bad = []
    for f in files:
        try:
            text = f.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for m in MENTION.finditer(line):
                if m.group(1) != pin:
                    bad.append(f"{f.relative_to(root)}:{n}: {m.group(0)}")
    return bad


def hard_coded_pins(files: list[Path], pin: str, root: Path = ROOT) -> list[str]:
    """String literals in Python code (docstrings aside) that spell the version instead of importing it."""
    bad = []
    for f in files:
        if f.suffix != ".py" or f.name == "versions.py":
            continue
        tree = ast.parse(f.read_text(), str(f))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and pin in node.value
                and id(node) not in docstrings
            ):
                bad.append(f"{f.relative_to(root)}:{node.lineno}: {node.value[:60]!r}")
    return bad


def test_every_mention_of_an_sglang_version_is_the_pin():
    bad = wrong_mentions(tracked_files(), SGLANG_VERSION)
    assert not bad, f"these name another SGLang than the pin {SGLANG_VERSION}:\n" + "\n".join(bad)


def test_code_and_tests_import_the_pin_rather_than_spell_it():
    bad = hard_coded_pins(tracked_files(), SGLANG_VERSION)
    assert not bad, "import SGLANG_VERSION from specdecode_runtime.contract.versions:\n" + "\n".join(bad)


def test_the_dockerfile_and_the_install_derive_from_the_pin():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"ARG SGLANG_IMAGE=lmsysorg/sglang:v{SGLANG_VERSION}\n" in dockerfile
    makefile = (ROOT / "Makefile").read_text()
    assert "sglang==$(SGLANG_VERSION)" in makefile and "contract/versions.py" in makefile


def test_a_planted_stale_version_is_reported(tmp_path):
    (tmp_path / "Dockerfile").write_text("ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.22\n")
    (tmp_path / "mod.py").write_text('"""Works with SGLang 0.5.23."""\nVERSION = "0.5.23"\n')
    files = [tmp_path / "Dockerfile", tmp_path / "mod.py"]
    assert wrong_mentions(files, "0.5.23", tmp_path) == ["Dockerfile:1: sglang:v0.5.22"]
    assert hard_coded_pins(files, "0.5.23", tmp_path) == ["mod.py:2: '0.5.23'"]
