# Two commands on a fresh machine:  make demo  |  make test
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Every version comes from envs/requirements.txt (shared with envs/aire.yaml). PIP_EXTRA adds pip
# options. On Linux without an NVIDIA driver it is PyTorch's CPU index, where that index answers: PyPI's
# torch for Linux is the CUDA build, gigabytes a CPU never uses. `make PIP_EXTRA=` keeps PyPI's.
PINS   := envs/requirements.txt
CPU_INDEX := https://download.pytorch.org/whl/cpu
PIP_EXTRA ?= $(shell [ "$$(uname -s)" = Linux ] && ! command -v nvidia-smi >/dev/null && \
  python3 -c "import urllib.request; urllib.request.urlopen('$(CPU_INDEX)/torch/', timeout=5)" 2>/dev/null && \
  echo --extra-index-url $(CPU_INDEX))
CORES  ?= 2

.PHONY: demo test check install browser lint lock clean slurm-up slurm-down bench

$(VENV)/.installed: pyproject.toml $(PINS)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_EXTRA) -r $(PINS)
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m pip check
	touch $@

install: $(VENV)/.installed

# The whole pipeline on the embedded default: real digits data, 2-process DDP on CPU.
demo: install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/snakemake --cores $(CORES)
	@cat results/report/efficiency.md

# The whole suite, the local SLURM test clusters included (tests/slurm/up.sh needs root; without it
# the SLURM tests are skipped with the reason). Three workers: two run the tests of the two SLURM test
# clusters, each cluster's in order, while the third runs the rest, and all three share what is left
# (tests/conftest.py groups them). A cluster the suite started is stopped when it ends, pass or fail.
# Every set-up, call and teardown of 5 s or more is listed with its time: the suite's cost, module by module.
test: install browser
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -n 3 -v -rs --durations=0 --durations-min=5

# The inner loop of development: lint and the unit tests (no torchrun, no cluster), a few minutes.
check: lint
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -n 2 -q tests/unit

# The report page is checked in Debian's headless chromium: installed here as root when missing
# (without it, and outside CI, those tests are skipped with the reason).
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
	  >/dev/null; } || echo "chromium is not installed: the report page's browser tests will be skipped"

lint: install
	$(VENV)/bin/snakemake --lint
	$(VENV)/bin/ruff check airetrain tests benchmarks

# After a deliberate upgrade in the venv (and a passing `make test`): write its versions as the pins.
lock: install
	{ sed -n '/^#/p' $(PINS); $(PY) -m pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/'; } > $(PINS).new
	mv $(PINS).new $(PINS)

slurm-up:
	bash tests/slurm/up.sh

slurm-down:
	bash tests/slurm/down.sh

bench: install
	$(PY) benchmarks/stage.py

clean:
	rm -rf results logs .snakemake .airetrain
