# torchspeed: `make demo` and `make test` do all set-up on a fresh Debian 12 machine.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
export GOFLAGS ?= -buildvcs=false
BUILD    := build
CMAKEDIR := $(BUILD)/cmake
FIXTURES := $(BUILD)/fixtures
BIN      := $(BUILD)/torchspeed
JOBS     ?= $(shell nproc)
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/torchspeed/torchspeed/pkg/version.Version=$(VERSION)

.PHONY: all setup shim build fixtures test test-go test-purego lint demo bench bench-peers check-libtorch2 clean

all: build

$(BUILD)/.setup-done: scripts/setup.sh
	bash scripts/setup.sh
	@mkdir -p $(BUILD) && touch $@

setup: $(BUILD)/.setup-done

shim: setup
	@mkdir -p $(CMAKEDIR)
	@cd $(CMAKEDIR) && { [ -f Makefile ] || cmake ../.. -DCMAKE_BUILD_TYPE=Release >/dev/null; } && $(MAKE) --no-print-directory -j$(JOBS)

build: shim
	go build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/torchspeed

fixtures: setup
	bash scripts/make-fixtures.sh $(FIXTURES)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	go vet ./...

test-purego:
	go test -count=1 -tags purego ./pkg/kernels/...
	CGO_ENABLED=0 go build ./pkg/kernels/ && GOARCH=arm64 CGO_ENABLED=0 go build ./pkg/kernels/

test-go:
	go test -race -count=1 -timeout 40m ./...

test: build fixtures lint test-purego test-go

demo: build fixtures
	$(BIN) optimize -c configs/demo.yaml

bench: build fixtures
	go test -run '^$$' -bench . -benchtime 200x -timeout 60m ./bindings/... ./pkg/...

# torchspeed against plain PyTorch and ONNX Runtime, timed side by side (scripts/peers/bench_peers.py;
# not part of make test). PEERS_ARGS passes options, e.g. PEERS_ARGS="--models digits --rounds 4".
# With TORCHSPEED_FIXTURES set it uses those fixtures instead of making its own.
PEERS_ARGS ?=
bench-peers: build $(if $(TORCHSPEED_FIXTURES),,fixtures)
	bash scripts/peers/setup.sh
	go build -o $(BUILD)/peers/goworker ./scripts/peers/goworker
	/usr/bin/python3 scripts/peers/bench_peers.py --torchspeed $(BIN) --goworker $(BUILD)/peers/goworker $(PEERS_ARGS)

# Build and test against libtorch 2.6 in a Debian 13 chroot (not part of make test; see the script).
check-libtorch2:
	bash scripts/check-libtorch2.sh

clean:
	rm -rf $(BUILD)
