# tgrag — two commands matter: `make run` and `make test` (see README.md).
CARGO ?= cargo
DATASET ?= synthetic
SIZE ?= small
SEED ?= 42
OUTPUTS ?= outputs
TGRAG := target/debug/tgrag
# Quiet progress in CI; bars on a terminal otherwise.
QUIET := $(if $(CI),--quiet,)

.PHONY: all build run test check clean help

all: run

help:
	@echo "make run    build, then run every stage on the built-in dataset (SIZE=tiny|small|medium|prime, SEED=n)"
	@echo "make test   the whole test suite"
	@echo "make check  clippy on every crate"
	@echo "make clean  remove build outputs and run outputs"

# One profile (dev, no debug info, our crates optimised) is shared by `make run` and `make test`,
# so every dependency is compiled once for both.
build:
	$(CARGO) build --workspace --locked

run: build
	$(TGRAG) --outputs $(OUTPUTS) $(QUIET) run --dataset $(DATASET) --size $(SIZE) --seed $(SEED)
	@if [ -f $(OUTPUTS)/$(DATASET)/metrics/report.md ]; then sed -n '1,/^## By split/p' $(OUTPUTS)/$(DATASET)/metrics/report.md | sed '$$d'; fi

test:
	$(CARGO) test --workspace --locked

check:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

clean:
	$(CARGO) clean
	rm -rf $(OUTPUTS)
