# The two commands a newcomer needs: `make book` and `make test`. Both create .venv if it is missing,
# install what changed since the last install, and can be run again at any time.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: book test install lint clean

$(INSTALLED): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(INSTALLED)

install: $(INSTALLED)

book: $(INSTALLED)
	$(BIN)/jupyter-book build . --builder html -W -n --keep-going

lint: $(INSTALLED)
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest

clean:
	rm -rf _build
