# pytapp: make demo | make test | make lint | make bench
VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed-all

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml meson.build
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet 'meson-python>=0.16' 'meson>=1.4' ninja 'numpy>=2.1'
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pip install --quiet --no-build-isolation -e '.[all]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/01_contraction.py
	$(PY) -m pytapp bench --suite quick

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests examples
	$(VENV)/bin/mypy
	@# -S: the editable install's import hook hides src/ from import-linter's module scan
	PYTHONPATH=src:$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
		$(PY) -S -c 'import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())' 

test: lint
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m pytapp bench --suite full --backend auto blas tblis torch --json docs/benchmarks.json --plot docs/benchmarks.png --markdown docs/benchmarks.md
	$(PY) -m pytapp bench --suite networks --repeats 15 --json docs/networks.json --plot docs/networks.png --markdown docs/networks.md
	$(PY) -m pytapp bench --suite dask --json docs/dask.json --plot docs/dask.png --markdown docs/dask.md
	$(PY) -m pytapp bench --suite targets --json docs/targets.json --plot docs/targets.png --markdown docs/targets.md
	$(PY) -m pytapp bench --suite cc --repeats 5 --json docs/cc.json --markdown docs/cc.md
	$(PY) -m pytapp bench --suite dmrg --repeats 9 --json docs/dmrg.json --markdown docs/dmrg.md
	$(PY) -m pytapp bench --suite torch --repeats 9 --json docs/torch.json --plot docs/torch.png --markdown docs/torch.md

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache
