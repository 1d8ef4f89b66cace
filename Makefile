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
PREFIX   ?= /usr/local

.PHONY: all setup shim build fixtures test test-go test-purego test-fuzz test-example check-isa lint lint-cpp lint-cpp-files demo bench bench-peers peers-pt2-root test-peers check-libtorch2 install proto clean

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

# Lint tools come from the Go module proxy at pinned versions, into build/bin (never into go.mod:
# library users should not inherit them). The version is in the file name so a bump reinstalls.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(BUILD)/bin/staticcheck-$(STATICCHECK_VERSION)
# Packages that must build without cgo on other systems: everything but the bindings and the
# packages that run models through them.
PUREGO_PKGS := ./pkg/bench ./pkg/calib ./pkg/config ./pkg/cpu ./pkg/export/tritonpb ./pkg/kernels ./pkg/launch \
	./pkg/serve/inferencepb \
	./pkg/npy ./pkg/plot ./pkg/report ./pkg/roofline ./pkg/runenv ./pkg/version \
	./internal/exitcode ./internal/fixtures ./internal/int8check ./internal/memlimit ./internal/refconv ./internal/safefile ./internal/schemacheck

$(STATICCHECK):
	@mkdir -p $(BUILD)/bin
	GOBIN=$(abspath $(BUILD)/bin) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(BUILD)/bin/staticcheck $@

lint: $(STATICCHECK) setup lint-cpp
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	go mod tidy -diff
	go vet ./...
	$(STATICCHECK) ./...
	go test -count=1 ./internal/funcsize ./internal/exitcode
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go build $(PUREGO_PKGS)
	GOOS=darwin GOARCH=amd64 CGO_ENABLED=0 go build $(PUREGO_PKGS)
	/usr/bin/python3 -m flake8 scripts
	shellcheck $$(git ls-files '*.sh') .ci/run

# C++: csrc's includes run one way (abi -> passes -> kernels: scripts/check-csrc-layers.sh), and
# clang-tidy (checks in .clang-tidy) on every C++ file in csrc/, against the compile commands
# of a configure-only CMake tree. A file takes 20 to 30 s of CPU (libtorch's headers), so each
# passing file leaves a stamp and a rerun checks only the files that changed since, or that
# include a changed header. The compile commands are GCC's, so clang gets two flags: -fno-openmp
# (clang has no omp.h of its own here, GCC's is in GCC's private include directory; it only
# switches at::parallel_for to its serial form) and -Wno-unknown-warning-option (the kernels
# silence GCC's -Wmaybe-uninitialized, which clang does not have).
TIDY_DIR  := $(BUILD)/lint
TIDY_SRCS := $(shell git ls-files 'csrc/*.cpp')
TIDY_OK   := $(patsubst csrc/%.cpp,$(TIDY_DIR)/tidy/%.ok,$(TIDY_SRCS))

$(TIDY_DIR)/cmake/compile_commands.json: CMakeLists.txt | setup
	@mkdir -p $(@D)
	cd $(@D) && cmake $(CURDIR) -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null

$(TIDY_DIR)/tidy/%.ok: csrc/%.cpp $(wildcard csrc/*/*.h csrc/*/*.inc) .clang-tidy $(TIDY_DIR)/cmake/compile_commands.json
	@mkdir -p $(@D)
	clang-tidy -p $(TIDY_DIR)/cmake --quiet --extra-arg=-fno-openmp --extra-arg=-Wno-unknown-warning-option $<
	@touch $@

lint-cpp: setup
	sh scripts/check-csrc-layers.sh
	@$(MAKE) --no-print-directory -j$(JOBS) lint-cpp-files

lint-cpp-files: $(TIDY_OK)
	@:

test-purego:
	go test -count=1 -tags purego ./pkg/kernels/...
	CGO_ENABLED=0 go build ./pkg/kernels/ && GOARCH=arm64 CGO_ENABLED=0 go build ./pkg/kernels/

test-go:
	go test -race -count=1 -timeout 40m ./...

# The readers of untrusted files, fuzzed for a bounded number of inputs each (go test -fuzz takes
# one target of one package per run); seed corpora in each package's testdata/fuzz. Budgets are
# counts, not durations: with a duration, Go 1.26's fuzzing coordinator can fail the run at its own
# deadline with "context deadline exceeded" and no failing input (go.dev/issue/75804, fixed in Go
# 1.27), which a loaded CI machine hit; a count has no deadline to race. Each count is about 30 s
# of inputs on one quiet 2-vCPU EPYC (npy ~55k inputs/s, config ~5k, archive ~4k, REST ~8k).
# The fuzzer minimizes every input that finds new code for up to -fuzzminimizetime (60 s by
# default) without counting it: on the config loader (a few ms an input) that took the whole run,
# as if it had stalled; 50 tries each leaves the run to finding inputs. FUZZSCALE multiplies
# every count (FUZZSCALE=10 for a longer search).
FUZZSCALE ?= 1
FUZZ = go test -run '^$$' -fuzzminimizetime 50x -fuzztime $$(( $(1) * $(FUZZSCALE) ))x -fuzz
test-fuzz:
	$(call FUZZ,1500000) '^FuzzRead$$' ./pkg/npy
	$(call FUZZ,1500000) '^FuzzReadNPZ$$' ./pkg/npy
	$(call FUZZ,150000) '^FuzzLoad$$' ./pkg/config
	$(call FUZZ,120000) '^FuzzVerifyArchive$$' ./pkg/torchspeed
	$(call FUZZ,250000) '^FuzzFastRequest$$' ./pkg/serve

test: build fixtures lint test-purego test-go test-fuzz test-example check-isa test-peers

# The instruction-set matrix: the INT8 and kernel tests with lower paths forced (AVX2 without
# VNNI, AVX-512 without VNNI, no vector kernels) on the CPU at hand, and the CLI on an emulated
# Haswell (qemu-user), where an AVX-512 instruction is an illegal instruction.
check-isa: build fixtures
	bash scripts/check-isa.sh

# libtorchspeed.so (RUNPATH to the libtorch it was built against), torchspeed.h, torchspeed.pc and
# the binary, linked through pkg-config against the installed library (rpath PREFIX/lib), so
# nothing installed points into this clone.
install: shim
	cmake --install $(CMAKEDIR) --prefix $(abspath $(PREFIX)) >/dev/null
	@mkdir -p $(abspath $(PREFIX))/bin
	@# The go command does not key its cache on pkg-config's answer: CGO_CFLAGS naming the prefix
	@# keeps a build for an earlier prefix from being reused.
	PKG_CONFIG_PATH=$(abspath $(PREFIX))/lib/pkgconfig CGO_CFLAGS="-O2 -g -I$(abspath $(PREFIX))/include" go build -tags torchspeed_pkgconfig -ldflags "$(LDFLAGS)" -o $(abspath $(PREFIX))/bin/torchspeed ./cmd/torchspeed
	@echo "installed into $(abspath $(PREFIX)); Go programs: PKG_CONFIG_PATH=$(abspath $(PREFIX))/lib/pkgconfig go build -tags torchspeed_pkgconfig"

# The example service built against a `make install` into a temp prefix, answering on 127.0.0.1.
# The PyTorch 2 peer's logic that needs no PyTorch 2 root (scripts/peers/pt2_worker_test.py): the
# fixtures' weights moved into their eager modules in this machine's torch, bench_peers' listing.
test-peers: fixtures
	/usr/bin/python3 -m unittest discover -s scripts/peers -p '*_test.py'

test-example: build fixtures
	bash examples/serve/test.sh

# Regenerate pkg/export/tritonpb and pkg/serve/inferencepb from their .proto files (protoc from
# Debian's protobuf-compiler; protoc-gen-go and protoc-gen-go-grpc at the versions go.mod
# requires). kserve's grpc_predict_v2.proto is kept as published: its Go package comes from M.
INFERENCEPB_M := Mpkg/serve/inferencepb/grpc_predict_v2.proto=github.com/torchspeed/torchspeed/pkg/serve/inferencepb
proto:
	GOBIN=$(CURDIR)/$(BUILD)/bin go install google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
	PATH=$(CURDIR)/$(BUILD)/bin:$$PATH protoc --go_out=. --go_opt=paths=source_relative pkg/export/tritonpb/model_config.proto
	PATH=$(CURDIR)/$(BUILD)/bin:$$PATH protoc --go_out=. --go_opt=paths=source_relative,$(INFERENCEPB_M) \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative,$(INFERENCEPB_M) pkg/serve/inferencepb/grpc_predict_v2.proto

demo: build fixtures
	$(BIN) optimize -c configs/demo.yaml
	@echo "demo: the report is build/demo/report.md (and report.json); the full measurement, every runtime setting in processes of its own (minutes more):"
	@echo "  $(BIN) optimize -c configs/demo.yaml --measure-runtime true --search full"

bench: build fixtures
	go test -run '^$$' -bench . -benchtime 200x -timeout 60m ./bindings/... ./pkg/...

# torchspeed against plain PyTorch and ONNX Runtime, timed side by side (scripts/peers/bench_peers.py;
# not part of make test). PEERS_ARGS passes options, e.g. PEERS_ARGS="--models digits --rounds 4".
# With TORCHSPEED_FIXTURES set it uses those fixtures instead of making its own.
PEERS_ARGS ?=
bench-peers: build $(if $(TORCHSPEED_FIXTURES),,fixtures)
	bash scripts/peers/setup.sh
	go build -o $(BUILD)/peers/goworker ./scripts/peers/goworker
	go build -o $(BUILD)/peers/peerstats ./scripts/peers/peerstats
	$(CC) -O2 -Wall -Wextra -Werror -fopenmp -o $(BUILD)/peers/floor_worker scripts/peers/floor_worker.c
	/usr/bin/python3 scripts/peers/bench_peers.py --torchspeed $(BIN) --goworker $(BUILD)/peers/goworker \
		--peerstats $(BUILD)/peers/peerstats --floor-worker $(BUILD)/peers/floor_worker $(PEERS_ARGS)

# The Debian 13 root the PyTorch 2 peers of bench-peers run in (torch.compile, PT2E INT8): run as
# root, about 20 min the first time (downloads); bench-peers lists those peers as skipped without it.
peers-pt2-root:
	nice -n 5 bash scripts/peers/pt2-root.sh

# The same contenders' items/s at saturation on all CPUs, each as instances x threads
# (scripts/peers/throughput.py; docs/benchmarking.md): build/peers/throughput.json and .md.
.PHONY: bench-peers-throughput
bench-peers-throughput:
	$(MAKE) bench-peers PEERS_ARGS="--throughput --no-floor $(PEERS_ARGS)"

# Build and test against libtorch 2.6 in a Debian 13 chroot (not part of make test; see the script).
check-libtorch2:
	bash scripts/check-libtorch2.sh

clean:
	rm -rf $(BUILD)
