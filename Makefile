# schedpolicyd — build, run and test.
#   sudo make run    build and run the daemon on this machine
#   sudo make test   install test dependencies if missing, run every test

GO      ?= go
BIN     := bin/schedpolicyd
PKGS    := ./...
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build run test deps vet fmt clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/schedpolicyd

run: build
	./$(BIN)

# Debian packages the tests use: dbus-daemon and dbus-send (dbus),
# busctl (systemd), gdbus (libglib2.0-bin). Installed only when missing.
deps:
	@missing=""; \
	command -v dbus-daemon >/dev/null || missing="$$missing dbus"; \
	command -v busctl >/dev/null      || missing="$$missing systemd"; \
	command -v gdbus >/dev/null       || missing="$$missing libglib2.0-bin"; \
	command -v bash >/dev/null        || missing="$$missing bash"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	$(GO) mod download

test: deps
	$(GO) test -race -count=1 $(PKGS)

vet:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet $(PKGS)

clean:
	rm -rf bin
