# VKS Fleet. `make help` lists the targets.

GO             ?= go
MEMBERS        ?= 3
NODES          ?= 2
STATICCHECK_VERSION := v0.8.2
TOOLS_CACHE    := $(CURDIR)/.cache/tools
STATICCHECK    := $(TOOLS_CACHE)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
# Integration tests start real control planes; on 2 cores a whole run takes several minutes.
TEST_TIMEOUT   ?= 30m
# The version of every binary `make build` and `make images` build, and our images' tag: `git describe` of the tree
# (build/images/version.sh; "dev" without git). Linked into vksfleet.dev/fleet/mcs/buildinfo, so that `kubectl mcs
# join` installs the images of its own version and `kubectl mcs version` says it. Expanded once.
VERSION        ?= $(shell bash build/images/version.sh)
VERSION        := $(VERSION)
REVISION       := $(shell bash build/images/version.sh revision)
LDFLAGS        := -X vksfleet.dev/fleet/mcs/buildinfo.version=$(VERSION) -X vksfleet.dev/fleet/mcs/buildinfo.revision=$(REVISION)

.PHONY: help tools build test lint fuzz generate helm-chart up down fault demo bench-memberloss bench-takeover bench-upgrade chaos bench-dns bench-sync bench-fleet bench-first-run bench-scale manifests images conformance conformance-k8s-dns

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

tools: ## every tool of build/tools.sh, which `make test` needs: the pinned Kubernetes, etcd, kustomize, helm and the oldest release from source (cached); dig, dnsperf, HAProxy, promtool and the nodes' Debian packages
	@bash build/tools.sh all

# tools-SET: one set of build/tools.sh (core, kustomize, helm, oldest, dnsperf, haproxy, prometheus; its header says
# what each holds). A target asks only for the sets it runs, so that a first `make demo` builds no other.
tools-%:
	@bash build/tools.sh $*

build: ## build every command into bin/, with the local clusterset's test programs (serve, pause), at VERSION
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/... ./test/cmd/... ./test/env/cmd/...

test: tools images ## unit and integration tests against real control planes, kubelets and our images
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

lint: ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@test -x $(STATICCHECK) || GOBIN=$(dir $(STATICCHECK)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(STATICCHECK) ./...

# Every native fuzz target (func Fuzz... in a _test.go file git tracks), found anew at each run, runs for FUZZTIME,
# one after the other: `go test -fuzz` takes one target at a time. A crasher is written to the package's
# testdata/fuzz/<target>/, where plain `go test` (so `make test`) runs it from then on, with the seed corpora.
FUZZTIME ?= 10m

fuzz: ## run each fuzz target for FUZZTIME (default 10m) in turn
	@set -e; for file in $$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz'); do \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
			echo "fuzz: $$target in ./$$(dirname $$file) for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) ./$$(dirname $$file); \
		done; \
	done

CONTROLLER_GEN_VERSION := $(shell awk '$$1 == "require" && $$2 == "sigs.k8s.io/controller-tools" {print $$3}' build/tools/controller-gen/go.mod)
CONTROLLER_GEN := $(TOOLS_CACHE)/controller-gen-$(CONTROLLER_GEN_VERSION)/controller-gen

generate: ## regenerate the API types' DeepCopy methods with the pinned controller-gen (build/tools/controller-gen)
	@test -x $(CONTROLLER_GEN) || (cd build/tools/controller-gen && CGO_ENABLED=0 $(GO) build -trimpath -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen)
	$(CONTROLLER_GEN) object paths=./api/...

helm-chart: ## regenerate the Helm chart build/helm/vksfleet-member from the kustomize bases of build/deploy
	$(GO) generate ./build/helm

# `make up`'s sets: core, and HAProxy for BROKER=ha, Prometheus for MONITORING=1.
UP_TOOLS := tools-core $(if $(filter ha,$(BROKER)),tools-haproxy) $(if $(MONITORING),tools-prometheus)

up: $(UP_TOOLS) build images ## start a local clusterset in the background (MEMBERS=3 members + broker; BARE=1: nothing of ours installed, join with kubectl mcs; MONITORING=1: a Prometheus, PROMETHEUS_URL; BROKER=ha: the broker as 3 etcd members and 2 kube-apiservers behind HAProxy); writes .fleet/
	@bin/localfleet up -members $(MEMBERS) -nodes $(NODES) -bare=$(if $(BARE),true,false) -monitoring=$(if $(MONITORING),true,false) -broker=$(or $(BROKER),single)

demo: tools-core build images ## bring up a local fleet and walk both user stories; fails if any expectation fails
	@bin/demo

down: ## stop the local clusterset
	@if [ -x bin/localfleet ]; then bin/localfleet down; else $(GO) run ./test/cmd/localfleet down; fi

# A fault in the running local clusterset (`make up`), undone by FAULT=start-control-plane or FAULT=heal.
LOSS ?= 5
fault: ## cause a fault in the running local clusterset: FAULT=stop-control-plane|start-control-plane|cut-data-plane|lossy|heal MEMBER=cluster-b [PEER=cluster-a] [LOSS=5]
	@bin/localfleet fault -kind "$(FAULT)" -member "$(MEMBER)" -peer "$(PEER)" -loss "$(LOSS)"

bench-memberloss: tools-core images ## member loss with traffic: control plane stopped 10 minutes, each cut, whole loss and tier emptying 10 times, 2 minutes of packet loss: test/bench/results/memberloss.md
	MEMBERLOSS_RUNS=10 MEMBERLOSS_STALE=10m MEMBERLOSS_LOSS=2m MEMBERLOSS_RESULTS=$(CURDIR)/test/bench/results/memberloss.md $(GO) test -count=1 -timeout 60m -run TestMemberLoss -v ./test/e2e/memberloss/

# A chaos run (test/e2e/chaos): `make test` runs it for 2 minutes; CHAOS_SEED=N replays a run's faults.
CHAOS_DURATION ?= 10m

chaos: tools-core tools-haproxy images ## faults drawn at random, one every 5 s for CHAOS_DURATION (10m), while users churn exports and send requests and lookups: test/bench/results/chaos.md
	CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_RESULTS=$(CURDIR)/test/bench/results/chaos.md $(GO) test -count=1 -timeout 60m -run 'TestChaos$$' -v ./test/e2e/chaos/

bench-takeover: tools-core images ## controller and CoreDNS replicas lost with traffic, deleted and force-deleted, 5 runs: test/bench/results/takeover.md
	TAKEOVER_RUNS=5 TAKEOVER_RESULTS=$(CURDIR)/test/bench/results/takeover.md $(GO) test -count=1 -timeout 60m -run TestTakeover -v ./test/e2e/takeover/

bench-upgrade: tools-core images ## rolling upgrade from the previous release and back, 3 members, each step held 30 s, with traffic and DNS loops: test/bench/results/upgrade.md
	UPGRADE_MEMBERS=3 UPGRADE_SOAK=30s UPGRADE_RESULTS=$(CURDIR)/test/bench/results/upgrade.md $(GO) test -count=1 -timeout 60m -run TestRollingUpgrade -v ./test/e2e/upgrade/

bench-dns: tools-core tools-dnsperf ## DNS benchmark: our CoreDNS vs stock CoreDNS 1.15.0 on the same data; writes test/bench/results/dns.md and its charts
	$(GO) run ./test/bench/dnsbench -out test/bench/results/dns.md

# The scale curve's grid: `make bench-sync SCALE=1` runs every SCALE_MEMBERS × SCALE_SERVICES point, each in a
# process of its own, and keeps its figures in test/bench/results/scale/; SCALE_MEMBERS=10 SCALE_SERVICES=5000
# runs that one point and redraws the table with the points kept. SCALE_FLAGS go to every point: with -rate=4, the
# points are kept beside those at the default rate (10x5000-at-4).
SCALE_MEMBERS ?= 3,6,10
SCALE_SERVICES ?= 1000,5000
SCALE_FLAGS ?=

bench-sync: tools-core ## export, readiness and restart propagation, and on to kube-proxy and CoreDNS in cluster-b (root), 3 and 10 members × 1,000 services: sync.md, sync-10.md; SCALE=1: the scale curve, scale.md and charts
ifdef SCALE
	$(GO) run ./test/bench/syncbench -sweep -members $(SCALE_MEMBERS) -services $(SCALE_SERVICES) $(SCALE_FLAGS) -out test/bench/results/scale.md
else
	$(GO) run ./test/bench/syncbench -out test/bench/results/sync.md
	$(GO) run ./test/bench/syncbench -members 10 -out test/bench/results/sync-10.md
endif

# The broker layout's cost per member, by simulation (test/bench/scalebench): SCALE_SIM_POINTS, members x services
# in the clusterset, each on a broker of its own.
SCALE_SIM_POINTS ?= 10x1000,50x1000,100x1000,250x1000,10x10000

bench-scale: tools-core ## one real broker and N simulated members (10 to 250, 1,000 and 10,000 services): watches, CPU and memory per member, join, export and loss times: scale-members.md
	$(GO) run ./test/bench/scalebench -points $(SCALE_SIM_POINTS) -out test/bench/results/scale-members.md

bench-fleet: tools-core build images ## the local clusterset's cost: start, stop and demo times, memory per node and pod (3 runs): fleet.md
	$(GO) run ./test/bench/fleetcost -out test/bench/results/fleet.md

bench-first-run: ## a newcomer's first make demo: 5 fresh clones of HEAD in a row, the first with empty Go caches (within 20 min), each must pass: first-run.md
	$(GO) run ./test/bench/firstrun -out test/bench/results/first-run.md

KUSTOMIZE := $(TOOLS_CACHE)/current/kustomize

# The member's manifests name our images at VERSION, as `make images` tags them: the bases, which name a release's
# tag, through an overlay that sets it. member.yaml is the standalone DNS mode (build/deploy); member-replace.yaml is
# the replace mode's raw path (build/deploy/replace), which names no CoreDNS image: build/deploy/replace-kube-dns/
# replace-kube-dns.sh install IMAGE then swaps it in (ghcr.io/vksfleet/coredns:VERSION for this tree's), keeping the
# cluster's Corefile.
manifests: tools-kustomize ## render build/deploy into bin/manifests/, our images at VERSION: member.yaml (standalone DNS), member-replace.yaml (replace, with replace-kube-dns.sh), broker.yaml
	@mkdir -p bin/manifests/member-overlay bin/manifests/member-replace-overlay
	@printf 'resources:\n  - ../../../build/deploy\nimages:\n  - name: ghcr.io/vksfleet/mcs-controller\n    newTag: "%s"\n  - name: ghcr.io/vksfleet/coredns\n    newTag: "%s"\n' \
		'$(VERSION)' '$(VERSION)' > bin/manifests/member-overlay/kustomization.yaml
	@printf 'resources:\n  - ../../../build/deploy/replace\nimages:\n  - name: ghcr.io/vksfleet/mcs-controller\n    newTag: "%s"\n' \
		'$(VERSION)' > bin/manifests/member-replace-overlay/kustomization.yaml
	$(KUSTOMIZE) build bin/manifests/member-overlay > bin/manifests/member.yaml
	$(KUSTOMIZE) build bin/manifests/member-replace-overlay > bin/manifests/member-replace.yaml
	$(KUSTOMIZE) build build/deploy/broker > bin/manifests/broker.yaml
	$(KUSTOMIZE) build build/deploy/member > bin/manifests/broker-member-example.yaml

# The platforms `make images` builds for: the host's by default, which is all the local clusterset's nodes run; a
# release builds both (make images IMAGE_PLATFORMS=linux/amd64,linux/arm64), each a full compile more.
IMAGE_PLATFORMS ?= linux/$(shell $(GO) env GOARCH)

images: ## build the coredns and mcs-controller images for IMAGE_PLATFORMS (the host's; linux/amd64,linux/arm64 for a release), tagged VERSION (IMAGE_REPO, IMAGE_SOURCE): OCI layouts in bin/images/oci/, the host's as bin/images/*.tar for the nodes; no Docker engine, no root
	@VERSION='$(VERSION)' IMAGE_PLATFORMS='$(IMAGE_PLATFORMS)' bash build/images/build.sh

# The upstream MCS API conformance suite, run unmodified: by default sigs.k8s.io/mcs-api's conformance/ at the commit
# test/e2e/conformance pins, fetched through the Go module proxy into the module cache; CONFORMANCE_SUITE=PATH (absolute,
# or relative to the repository's root) runs a local copy of that folder instead, where the proxy is out of reach.
# test/e2e/conformance copies the suite into .conformance/ (git-ignored) and builds it there, once per version.
CONFORMANCE_SUITE ?=
# A run takes about 15 minutes on 2 cores, plus up to 15 more waiting for another clusterset's data plane to stop.
CONFORMANCE_TIMEOUT ?= 60m

conformance: tools-core ## run the upstream MCS API conformance suite (fetched, or CONFORMANCE_SUITE=PATH) against a fleet on kubelet nodes (root); writes test/e2e/conformance/results/
	FLEET_CONFORMANCE=1 FLEET_CONFORMANCE_SUITE=$(CONFORMANCE_SUITE) $(GO) test -count=1 -v -timeout $(CONFORMANCE_TIMEOUT) -run '^TestConformance$$' ./test/e2e/conformance

# Kubernetes' own [sig-network] DNS e2e specs (e2e.test built from the pinned Kubernetes by the tools set k8se2e, with
# agnhost for the stand-in images of test/env/nodeimages), against a member whose DNS is ours, in each DNS mode:
# replace, then standalone, each on a fleet of one member with 2 kubelet nodes. Each mode's suite stops at 40
# minutes; the rest is the fleets, and up to 15 minutes waiting for another clusterset's data plane to stop.
K8S_DNS_TIMEOUT ?= 120m

conformance-k8s-dns: tools-core tools-k8se2e images ## run Kubernetes' [sig-network] DNS e2e specs against our DNS in replace and standalone mode, on kubelet nodes (root); writes test/e2e/k8sdns/results/
	FLEET_K8S_DNS=1 $(GO) test -count=1 -v -timeout $(K8S_DNS_TIMEOUT) -run '^TestKubernetesDNS$$' ./test/e2e/k8sdns
