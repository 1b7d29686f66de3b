# Two commands do all set-up on a fresh machine:
#   make demo   export -> compile -> run -> check on a natural image (writes demo-out/)
#   make test   lint + the whole test suite
# Both create .venv with pinned versions first (torch 2.13.0 CPU comes from the local wheel).

PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade "pip>=23"
	$(BIN)/pip install -q -e ".[full,dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python scripts/demo.py demo-out

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python scripts/bench.py

clean:
	rm -rf $(VENV) demo-out
