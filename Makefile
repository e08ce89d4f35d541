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

# The suite on TEST_WORKERS pytest-xdist workers (one per core by default), each test
# file on one worker; then the tests marked solo, which compare latencies and so need
# the machine to themselves, one at a time. TEST_WORKERS=0 runs everything in one
# process (docs/testing.md). PYTEST_ARGS adds options to both runs.
TEST_WORKERS ?= auto

test: install
	$(COMPILE)
ifeq ($(TEST_WORKERS),0)
	$(BIN)/python -m pytest -n 0 $(PYTEST_ARGS)
else
	@# both runs run; exit status 5 is "no test selected" (PYTEST_ARGS chose none of them)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not solo" $(PYTEST_ARGS); \
	  others=$$?; \
	  $(BIN)/python -m pytest -n 0 -m solo $(PYTEST_ARGS); solo=$$?; \
	  echo "make test: others exit $$others, solo exit $$solo"; \
	  case "$$others $$solo" in "0 0"|"0 5"|"5 0") ;; *) exit 1;; esac
endif

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
