# The two commands of the README: `make lab` and `make test`. Everything lives in .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8888
HOST ?= 127.0.0.1
STAMP := $(VENV)/.installed

.PHONY: lab test lint system-deps bench bench-grade scaling soak setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "DDP Basics needs Python 3.11 or newer (found " + sys.version.split()[0] + "); set PY=python3.11")'
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

# JupyterLab refuses to run as root unless told; root is common in containers.
# Without a display (a server, a container, CI) it prints the address instead of opening a browser.
lab: $(STAMP)
	$(BIN)/jupyter lab --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
		--ServerApp.port_retries=0 --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/lessons \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root ) \
		$$( [ -z "$$DISPLAY$$WAYLAND_DISPLAY" ] && [ "$$(uname)" != Darwin ] && echo --no-browser )

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Tests need bubblewrap (the grader's sandbox) and Chromium (pages looked at in a browser):
# installed here as root where apt is there; anyone else is told, and those tests fail
# with a message saying how to get them (they never skip).
SYSTEM_DEPS := bwrap:bubblewrap chromium:chromium
system-deps:
	@missing=""; for dep in $(SYSTEM_DEPS); do \
		command -v $${dep%%:*} >/dev/null || missing="$$missing $${dep#*:}"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing$$missing for the tests"; \
			apt-get install -y -qq $$missing >/dev/null 2>&1 || \
			{ apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; }; \
		else \
			echo "note: missing$$missing: the sandbox and browser tests will fail;" \
				"install them (Debian/Ubuntu: sudo apt-get install$$missing)"; \
		fi; fi

test: $(STAMP) lint system-deps
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/launch_overhead.py

bench-grade: $(STAMP)
	$(BIN)/python benchmarks/grading.py

scaling: $(STAMP)
	$(BIN)/python benchmarks/scaling.py

soak: $(STAMP)
	$(BIN)/python benchmarks/fault_soak.py --rounds 20

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
