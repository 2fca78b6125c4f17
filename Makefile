# Two commands on a fresh machine: `make demo` and `make test` (`make docs`: the documentation).
PYTHON ?= python3
VENV   ?= .venv
TORCH_INDEX ?=
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
DOCS_SITE  ?= out/site

.PHONY: demo test lint docs install clean

# setup.py and _dgl_hook.py: the start-up file that lets `import dgl` come first (docs/dgl-import.md)
$(STAMP): pyproject.toml constraints.txt setup.py gnn_treelstm/_dgl_hook.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, at the version constraints.txt pins, so nothing pulls a CUDA build; off the
	# project's machines pick the build from PyTorch's index:
	# make install TORCH_INDEX=https://download.pytorch.org/whl/cpu (or .../whl/cu126 for CUDA 12.6)
	$(PY) -m pip install --quiet torch -c constraints.txt $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e ".[dev]" -c constraints.txt
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m gnn_treelstm demo

test: $(STAMP)
	$(PY) -m pytest -q tests

lint: $(STAMP)
	$(PY) -m ruff check .

# the documentation site (mkdocs.yml): --strict fails on a broken link, cross-reference or
# docstring section; DOCS_SITE=DIR builds it elsewhere
$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) -m mkdocs build --strict --site-dir $(DOCS_SITE)

clean:
	rm -rf $(VENV) runs/demo out/site
