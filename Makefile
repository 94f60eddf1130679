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
# The course's own JupyterLab settings (jupyter/: no news pop-up, no build prompts) come first
# on JUPYTER_CONFIG_PATH; LAB_ROOT is the folder served (the tests serve a copy).
LAB_ROOT ?= $(CURDIR)
FIRST_LESSON := lessons/01_rank_and_world_size.ipynb
lab: $(STAMP)
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	$(BIN)/jupyter lab --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
		--ServerApp.port_retries=0 --ServerApp.root_dir="$(LAB_ROOT)" \
		--LabApp.default_url=/lab/tree/$(FIRST_LESSON) \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root ) \
		$$( [ -z "$$DISPLAY$$WAYLAND_DISPLAY" ] && [ "$$(uname)" != Darwin ] && echo --no-browser )

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Tests need bubblewrap (the grader's sandbox) and Chromium (pages looked at in a browser).
# As root with apt (CI, containers) Debian's packages are installed; otherwise Chromium is
# Playwright's own download, and a missing bubblewrap is named. Tests that need what is
# still missing fail with a message saying how to get it: they never skip.
system-deps: $(STAMP)
	@missing=""; command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		missing="$$missing chromium"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing for the tests"; \
		apt-get install -y -qq $$missing >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; }; \
	else \
		case "$$missing" in *chromium*) \
			echo "no system Chromium: using Playwright's own"; \
			$(BIN)/python -m playwright install chromium || \
			echo "note: no Chromium: the browser tests will fail (sudo apt-get install chromium)";; \
		esac; \
		case "$$missing" in *bubblewrap*) \
			echo "note: no bubblewrap: the sandbox tests will fail (sudo apt-get install bubblewrap)";; \
		esac; \
	fi

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
