# The two commands: `make demo` runs the main job, `make test` runs the suite. Each sets up .venv first; `make test`
# also the services and the browser the suite talks to (scripts/test-setup), before anything slow.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: demo test test-setup lint

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(VENV)/bin/quire demo

test-setup:
	scripts/test-setup

test: test-setup $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n 2 --dist loadgroup

lint: $(STAMP)
	$(VENV)/bin/ruff check .
