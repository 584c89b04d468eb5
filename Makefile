# durable: `make test` runs everything the CI runs, on a fresh Debian machine
# with Go. It installs redis-server, chromium (the inbox page's browser
# test) and promtool (the alert rules' tests) when they are missing and we
# are root.

GO ?= go
# Go 1.26.8's standard library has vulnerabilities our code calls (net/http,
# crypto/tls, crypto/x509: fixed in 1.26.9/1.26.10, not served here);
# govulncheck is clean on go1.27.3, which the go command fetches from the
# module proxy (about 10 s the first time). Build release binaries with it too.
export GOTOOLCHAIN ?= go1.27.3
TEST_TIMEOUT ?= 15m
CHAOS_TIMEOUT ?= 30m

.PHONY: test race model deps vet unit demo build chaos lint staticcheck vulncheck fuzz fleet fleet-scale schedules flowfleet ratelimits

# The linters run beside the tests, not before them: at the lowest CPU
# priority, on what the tests leave idle (process-level tests mostly
# wait), they no longer add their two minutes or more to the CI's wall
# time. Any failure still fails `make test`, once the tests are done.
# (No --output-sync: it would hold the tests' output until they end.)
test: deps
	@$(MAKE) --no-print-directory -j4 race model vet staticcheck vulncheck LINT_NICE="nice -n 19"

# The tests alone, under the race detector.
race:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# The transition function's model, all 10,000 generated sequences, without
# the race detector (under it, `race` applies 1,000: a pure function in
# one goroutine has no race to find, and costs ten times as much there).
model:
	$(GO) test -count=1 -run 'TestModel$$' ./pkg/transition

# The fleet test (internal/test/fleet, docs/fleet.md): a 3-node NATS cluster
# (streams at R3), Redis Cluster 3 primaries + 3 replicas, 4 workers and 2
# schedulers on loopback; kills the step stream's leader, fails over a
# Redis primary, kills a worker; checks every run completed and one
# payment per claim and refund. About 1.5 minutes.
fleet: deps
	DURABLE_FLEET=1 $(GO) test -race -count=1 -timeout 20m -run 'TestFleet$$' -v ./internal/test/fleet

# Throughput with 1, 2 and 4 worker processes, on the cluster and on single
# servers (docs/fleet.md). DURABLE_FLEET_SCALE_SLOW=1 makes the payments
# API answer 50-250 ms after paying.
fleet-scale: deps
	DURABLE_FLEET_SCALE=1 $(GO) test -count=1 -timeout 30m -run 'TestFleetScale$$' -v ./internal/test/fleet

# Schedules on the wall clock (internal/test/schedules), both stores at
# once: a worker and two scheduler processes, four schedules firing every
# minute under each overlap policy, a scheduler SIGKILLed after the second
# fire and started again after the fourth; exactly one run a fire, its id
# from the fire time. About 7 minutes: too slow for `make test`.
schedules: deps
	DURABLE_SCHEDULES=1 $(GO) test -race -count=1 -timeout 15m -run 'TestSchedulesEveryMinute$$' -v ./internal/test/schedules

# Concurrency limits and fairness with worker processes
# (internal/test/flowfleet), both stores at once: 3 workers share a limit
# of 5 on "model" over 200 runs of 3 calls, one SIGKILLed (its slots back
# within the 15 s lease), CPU of the waiting workers measured; then tenant
# a queues 1,000 runs and tenant b 10; then a limit of 2 per tenant
# beside the 5 (tenant a 60 runs, b, c, d 10 each, a SIGKILL, the keys'
# records gone after a lease). About two minutes.
flowfleet: deps
	DURABLE_FLOWFLEET=1 $(GO) test -race -count=1 -timeout 10m -run 'TestFlowFleet$$|TestFlowFairness$$|TestFlowPerKey$$' -v ./internal/test/flowfleet

# Fleet-wide rate limits at process level (internal/test/ratelimits),
# both stores at once: three worker processes at 10/s burst 5 for 30 s
# against a fake provider (rate within 10 %), then two 429s with
# Retry-After: 2 (the fleet stops for 2 s, fewer 429s than workers).
# About a minute: too slow for `make test`.
ratelimits: deps
	DURABLE_RATELIMITS=1 $(GO) test -race -count=1 -timeout 10m -run 'TestRateLimitFleet$$' -v ./internal/test/ratelimits

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
	@if ! command -v promtool >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing promtool (Debian package prometheus) with apt-get"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
		else \
			echo "promtool is missing: install it (Debian/Ubuntu: sudo apt-get install prometheus), then run make test again"; \
			exit 1; \
		fi; \
	fi
	@promtool --version 2>&1 | head -1

# examples/ are modules of their own (./... does not reach them): vet
# and build each as its users would.
vet:
	$(LINT_NICE) $(GO) vet ./...
	cd examples/expense && $(LINT_NICE) $(GO) vet ./... && $(LINT_NICE) $(GO) build -o /dev/null .
	cd examples/research && $(LINT_NICE) $(GO) vet ./... && $(LINT_NICE) $(GO) build -o /dev/null .

# Quick loop while developing: no race detector, skips the process-level tests.
unit:
	$(GO) test -short -count=1 ./...

demo:
	$(GO) run ./cmd/durable demo

build:
	$(GO) build -o bin/ ./cmd/...

# The chaos suite in its full form (internal/test/chaos): 300 claims, 100 agent
# runs, worker kills, NATS and Redis restarts, SIGSTOP zombies. `make test`
# runs its short form.
chaos: deps
	DURABLE_CHAOS=full $(GO) test -count=1 -v -run TestChaos -timeout $(CHAOS_TIMEOUT) ./internal/test/chaos/

# Linters, pinned and run with `go run`: nothing to install. govulncheck reads
# a local copy of the Go vulnerability database (vuln.go.dev is unreachable
# here and in CI): the golang.org/x/vulndb module, indexed once per version
# into VULNDB_DIR. Bump VULNDB to pick up newer advisories.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOVULNCHECK ?= golang.org/x/vuln/cmd/govulncheck@v1.9.0
VULNDB      ?= v0.0.0-20261105234957-e22db6528018
VULNDB_DIR  ?= $(HOME)/.cache/durable/vulndb-$(VULNDB)

lint: vet staticcheck vulncheck

staticcheck:
	$(LINT_NICE) $(GO) run $(STATICCHECK) ./...

vulncheck: $(VULNDB_DIR)/index/db.json
	$(LINT_NICE) $(GO) run $(GOVULNCHECK) -db file://$(VULNDB_DIR) ./...

$(VULNDB_DIR)/index/db.json:
	rm -rf $(VULNDB_DIR) $(VULNDB_DIR).tmp && mkdir -p $(dir $(VULNDB_DIR))
	osv="$$($(GO) mod download -json golang.org/x/vulndb@$(VULNDB) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p')/data/osv" && \
	$(GO) run golang.org/x/vulndb/cmd/indexdb@$(VULNDB) -vulns "$$osv" -out $(VULNDB_DIR).tmp
	mv $(VULNDB_DIR).tmp $(VULNDB_DIR)

# make fuzz [FUZZTIME=5m]: each fuzz target in turn for FUZZTIME. make test
# runs only their seeds (f.Add and testdata/fuzz).
FUZZTIME     ?= 30s
FUZZPARALLEL ?= 1
FUZZ_TARGETS  = \
	./pkg/queue:FuzzDecodeStep \
	./internal/approver:FuzzAdmitEvent \
	./internal/approver:FuzzLoadEventSecrets \
	./internal/approver:FuzzReadDecision \
	./pkg/client:FuzzNormalizeInput \
	./internal/tokens:FuzzLoad \
	./internal/demo/payments:FuzzParsePayRequest \
	./internal/faults:FuzzParse \
	./internal/demo/claims:FuzzReadAmount

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== $${t##*:} ($${t%%:*}) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t##*:}\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZPARALLEL) $${t%%:*}; \
	done
