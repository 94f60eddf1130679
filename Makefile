# The two commands of the README: `make lab` and `make test`. Everything lives in .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8888
HOST ?= 127.0.0.1
STAMP := $(VENV)/.installed

.PHONY: lab notebook test test-fast lint system-deps system-packages setup-and-packages bench bench-grade bench-checks bench-warm-up scaling soak restart-soak teardown-soak teardown-plain-soak exit-soak ending-soak setup clean lock compat site

setup: $(STAMP)

# pyproject.toml says which releases the code works with; constraints.txt, which version of each
# package this .venv gets: those the stored outputs were made with.
LOCK := constraints.txt
# INSTALLER=pip: pip alone (tools/install.py says why uv is the default).
INSTALLER ?= uv
$(STAMP): pyproject.toml $(LOCK) tools/install.py
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "DDP Basics needs Python 3.11 or newer (found " + sys.version.split()[0] + "); set PY=python3.11")'
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python tools/install.py $(BIN)/python $(LOCK) --installer $(INSTALLER)
	@# byte-compiled on every core (what fails to compile, pip skips too)
	@$(BIN)/python -m compileall -qq -j 0 \
		"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || :
	touch $(STAMP)

# constraints.txt again from pyproject.toml's dependencies (dev and grade included): each version
# already in it that still fits is kept, a package new to pyproject.toml gets its newest release.
# UPGRADE=name (repeatable: UPGRADE="a b") moves those packages to their newest fitting release,
# UPGRADE=all every package. The next make then installs what it says. A local build label
# (torch's "+cpu") is dropped: it names one index's build of the version that is pinned.
lock: $(STAMP)
	CUSTOM_COMPILE_COMMAND="make lock" $(BIN)/python -m piptools compile --quiet \
		--extra dev --extra grade --strip-extras --no-emit-index-url --no-emit-find-links \
		--unsafe-package ddp-basics --unsafe-package pip --unsafe-package setuptools \
		$(if $(filter all,$(UPGRADE)),--upgrade,$(foreach p,$(UPGRADE),--upgrade-package $(p))) \
		--output-file $(LOCK) pyproject.toml
	sed -i.bak -E 's/^([A-Za-z0-9_.-]+==[^+ ]+)[+][A-Za-z0-9_.]+/\1/' $(LOCK) && rm -f $(LOCK).bak

# JupyterLab refuses to run as root unless told; root is common in containers.
# Without a display (a server, a container, CI) it prints the address instead of opening a browser.
# The course's own JupyterLab settings (jupyter/: no news pop-up, no build prompts) come first
# on JUPYTER_CONFIG_PATH; LAB_ROOT is the folder served (the tests serve a copy).
# The Japanese edition (lessons/ja/, JupyterLab's menus in Japanese): `make lab LANG=ja`; a
# shell whose LANG is Japanese (ja_JP.UTF-8) gets it too. COURSE_LANG=en forces English.
LAB_ROOT ?= $(CURDIR)
COURSE_LANG ?= $(if $(filter ja%,$(LANG)),ja,en)
LESSONS_DIR := $(if $(filter ja,$(COURSE_LANG)),lessons/ja,lessons)
LAB_CONFIG := $(if $(filter ja,$(COURSE_LANG)),$(CURDIR)/jupyter/ja:)$(CURDIR)/jupyter
FIRST_LESSON := $(LESSONS_DIR)/01_rank_and_world_size.ipynb
# LANG=ja names no locale: the programs started get a real one.
LOCALE_ENV := $(if $(filter ja,$(LANG)),LANG=C.UTF-8)
lab: $(STAMP)
	$(LOCALE_ENV) JUPYTER_CONFIG_PATH="$(LAB_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	$(BIN)/jupyter lab --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
		--ServerApp.port_retries=0 --ServerApp.root_dir="$(LAB_ROOT)" \
		--LabApp.default_url=/lab/tree/$(FIRST_LESSON) \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root ) \
		$$( [ -z "$$DISPLAY$$WAYLAND_DISPLAY" ] && [ "$$(uname)" != Darwin ] && echo --no-browser )

# The same course in Jupyter Notebook 7 (a notebook per browser tab), with the same settings,
# PORT, HOST, LAB_ROOT and LANG, on lesson 01.
notebook: $(STAMP)
	$(LOCALE_ENV) JUPYTER_CONFIG_PATH="$(LAB_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	$(BIN)/jupyter notebook --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
		--ServerApp.port_retries=0 --ServerApp.root_dir="$(LAB_ROOT)" \
		--JupyterNotebookApp.default_url=/notebooks/$(FIRST_LESSON) \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root ) \
		$$( [ -z "$$DISPLAY$$WAYLAND_DISPLAY" ] && [ "$$(uname)" != Darwin ] && echo --no-browser )

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Tests need bubblewrap (the grader's sandbox), Chromium (pages looked at in a browser), a
# Japanese font for it (the Japanese edition's pages) and SLURM with munge (the exported job
# run on a real two-node SLURM, tests/cluster).
# As root with apt (CI, containers) Debian's packages are installed (system-packages: it needs
# nothing of .venv, so `make test` runs it beside the venv's install); otherwise Chromium is
# Playwright's own download, and a missing bubblewrap is named. Tests that need what is
# still missing fail with a message saying how to get it: they never skip.
MISSING = missing=""; command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		missing="$$missing chromium"; \
	fc-list :lang=ja 2>/dev/null | grep -q . || missing="$$missing fonts-ipafont-gothic"; \
	{ command -v slurmctld || test -x /usr/sbin/slurmctld; } >/dev/null || missing="$$missing slurm-wlm"; \
	{ command -v munged || test -x /usr/sbin/munged; } >/dev/null || missing="$$missing munge"
system-packages:
	@$(MISSING); \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing for the tests"; \
		apt-get install -y -qq $$missing >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; }; \
	fi

system-deps: $(STAMP) system-packages
	@$(MISSING); \
	case "$$missing" in *chromium*) \
		echo "no system Chromium: using Playwright's own"; \
		$(BIN)/python -m playwright install chromium || \
		echo "note: no Chromium: the browser tests will fail (sudo apt-get install chromium)";; \
	esac; \
	case "$$missing" in *bubblewrap*) \
		echo "note: no bubblewrap: the sandbox tests will fail (sudo apt-get install bubblewrap)";; \
	esac; \
	case "$$missing" in *fonts-ipafont-gothic*) \
		echo "note: no Japanese font: the Japanese browser test will fail (sudo apt-get install fonts-ipafont-gothic)";; \
	esac; \
	case "$$missing" in *slurm-wlm*|*munge*) \
		echo "note: no SLURM: the cluster tests will fail (sudo apt-get install slurm-wlm munge)";; \
	esac

# .venv and Debian's packages at once: neither needs the other.
setup-and-packages:
	@$(MAKE) --no-print-directory -j2 $(STAMP) system-packages

# The tests run in parallel, one worker per core (at most 4), each test file on one worker
# (its fixtures, a JupyterLab or a graded batch, are made once); `pytest` alone runs them in
# one process.
test: setup-and-packages lint system-deps
	$(BIN)/python -m pytest -n auto --maxprocesses 4 --dist loadfile

# The logic tests alone (no ranks, kernels, browsers, sandboxes, clusters or notebooks), for
# the inner loop while changing the package: seconds, not minutes.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses 4 --dist loadfile -q -m "not e2e"

bench: $(STAMP)
	$(BIN)/python benchmarks/launch_overhead.py

bench-grade: $(STAMP)
	$(BIN)/python benchmarks/grading.py

bench-checks: $(STAMP)
	$(BIN)/python benchmarks/check_times.py

bench-warm-up: $(STAMP)
	$(BIN)/python benchmarks/warm_up.py

scaling: $(STAMP)
	$(BIN)/python benchmarks/scaling.py

soak: $(STAMP)
	$(BIN)/python benchmarks/fault_soak.py --rounds 20

restart-soak: $(STAMP)
	$(BIN)/python benchmarks/torchrun_restart.py --runs 10

teardown-soak: $(STAMP)
	$(BIN)/python benchmarks/gloo_teardown.py --runs 200

teardown-plain-soak: $(STAMP)
	$(BIN)/python benchmarks/gloo_teardown_plain.py --runs 15

ending-soak: $(STAMP)
	$(BIN)/python benchmarks/export_ending.py --runs 60

exit-soak: $(STAMP)
	$(BIN)/python benchmarks/exit_without_destroy.py --runs 40

# The course as a static website in site/_build/html, for reading before installing anything:
# the lessons with the solutions' stored outputs (nothing runs), checked for broken links and
# for any answer shown. Colab and Binder buttons where pyproject.toml names the repository.
site: $(STAMP)
	$(BIN)/python -m ddp_helpers.authoring.website

# The course's wheel installed, without constraints.txt, into fresh venvs that already hold
# another torch and another Jupyter kernel (the oldest and the newest the ranges admit), its
# solution notebooks run there: benchmarks/compat.py. Several GB downloaded once (into
# ~/.cache/ddp-basics/compat).
compat: $(STAMP)
	$(BIN)/python benchmarks/compat.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site/_build
