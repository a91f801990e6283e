# The two commands of the README: `make demo` and `make test`.
# Both create the virtual environment and install the pinned dependencies
# first, so they work on a fresh machine with nothing but Python 3.11 (and
# Java 17); the install ends with the driver's class archive, which Spark
# jobs start from (streaming/class_archive.py).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast test-unit lint bench clean

install: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/python -m streaming.class_archive
	$(BIN)/python -c "from matcher.preload.cell_answers import warm; warm()"
	touch $(STAMP)

demo: install
	$(BIN)/tsm demo

# Two workers (pytest-xdist): the integration tests in two lanes, one a worker,
# each one test at a time (tests/conftest.py); the unit tests after them. The
# slowest tests are listed at the end (the suite must stay under 30 minutes).
test: install
	$(BIN)/ruff check .
	$(BIN)/pytest -q -n 2 --durations=30

# The unit tests and the quicker integration tests: all but those marked `slow`.
test-fast: install
	$(BIN)/ruff check .
	$(BIN)/pytest -q -n 2 -m "not slow"

test-unit: install
	$(BIN)/pytest -q -m "not integration"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/tsm bench matcher

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
