# The one entry point. Every target installs dependencies first when
# node_modules is missing or older than package-lock.json.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The Node.js every step runs with (npm ci, tsc, eslint, tap, the server, the
# bench): the node on PATH when it satisfies engines.node of package.json,
# else the version pinned in nodeRuntime, installed once from the npm
# registry into .runtime/ after an integrity check (scripts/node-runtime.mjs).
# It names the node it chose in one line.
NODE_DIR := $(shell node scripts/node-runtime.mjs)
ifneq ($(.SHELLSTATUS),0)
$(error no usable Node.js: see the line above (bootstrapping needs a node and npm on PATH))
endif
export PATH := $(NODE_DIR):$(PATH)
NODE_BIN := node_modules/.bin
STAMP := node_modules/.install-stamp
ROLE ?= all
ARGS ?=
# The display name for make principal, passed through the environment so no
# quoting in it can reach the shell.
export NAME

CHROMIUM ?= /usr/bin/chromium

.PHONY: FORCE node-version principal bench soak browser-deps help install build run migrate test check lint typecheck format-check boundaries docs docs-check migrations-check text-check migration-commit clean pack

node-version: ## print the version of the node every step runs with
	@node --version

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

$(STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@node --version > $(STAMP)

install: $(STAMP) ## install dependencies (npm ci) when needed

# What the build reads (tsconfig.build.json's folders, tests aside, the
# settings and package.json, whose module type and dependencies the output
# runs with). dist/.build-inputs lists them as the last build saw them, with
# the time that build started: an input changed since, or a list that
# differs (a file added or removed, whatever its time), compiles again;
# otherwise the build does nothing, so make run and make principal start at
# once on an unchanged tree.
BUILD_INPUTS := $(sort $(shell find apps kernel platform modules scripts -type f ! -name '*.test.ts' 2>/dev/null) Makefile tsconfig.json tsconfig.build.json package.json package-lock.json)
BUILD_RECORD := dist/.build-inputs
ifneq ($(BUILD_INPUTS),$(strip $(shell cat $(BUILD_RECORD) 2>/dev/null)))
BUILD_FORCE := FORCE
endif

build: install $(BUILD_RECORD) ## compile TypeScript to dist/ when a source changed (built beside, then swapped in by renames)

$(BUILD_RECORD): $(BUILD_INPUTS) $(BUILD_FORCE) | $(STAMP)
	next="dist.next.$$$$"; old="dist.old.$$$$"; started="$$(mktemp)"; rm -rf "$$next"; \
	  $(NODE_BIN)/tsc -p tsconfig.build.json --outDir "$$next"; \
	  $(NODE_BIN)/esbuild apps/client/main.ts --bundle --platform=node --format=esm --target=node24 \
	    --allow-overwrite --outfile="$$next/apps/client/main.js" --log-level=warning; \
	  printf '%s\n' $(BUILD_INPUTS) > "$$next/.build-inputs"; touch -r "$$started" "$$next/.build-inputs"; rm -f "$$started"; \
	  if [ -e dist ]; then mv dist "$$old"; fi; mv "$$next" dist; rm -rf "$$old"

FORCE:

run: build ## start the server (role all) on an embedded PostgreSQL 18, migrating first
	node dist/apps/server/main.js --role $(ROLE) --migrate $(ARGS)

migrate: build ## apply committed migrations and exit (also while make run is up)
	node dist/apps/server/main.js migrate $(ARGS)

principal: build ## create a principal and print its token once (NAME="..."; also while make run is up)
	@if [ -z "$${NAME:-}" ]; then echo 'make principal needs NAME="display name"' >&2; exit 2; fi
	node dist/apps/server/main.js principal create --name "$$NAME" $(ARGS)

browser-deps: ## install Debian's chromium for the browser test when it is missing
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  echo "installing Debian's chromium for the browser test"; \
	  SUDO=""; if [ "$$(id -u)" != 0 ]; then SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	fi

test: install browser-deps ## run every test against a real PostgreSQL 18
	$(NODE_BIN)/tap

pack: install ## the idempotency plugin as an npm tarball: dist-pack/fastify-idempotency-<version>.tgz
	$(NODE_BIN)/tsx scripts/pack-idempotency.ts dist-pack

bench: build ## benchmarks on a durable embedded PostgreSQL 18 (ARGS="--seconds 15 --publish")
	rm -rf dist-bench
	$(NODE_BIN)/tsc -p tsconfig.bench.json
	$(NODE_BIN)/tsx test/bench/run.ts $(ARGS)

soak: install ## the reliability suite's long variants (SOAK=1)
	SOAK=1 $(NODE_BIN)/tap --disable-coverage --allow-incomplete-coverage test/reliability/*.test.ts

lint: install ## ESLint with typescript-eslint type-checked rules
	$(NODE_BIN)/eslint . --max-warnings 0

typecheck: install ## tsc --noEmit, strict
	$(NODE_BIN)/tsc --noEmit -p tsconfig.json

format-check: install ## Prettier
	$(NODE_BIN)/prettier --check . --log-level warn

boundaries: install ## architecture rules with dependency-cruiser
	$(NODE_BIN)/depcruise --config .dependency-cruiser.cjs apps kernel platform modules test scripts

docs: install ## regenerate docs/operations/configuration.md and docs/api/openapi.json
	$(NODE_BIN)/tsx scripts/docs.ts

docs-check: install ## fail when generated docs are stale
	$(NODE_BIN)/tsx scripts/docs.ts --check

migrations-check: install ## committed migration chain intact, current.sql empty
	$(NODE_BIN)/tsx scripts/check-migrations.ts

text-check: install ## no en or em dash, no hard-coded service name
	$(NODE_BIN)/tsx scripts/check-text.ts

migration-commit: install ## commit migrations/current.sql (MESSAGE="...")
	$(NODE_BIN)/tsx scripts/migration-commit.ts "$${MESSAGE:-}"

check: install typecheck lint format-check boundaries docs-check migrations-check text-check browser-deps ## every gate, then the tests with coverage
	$(NODE_BIN)/tap

clean: ## remove build output and local data
	rm -rf dist dist.next.* dist.old.* dist-bench dist-pack .tap coverage
