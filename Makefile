# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test fuzz lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The suite and the demo start many gateway and simulator processes: the sources are
# compiled to bytecode once here, so that none of them compiles them again (an
# environment with PYTHONDONTWRITEBYTECODE set would otherwise recompile in each).
COMPILE := $(BIN)/python -m compileall -q -j 0 src

demo: install
	$(COMPILE)
	$(BIN)/fairgate demo

# TEST_WORKERS=2 (or auto) runs the suite on that many pytest-xdist workers, each test
# file on one worker; 0, the default until a whole parallel run is green, runs it in one
# process (docs/testing.md). PYTEST_ARGS adds options either way.
TEST_WORKERS ?= 0

test: install
	$(COMPILE)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The security properties (marked `fuzz`) with many more examples than `make test` gives
# them; FUZZ_EXAMPLES sets how many (20000 each by default).
fuzz: install
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -m fuzz --timeout=0 -q $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/mypy benchmarks  # scripts importing each other by name: checked as files
	$(BIN)/lint-imports

# The full path (what operators run) on memory and on a private Redis, in one run;
# BENCH_ARGS adds options (e.g. --repeat 2).
bench: install
	$(BIN)/python benchmarks/overhead.py --path full --state both $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
