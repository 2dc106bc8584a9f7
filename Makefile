# Two commands do all the set-up on a fresh machine:
#   make demo   install, build the example models, tune bertQA, write the report
#   make test   install what the tests need (apt + pip), then run the whole suite
SHELL := /bin/bash
# The python backend stub embeds the system Python 3.11: the venv must be made from it.
PYTHON ?= $(shell test -x /usr/bin/python3.11 && echo /usr/bin/python3.11 || command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
DEMO_ARGS ?=

.PHONY: demo test install models test-env stubs lint clean

$(INSTALLED): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[local,examples,dev]'
	touch $@

install: $(INSTALLED)

models: $(INSTALLED)
	$(BIN)/python examples/build_models.py

demo: models
	$(BIN)/autotune run --model bertQA --sla-p95-ms 50 --model-repository examples/model_repository $(DEMO_ARGS)

# apt packages the real-component tests use (chromium, podman + the local Triton image, PostgreSQL)
test-env:
	bash scripts/setup-test-env.sh

test: models test-env
	set -a; [ -f .test-env ] && source .test-env; set +a; $(BIN)/python -m pytest $(PYTEST_ARGS)

# mypy stubs for tritonclient's model_config_pb2, generated from the installed wheel (nothing is
# committed): redone only when tritonclient, mypy-protobuf or the script change; the script leaves
# unchanged files alone, so the touch is what marks the target up to date.
STUBS := typings/tritonclient/grpc/model_config_pb2.pyi
$(STUBS): $(INSTALLED) scripts/protobuf_stubs.py \
		$(wildcard $(VENV)/lib/python*/site-packages/tritonclient/grpc/model_config_pb2.py) \
		$(wildcard $(VENV)/lib/python*/site-packages/mypy_protobuf/main.py)
	$(BIN)/python scripts/protobuf_stubs.py --out typings
	touch $@

stubs: $(STUBS)

# mypy checks the files that pyproject.toml's [tool.mypy] names
lint: stubs
	$(BIN)/ruff check autotune tests benchmarks examples scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .test-env typings
