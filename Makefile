# durable: `make test` runs everything the CI runs, on a fresh Debian machine
# with Go. It installs redis-server and chromium (the inbox page's browser
# test) when they are missing and we are root.

GO ?= go
TEST_TIMEOUT ?= 15m
CHAOS_TIMEOUT ?= 30m

.PHONY: test deps vet unit demo build chaos

test: deps vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

deps:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing redis-server with apt-get"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		else \
			echo "redis-server is missing: install it (Debian/Ubuntu: sudo apt-get install redis-server), then run make test again"; \
			exit 1; \
		fi; \
	fi
	@redis-server --version
	@if ! command -v chromium >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing chromium with apt-get"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "chromium is missing: install it (Debian: sudo apt-get install chromium), then run make test again"; \
			exit 1; \
		fi; \
	fi
	@chromium --version 2>/dev/null

vet:
	$(GO) vet ./...

# Quick loop while developing: no race detector, skips the process-level tests.
unit:
	$(GO) test -short -count=1 ./...

demo:
	$(GO) run ./cmd/durable demo

build:
	$(GO) build -o bin/ ./cmd/...

# The chaos suite in its full form (internal/chaos): 300 claims, 100 agent
# runs, worker kills, NATS and Redis restarts, SIGSTOP zombies. `make test`
# runs its short form.
chaos: deps
	DURABLE_CHAOS=full $(GO) test -count=1 -v -run TestChaos -timeout $(CHAOS_TIMEOUT) ./internal/chaos/
