# Two commands on a fresh machine:  make demo  |  make test
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of torch; the CUDA build for Aire is in envs/aire.yaml.
TORCH  ?= torch==2.13.0
PIN    := snakemake==9.27.1 snakemake-executor-plugin-slurm==2.8.0 snakemake-executor-plugin-slurm-jobstep==0.6.1
CORES  ?= 2

.PHONY: demo test install lint clean slurm-up slurm-down bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[test]' $(PIN)
	touch $@

install: $(VENV)/.installed

# The whole pipeline on the embedded default: real digits data, 2-process DDP on CPU.
demo: install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/snakemake --cores $(CORES)
	@cat results/report/efficiency.md

# The whole suite, the local SLURM cluster included (tests/slurm/up.sh needs root; without it
# the SLURM tests are skipped with the reason).
test: install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -v -rs --durations=15

lint: install
	$(VENV)/bin/snakemake --lint

slurm-up:
	bash tests/slurm/up.sh

slurm-down:
	bash tests/slurm/down.sh

bench: install
	$(PY) benchmarks/stage.py

clean:
	rm -rf results logs .snakemake .airetrain
