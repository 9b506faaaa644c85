# pplx_nb — every command creates .venv on first use and installs the project into it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev

.PHONY: test test-smoke test-pythons test-fast lint bench conformance demo mcp sim clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev,lab]'
	touch $(STAMP)

# The example notebooks under nbval. matplotlib's one-time font-cache notice must not land in a
# notebook's compared output, hence the import first.
define run-notebooks
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then \
		$(PY) -c 'import matplotlib.pyplot' && \
		PPLX_NB_OFFLINE=1 PPLX_NB_SIM_LATENCY_MS=0 PPLX_NB_SIM_DEEP_RESEARCH_SECONDS=1 \
			$(PY) -m pytest -p no:cacheprovider --nbval --nbval-current-env \
			--nbval-sanitize-with notebooks/sanitize.cfg notebooks/; \
	fi
endef

## test: the whole suite — unit, simulator, store, jobs, MCP, notebooks (nbval), browser
test: $(STAMP)
	PPLX_NB_OFFLINE=1 $(PY) -m pytest tests
	$(run-notebooks)

## test-pythons: notebooks and smoke tests under every other CPython >= 3.11 found (own venvs)
test-pythons:
	$(PYTHON) tests/other_pythons.py

## test-smoke: what test-pythons runs with each Python (VENV=.venv-pythons/... PYTHON=...)
test-smoke: $(STAMP)
	PPLX_NB_OFFLINE=1 $(PY) -m pytest -p no:cacheprovider tests/test_smoke.py
	$(run-notebooks)

## test-fast: the suite without multi-process stress and browser tests
test-fast: $(STAMP)
	PPLX_NB_OFFLINE=1 $(PY) -m pytest tests -m 'not slow and not browser' -x -q

lint: $(STAMP)
	$(PY) -m ruff check pplx_nb tests bench
	$(PY) -m ruff format --check pplx_nb tests bench
	$(PY) -m mypy

## bench: compare pplx_nb with the alternatives; writes bench/RESULTS.md
bench: $(STAMP)
	$(PY) -m bench

## conformance: the official MCP conformance suite against the server over HTTP (installs it via npm)
conformance: $(STAMP)
	PPLX_NB_OFFLINE=1 $(PY) tests/mcp_conformance.py

## demo: JupyterLab on the example notebooks (offline simulator unless PERPLEXITY_API_KEY is set)
DEMO_STAMP := $(VENV)/.installed-lab
DEMO_PORT  ?= 8888
DEMO_ARGS  ?=

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[lab]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" binder/postBuild
	@if [ -z "$$PERPLEXITY_API_KEY" ]; then \
		backend="offline simulator (no PERPLEXITY_API_KEY set)"; \
	elif [ "$${PPLX_NB_OFFLINE:-0}" = 1 ]; then \
		backend="offline simulator (PPLX_NB_OFFLINE=1)"; \
	else \
		backend="Perplexity API"; \
	fi; \
	token="$$($(PY) -c 'import secrets; print(secrets.token_hex(16))')"; \
	echo ""; \
	echo "pplx_nb demo — backend: $$backend"; \
	echo "JupyterLab:  http://127.0.0.1:$(DEMO_PORT)/lab/tree/01-quickstart.ipynb?token=$$token"; \
	echo "Stop it with Ctrl-C."; \
	echo ""; \
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" \
	CONVERSATION_LOGS_DIR="$${CONVERSATION_LOGS_DIR:-$(CURDIR)/conversation-logs}" \
		exec binder/start $(PY) -m jupyterlab \
		--ServerApp.root_dir=notebooks --ServerApp.ip=127.0.0.1 \
		--ServerApp.port=$(DEMO_PORT) --ServerApp.port_retries=0 \
		--IdentityProvider.token="$$token" \
		$$([ "$$(id -u)" = 0 ] && echo --ServerApp.allow_root=True) $(DEMO_ARGS)

sim: $(STAMP)
	$(PY) -m pplx_nb.sim

mcp: $(STAMP)
	$(PY) -m pplx_nb.mcp

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
