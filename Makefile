# Switchboard — one binary, many services. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/switchboard
TOOLS := .bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
# Tests share one machine's Postgres, Redis and NATS; each test isolates
# itself (schema, key prefix, stream prefix), so packages run in parallel.
# -trimpath keeps checkout paths out of the build cache's keys: a fresh
# clone (CI's) reuses what any earlier checkout compiled instead of
# compiling every package twice (vet, then -race) from scratch, about
# nine of its minutes on this machine's two cores.
TRIM       := -trimpath
TEST_FLAGS ?= -race -count=1 -timeout 15m $(TRIM)

.PHONY: help tools proto check-generated lint vet build test test-short deploy-check dev up down bench chaos clean

help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/staticcheck: tools/go.mod tools/go.sum
	cd tools && GOBIN=$(CURDIR)/$(TOOLS) GOWORK=off $(GO) install tool
	@touch $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/staticcheck

tools: $(TOOLS)/buf ## build pinned tools (buf, protoc plugins, staticcheck) into .bin

proto: tools ## regenerate pkg/gen from proto/ with buf
	$(TOOLS)/buf lint
	rm -rf pkg/gen
	$(TOOLS)/buf generate

check-generated: proto ## fail if generated code differs from what is committed
	@git diff --exit-code --stat -- pkg/gen || (echo "pkg/gen is stale: run 'make proto' and commit" && exit 1)
	@test -z "$$(git status --porcelain -- pkg/gen)" || (echo "untracked generated files:" && git status --porcelain -- pkg/gen && exit 1)

vet: ## go vet
	$(GO) vet $(TRIM) ./...

lint: tools vet ## gofmt, buf lint, go vet, staticcheck
	@unformatted="$$(gofmt -l $$(git ls-files '*.go'))"; test -z "$$unformatted" || (echo "not gofmt-ed:" $$unformatted && exit 1)
	$(TOOLS)/buf lint
	$(TOOLS)/staticcheck ./...

build: ## build bin/switchboard
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/switchboard

test: ## unit and integration tests (needs Postgres, Redis, NATS; see .ci/run)
	$(GO) vet $(TRIM) ./...
	$(GO) test $(TEST_FLAGS) ./...

test-short: ## tests with -short, no -race: skips the whole-system runs (still needs Postgres, Redis, NATS)
	$(GO) test -short -count=1 ./...

deploy-check: ## check docker-compose.yaml, .env.example, Dockerfile, deploy/k8s (needs kubectl) and the dashboard
	@# go test skips the manifests without kubectl, and a skip is silent: fail instead.
	@command -v kubectl >/dev/null || { echo "deploy-check: kubectl not found in PATH; it builds the overlays (kubectl kustomize): without it deploy/k8s is not checked" >&2; exit 1; }
	$(GO) test -count=1 ./deploy/
	$(GO) test -count=1 -run 'Deploy|Pending|Healthcheck' ./cmd/switchboard/

dev: build ## run every service in one process (embedded NATS, local Postgres and Redis)
	./$(BIN) dev

# Without OPENAI_BASE_URL or ANTHROPIC_API_KEY (in .env or the environment)
# the compose workers call the fake LLM, which only the demo profile runs:
# `up` adds --profile demo then, so a fresh `cp .env.example .env` answers.
up: ## docker compose up (full stack, one container per service; the fake LLM unless .env names a provider)
	@if [ -n "$$OPENAI_BASE_URL$$ANTHROPIC_API_KEY" ] || \
		grep -qsE '^[[:space:]]*(export[[:space:]]+)?(OPENAI_BASE_URL|ANTHROPIC_API_KEY)=["'"'"']?[^"'"'"'[:space:]#]' .env; then \
		echo "docker compose up --build"; docker compose up --build; \
	else \
		echo "no OPENAI_BASE_URL or ANTHROPIC_API_KEY in .env: the workers use the fake LLM (--profile demo)"; \
		echo "docker compose --profile demo up --build"; docker compose --profile demo up --build; \
	fi

down: ## docker compose down
	docker compose --profile "*" down

# The load run: 3 shapes x 1/16/64 sessions x streaming off/on plus the
# reference pipeline, 30 s windows after a 5 s warm-up as issue 9 asks
# (~16 min). A quicker run (8 s windows, ~6 min):
#   make bench BENCH_FLAGS='-duration 8s -warmup 2s'
BENCH_FLAGS ?= -duration 30s -warmup 5s
bench: build ## Go benchmarks of the hot paths, then the load benchmark (bench-results/; see docs/performance.md)
	@mkdir -p bench-results
	set -o pipefail; $(GO) test -run '^$$' -bench . -benchmem ./... | tee bench-results/go-bench.txt
	$(GO) run ./cmd/sbbench -bin $(BIN) $(BENCH_FLAGS)

chaos: ## fault injection: every service as its own process, faults under load, invariants table (docs/reliability.md)
	CHAOS_RUN=1 CHAOS_TABLE=$${CHAOS_TABLE:-$(CURDIR)/.switchboard/chaos-table.md} CHAOS_LOG_DIR=$${CHAOS_LOG_DIR:-$(CURDIR)/.switchboard/chaos-logs} \
		$(GO) test -tags chaos -count=1 -timeout 30m -run '^TestChaos$$' -v ./cmd/switchboard/

clean: ## remove build outputs
	rm -rf bin .switchboard bench-results
