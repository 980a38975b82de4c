# Muse Experiments developer commands. Every target installs what it needs first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: install lint format test demo run worker upstreams bench clean

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

test: install
	$(BIN)/pytest $(ARGS)

# The main job: platform + worker + simulated upstreams, 2,000 sessions, results table.
demo: install
	DJANGO_DEBUG=true $(BIN)/python manage.py migrate --noinput
	DJANGO_DEBUG=true $(BIN)/python manage.py demo $(ARGS)

run: install
	DJANGO_DEBUG=true $(BIN)/python manage.py migrate --noinput
	DJANGO_DEBUG=true $(BIN)/gunicorn muse_experiments.wsgi -b 127.0.0.1:8000 -k gthread --workers 2 --threads 16

worker: install
	DJANGO_DEBUG=true $(BIN)/celery -A muse_experiments worker -Q completions,analytics,maintenance --pool threads --concurrency 16 -l info

upstreams: install
	$(BIN)/python -m routing.fake_upstreams --port 8900

bench: install
	$(BIN)/python bench/bench_assignment.py
	$(BIN)/python bench/bench_stats_engine.py

clean:
	rm -rf var .pytest_cache .ruff_cache
