# The two commands a newcomer needs: `make book` and `make test`. Both create .venv if it is missing,
# install what changed since the last install, and can be run again at any time.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

# MathJax is served from the site, so that pages render without a network (see _config.yml).
MATHJAX_VERSION := 3.2.2
VENDOR := _build/vendor
MATHJAX := $(VENDOR)/mathjax/es5/tex-chtml.js
# What tex-chtml.js loads: its fonts, the TeX packages it autoloads, and the accessibility tools of its menu.
MATHJAX_PARTS := es5/tex-chtml.js es5/output/chtml/fonts es5/input/tex/extensions es5/a11y es5/sre
# The chapters' outputs depend on posenc_ref and on the studies committed in book/data, but the execution cache
# is keyed on the cells' code only: a change of either hash clears the cache (and Sphinx's environment, so that
# every chapter is read again).
CODE_HASH_FILE := _build/.posenc_ref.hash
DATA_HASH_FILE := _build/.data.hash
# Chapter 6's live run keeps each trained model here, so that a build stopped midway continues; its folders are
# named by the settings and posenc_ref's code, and cleared with the cache when posenc_ref changes (not when only
# book/data does: the runs do not depend on it).
LIVE_RUNS := _build/live-runs
CHROMIUM := /usr/bin/chromium
# axe-core, the accessibility checker that the browser test (tests/test_book_a11y.py) runs on every page;
# fetched from the npm registry like MathJax, kept out of the site (_build/vendor is served, this is not).
AXE_VERSION := 4.14.1
AXE := _build/test_vendor/axe-core-$(AXE_VERSION)/axe.min.js

.PHONY: book test install lint clean mathjax axe chromium bubblewrap postgresql

$(INSTALLED): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(INSTALLED)

install: $(INSTALLED)

$(MATHJAX):
	rm -rf $(VENDOR)/mathjax && mkdir -p $(VENDOR)/mathjax
	cd $(VENDOR) && npm pack --silent mathjax@$(MATHJAX_VERSION) > /dev/null
	tar -xzf $(VENDOR)/mathjax-$(MATHJAX_VERSION).tgz -C $(VENDOR)/mathjax --strip-components=1 \
		$(addprefix package/,$(MATHJAX_PARTS))
	rm $(VENDOR)/mathjax-$(MATHJAX_VERSION).tgz

mathjax: $(MATHJAX)

$(AXE):
	rm -rf $(dir $(AXE)) && mkdir -p $(dir $(AXE))
	cd $(dir $(AXE)) && npm pack --silent axe-core@$(AXE_VERSION) > /dev/null
	tar -xzf $(dir $(AXE))axe-core-$(AXE_VERSION).tgz -C $(dir $(AXE)) --strip-components=1 package/axe.min.js
	rm $(dir $(AXE))axe-core-$(AXE_VERSION).tgz

axe: $(AXE)

$(CHROMIUM):
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y chromium

chromium: $(CHROMIUM)

# The grader runs every student's kernel in bubblewrap (autograder/sandbox.py).
BWRAP := /usr/bin/bwrap
$(BWRAP):
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y bubblewrap

bubblewrap: $(BWRAP)

# tests/test_grader_gradebook.py starts Debian's PostgreSQL server on loopback for a gradebook test.
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb > /dev/null 2>&1 || { apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; }

# A failed build also drops Sphinx's environment: an incremental build does not repeat the warnings of
# pages it does not read again, so the next build reads every page (executed notebooks stay cached).
book: $(INSTALLED) $(MATHJAX)
	@mkdir -p _build
	@code_hash=$$(find posenc_ref -name '*.py' | LC_ALL=C sort | xargs sha256sum requirements.txt | sha256sum); \
	data_hash=$$(find book/data -type f ! -name '*.pt' | LC_ALL=C sort | xargs sha256sum | sha256sum); \
	if [ "$$code_hash" != "$$(cat $(CODE_HASH_FILE) 2>/dev/null)" ]; then \
		echo "posenc_ref or requirements.txt changed: every chapter will be executed again"; \
		rm -rf _build/.jupyter_cache _build/.doctrees $(LIVE_RUNS); \
		echo "$$code_hash" > $(CODE_HASH_FILE); \
	elif [ "$$data_hash" != "$$(cat $(DATA_HASH_FILE) 2>/dev/null)" ]; then \
		echo "book/data changed: every chapter will be executed again (chapter 6 keeps its trained live runs)"; \
		rm -rf _build/.jupyter_cache _build/.doctrees; \
	fi; \
	echo "$$data_hash" > $(DATA_HASH_FILE)
	@# matplotlib builds its font cache on first import and says so on stderr; not inside a chapter.
	$(BIN)/python -c "import matplotlib.pyplot"
	$(BIN)/jupyter-book build . --builder html -W -n --keep-going || { rm -rf _build/.doctrees; exit 1; }

lint: $(INSTALLED)
	$(BIN)/ruff check .

# The browser tests (tests/test_book*.py) open every page of the built book in Chromium.
test: lint book $(AXE) $(CHROMIUM) $(BWRAP) postgresql
	$(BIN)/python -m pytest

clean:
	rm -rf _build
