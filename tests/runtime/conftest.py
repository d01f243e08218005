import pytest
from runtime_testlib import RUNTIME, RUNTIME_YAML, sglang_or_skip  # noqa: F401


@pytest.fixture
def runtime_yaml(tmp_path):
    def make(text: str = RUNTIME_YAML, **replace: str) -> str:
        for old, new in replace.items():
            text = text.replace(old, new)
        p = tmp_path / "runtime.yaml"
        p.write_text(text)
        return str(p)

    return make
