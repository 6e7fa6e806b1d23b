# Two entry points for a fresh machine (Python 3.11 + apt): `make run`, `make test`.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: setup run test fixtures

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# The main job.
run: setup
	$(VENV)/bin/unwind-harness run

# The test suite (CI runs exactly this).
test: setup
	$(VENV)/bin/python -m pytest

# Rebuild the committed ARM32 Thumb-2 ELF fixtures (installs GCC/clang with apt when missing).
fixtures:
	bash corpus/fixtures/build.sh
