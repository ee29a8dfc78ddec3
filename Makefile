# SPDX-License-Identifier: Apache-2.0
# nsbox — build, image, demo and tests.  `make demo` and `make test` install
# what they need from Debian themselves, so a fresh Debian 12 host needs
# nothing else.

PREFIX    ?= /usr/local
DESTDIR   ?=
BUILD     ?= build
IMAGE_DIR ?= /var/lib/nsbox/images
# The image `make image` builds: python (the default image), desktop (docs/desktop.md)
# or browser (docs/browser.md).
IMAGE     ?= python
CACHE_DIR ?= /var/cache/nsbox
PYTHON    := /usr/bin/python3
# Where make install puts the Python SDK: the site dir under PREFIX that $(PYTHON) searches.
PYTHON_SITE ?= $(shell $(PYTHON) -c 'import site, sys, sysconfig; c = [p for p in site.getsitepackages(["$(PREFIX)"]) if p in sys.path]; print(c[0] if c else sysconfig.get_path("purelib", "posix_prefix", vars={"base": "$(PREFIX)"}))')

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wformat=2 -Wno-format-truncation \
           -fno-strict-aliasing -D_GNU_SOURCE -DNSBOX_PREFIX='"$(PREFIX)"' \
           -Icommon -Ipolicy -Iruntime -Imanager -Icli
# The CLI's objects for musl: the flags above, none of pkg-config's (glibc's) -I.
CLI_MUSL_CFLAGS := $(CFLAGS)
PKGS    := libseccomp libcap libnl-3.0 libnl-route-3.0 jansson uuid libsystemd libnftables libcrypto
LIBS     = $(shell pkg-config --libs $(PKGS)) -lpthread
CFLAGS  += $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
SAN     ?=

# Debian packages: to build and run, to test, for the cgroup v2 VM suite, and
# for the side-by-side benchmark.
DEPS_BUILD := build-essential pkg-config musl-tools cmake dpkg-dev libseccomp-dev libcap-dev libnl-3-dev libnl-route-3-dev \
              libjansson-dev uuid-dev libsystemd-dev libnftables-dev libc-ares-dev libarchive-dev debootstrap \
              umoci skopeo libmicrohttpd-dev uidmap libssl-dev
DEPS_TEST  := libcmocka-dev python3-pytest clang-format strace systemd qemu-system-x86 \
              linux-image-amd64 busybox-static e2fsprogs dnsmasq-base openssl iproute2 nftables \
              podman buildah python3-jsonschema python3-yaml python3-pytest-xdist python3-prometheus-client
DEPS_BENCH := bubblewrap crun hyperfine podman runc

COMMON_SRC  := $(wildcard common/*.c)
POLICY_SRC  := $(wildcard policy/*.c)
# nsbox-init is a static binary exec'd from a sealed memfd inside each sandbox.
INIT_ONLY   := runtime/init.c runtime/process.c runtime/supervisor.c
INIT_SRC    := $(INIT_ONLY) runtime/proto.c runtime/seccomp_check.c
RUNTIME_SRC := $(filter-out $(INIT_ONLY),$(wildcard runtime/*.c))
MANAGER_SRC := $(filter-out manager/main.c,$(wildcard manager/*.c))
CLI_SRC     := $(wildcard cli/*.c)
LIB_SRC     := $(COMMON_SRC) $(POLICY_SRC) $(RUNTIME_SRC) $(MANAGER_SRC)
UNIT_SRC    := $(wildcard tests/unit/test_*.c)
FUZZ_SRC    := $(wildcard tests/fuzz/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

BINS  := $(BUILD)/nsboxd $(BUILD)/nsbox $(BUILD)/nsbox-tar $(BUILD)/nsbox-init
# nsbox-egress: the egress proxy of network sandboxes (egress/, policy/netpolicy.c).
EGRESS_SRC := $(wildcard egress/*.c)
BINS  += $(BUILD)/nsbox-egress
# nsbox-http: the HTTP front of nsboxd (http/, libmicrohttpd), a client of
# nsboxd through common/client.c; apart, so the CLI starts without libmicrohttpd.
HTTP_SRC := $(wildcard http/*.c)
BINS  += $(BUILD)/nsbox-http
# forkrun: the attach client of the sandbox's Python fork server, installed in
# the image (rootfs-builder/build-image.sh --forkrun).
BINS  += $(BUILD)/forkrun
UNITS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))

.PHONY: all deps deps-test deps-node deps-bench image demo check check-integration test test-unit test-integration test-vm test-format test-systemd \
        format bench install uninstall asan clean fuzz test-layers test-clients
all: $(BINS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC $<"; $(CC) $(CFLAGS) $(SAN) -MMD -MP -c $< -o $@

$(BUILD)/libnsbox.a: $(call obj,$(LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/nsboxd: $(call obj,manager/main.c) $(BUILD)/libnsbox.a
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ $(LIBS)

# The CLI speaks JSON-RPC only (`nsbox run` without a daemon starts the
# nsboxd binary): no manager libraries to load at every start. It is static
# (the sanitizer build aside): no dynamic loader to find, map and relocate
# libraries at every start of every command (71 page faults a start, now 39).
# A static glibc cannot dlopen libarchive safely, so nsbox cp's tar streams
# run the nsbox-tar helper (cli/tar/), dynamically linked with libarchive.
#
# It is linked against musl (CLI_LIBC=musl, the default), not glibc: a static
# glibc's start probes the CPU with cpuid for its string functions, and in a
# VM each cpuid is an exit to the hypervisor (8-10 us here): 0.26 ms of a
# 0.6 ms start, where musl's is 0.3 ms in all (perf stat -r 500 of an empty
# main). Debian has musl (musl-tools) but no musl jansson: cli/musl/
# build-jansson.sh builds Debian's source package of it. CLI_LIBC=glibc links
# the CLI statically against glibc instead (a sanitizer build always does).
CLI_LIBC ?= musl
CLI_LIBS := $(shell pkg-config --libs jansson)
comma    := ,
ifeq ($(if $(SAN),glibc,$(CLI_LIBC)),musl)
MUSL_DIR := $(BUILD)/musl
$(MUSL_DIR)/lib/libjansson.a:
	JANSSON_SRC="$(JANSSON_SRC)" cli/musl/build-jansson.sh $(MUSL_DIR)
$(BUILD)/obj-musl/%.o: %.c $(MUSL_DIR)/lib/libjansson.a
	@mkdir -p $(dir $@)
	@echo "  CC (musl) $<"; musl-gcc $(CLI_MUSL_CFLAGS) -isystem $(MUSL_DIR)/include -MMD -MP -c $< -o $@
# A thread's stack is musl's 128 KiB unless the binary asks for more: 8 MiB,
# glibc's, for jansson's recursive parse in the MCP server's call threads.
$(BUILD)/nsbox: $(patsubst %.c,$(BUILD)/obj-musl/%.o,$(CLI_SRC) $(COMMON_SRC))
	musl-gcc -static -Wl,-z,stack-size=8388608 -o $@ $^ -L$(MUSL_DIR)/lib -ljansson -lpthread
-include $(patsubst %.c,$(BUILD)/obj-musl/%.d,$(CLI_SRC) $(COMMON_SRC))
else
CLI_LINK  = $(if $(SAN),-Wl$(comma)-Bstatic $(CLI_LIBS) -Wl$(comma)-Bdynamic,-static $(CLI_LIBS))
$(BUILD)/nsbox: $(call obj,$(CLI_SRC)) $(call obj,$(COMMON_SRC))
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ $(CLI_LINK)
endif

$(BUILD)/nsbox-tar: $(call obj,cli/tar/nsbox_tar.c cli/failure.c cli/tar_records.c common/io.c)
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ $(shell pkg-config --libs libarchive)

# Static and sanitizer-free: it runs inside the sandbox's root, where the host's
# dynamic loader and libraries are not.
$(BUILD)/nsbox-init: $(patsubst %.c,$(BUILD)/obj/init/%.o,$(INIT_SRC) common/error.c common/log.c)
	$(CC) -static -o $@ $^ -l:libcap.a
$(BUILD)/obj/init/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC $< (init)"; $(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# Static and small: it runs in the image for each stateless python.run.
$(BUILD)/forkrun: rootfs-builder/forkrun.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -static -s -o $@ $<

$(BUILD)/nsbox-egress: $(call obj,$(EGRESS_SRC)) $(call obj,policy/netpolicy.c policy/tlscert.c $(COMMON_SRC))
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ $(shell pkg-config --libs jansson libssl libcrypto libnl-3.0) -lcares -lpthread

$(BUILD)/obj/http/%.o: CFLAGS += $(shell pkg-config --cflags libmicrohttpd gnutls)
$(BUILD)/nsbox-http: $(call obj,$(HTTP_SRC) $(COMMON_SRC))
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ $(shell pkg-config --libs jansson libmicrohttpd gnutls) -lpthread

# The tokens file parser is http/ code, outside libnsbox.a.
$(BUILD)/tests/test_http_tokens: tests/unit/test_http_tokens.c $(call obj,http/auth.c common/error.c)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ihttp $(shell pkg-config --cflags libmicrohttpd gnutls) $(SAN) -o $@ $^ -lgnutls -ljansson -lcmocka -lpthread

# The per-owner tables are http/ code, outside libnsbox.a.
$(BUILD)/tests/test_http_owned: tests/unit/test_http_owned.c $(call obj,http/owned.c)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ihttp $(SAN) -o $@ $^ -lcmocka

# The sniffers are egress/ code, outside libnsbox.a.
$(BUILD)/tests/test_sniff: tests/unit/test_sniff.c $(call obj,egress/sniff.c)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iegress $(SAN) -o $@ $^ -lcmocka

# The secrets' injection is egress/ code, outside libnsbox.a; policy/secrets.c is in it.
$(BUILD)/tests/test_inject: tests/unit/test_inject.c $(call obj,egress/inject.c egress/sniff.c) $(BUILD)/libnsbox.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iegress $(SAN) -o $@ $^ $(LIBS) -lcmocka

# The supervisor as the init has it: the init's objects, no sanitizer.
$(BUILD)/tests/test_supervisor: tests/unit/test_supervisor.c \
		$(patsubst %.c,$(BUILD)/obj/init/%.o,runtime/supervisor.c runtime/process.c runtime/proto.c)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ -lcap -lcmocka

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libnsbox.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN) -o $@ $< $(BUILD)/libnsbox.a $(LIBS) -lcmocka

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# Suites with their own setup keep their rules beside their tests.
include tests/vm/vm.mk tests/fuzz/fuzz.mk tests/npm.mk tests/bench/bench.mk deploy/kubernetes/deploy.mk tests/integration/userns.mk

# --- setup -----------------------------------------------------------------
# Install only what is missing, non-interactively; `apt-get update` only when
# something has to be installed.
define apt_install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

deps:
	$(call apt_install,$(DEPS_BUILD))
# Node and npm (for the MCP SDK client in the tests) from Debian only where
# the machine has none: a host's own Node must not be replaced.
deps-test: deps
	$(call apt_install,$(DEPS_TEST))
	@command -v node >/dev/null && command -v npm >/dev/null || $(MAKE) --no-print-directory deps-node

deps-node:
	$(call apt_install,nodejs npm)
deps-bench: deps
	$(call apt_install,$(DEPS_BENCH))

image: deps
	$(MAKE) $(BUILD)/forkrun
	rootfs-builder/build-image.sh --name $(IMAGE) --out $(IMAGE_DIR) --cache $(CACHE_DIR) --forkrun $(BUILD)/forkrun

demo: deps
	$(MAKE) all
	$(MAKE) image
	tests/demo.sh $(BUILD)

# --- tests -----------------------------------------------------------------
# The integration tests live by area in tests/integration/<area>/; markers
# (registered in tests/integration/conftest.py) pick the runs: core (make
# check and the userns runs), nested, slow (not in make check), serial (never
# beside the other tests: a pass of their own) and hostroot.
#
# $(call integration,MARKS): the tests MARKS selects (all if empty), those not marked serial
# in PYTEST_JOBS workers (a file's tests stay on one worker, with their
# module-scoped daemon: --dist loadfile), then the serial ones, in two streams
# of one test at a time (their xdist_group: host-network or host, see
# tests/integration/conftest.py). Both passes always run; either failing
# fails. PYTEST_ARGS adds options to both (e.g. PYTEST_ARGS=--durations=30).
PYTEST_JOBS ?= 2
PYTEST_ARGS ?=
INTEGRATION_ENV = NSBOX_BUILD=$(abspath $(BUILD)) NSBOX_IMAGE_DIR=$(IMAGE_DIR)
define integration
	@rc=0; \
	echo "== integration: $(if $(1),($(1)) and )not serial, $(PYTEST_JOBS) workers"; \
	$(INTEGRATION_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider -n $(PYTEST_JOBS) --dist loadfile \
		-m "$(if $(1),($(1)) and )not serial" $(PYTEST_ARGS) tests/integration || { r=$$?; [ $$r -eq 5 ] || rc=$$r; }; \
	echo "== integration: $(if $(1),($(1)) and )serial, two streams (host-network, host)"; \
	$(INTEGRATION_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup \
		-m "$(if $(1),($(1)) and )serial" $(PYTEST_ARGS) tests/integration || { r=$$?; [ $$r -eq 5 ] || rc=$$r; }; \
	exit $$rc
endef

# The quick gate before a commit (at most 5 minutes on a 2-core box): unit
# tests, each fuzz target for CHECK_FUZZ_SECONDS, the integration core but
# its slow tests.
CHECK_FUZZ_SECONDS ?= 5
check: deps-test
	$(MAKE) all $(UNITS)
	$(MAKE) image
	$(MAKE) test-clients
	$(MAKE) test-layers
	$(MAKE) test-unit
	$(MAKE) test-fuzz FUZZ_SECONDS=$(CHECK_FUZZ_SECONDS)
	$(MAKE) check-integration
# Everything the tests fetch from a registry, fetched before any test runs: a
# test's upstream namespace takes 203.0.113.0/24 on the host while it runs,
# which is where this kind of machine's resolver sends registry names.
test-clients: deps-test $(NPM_CLIENTS)

check-integration: all
	$(call integration,core and not slow)

test: deps-test
	$(MAKE) all $(UNITS)
	$(MAKE) image
	$(MAKE) image IMAGE=desktop
	$(MAKE) image IMAGE=browser
	$(MAKE) test-clients
	$(MAKE) test-format
	$(MAKE) test-layers
	$(MAKE) test-systemd
	$(MAKE) test-unit
	$(MAKE) test-fuzz
	$(MAKE) test-integration
	$(MAKE) test-integration-userns
	$(MAKE) test-vm

# systemd-analyze prints problems but exits 0 for many of them: any output fails.
test-systemd: all
	@dir=$$(mktemp -d) && \
	sed -e 's#@PREFIX@/bin/nsboxd#$(abspath $(BUILD))/nsboxd#' -e 's#@PREFIX@#$(PREFIX)#g' \
		manager/systemd/nsboxd.service.in > $$dir/nsboxd.service && \
	sed -e 's#@PREFIX@/bin/nsbox-http#$(abspath $(BUILD))/nsbox-http#' -e 's#@PREFIX@#$(PREFIX)#g' \
		manager/systemd/nsbox-http.service.in > $$dir/nsbox-http.service && \
	cp manager/systemd/nsbox.slice manager/systemd/nsboxd.socket $$dir/ && \
	out=$$(systemd-analyze verify $$dir/nsboxd.service $$dir/nsbox-http.service $$dir/nsbox.slice $$dir/nsboxd.socket 2>&1); rc=$$?; \
	rm -rf $$dir; \
	if [ $$rc -ne 0 ] || [ -n "$$out" ]; then echo "$$out"; echo "systemd units: FAILED"; exit 1; fi; \
	echo "systemd units: ok"

install: all install-sdk
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/libexec/nsbox $(DESTDIR)$(PREFIX)/share/nsbox/seccomp \
		$(DESTDIR)$(PREFIX)/share/nsbox/rootfs-builder $(DESTDIR)$(PREFIX)/share/doc/nsbox \
		$(DESTDIR)/etc/systemd/system $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8
	# nsboxd.json and nsbox-http's tokens file live here (the docs write /etc/nsbox/http-tokens).
	install -d -m 0755 $(DESTDIR)/etc/nsbox
	install -m 0755 $(BUILD)/nsboxd $(BUILD)/nsbox $(BUILD)/nsbox-http $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(BUILD)/nsbox-init $(DESTDIR)$(PREFIX)/libexec/nsbox/
	install -m 0755 $(BUILD)/nsbox-egress $(BUILD)/nsbox-tar $(DESTDIR)$(PREFIX)/libexec/nsbox/
	install -m 0644 seccomp-profiles/*.json $(DESTDIR)$(PREFIX)/share/nsbox/seccomp/
	cp -r rootfs-builder/. $(DESTDIR)$(PREFIX)/share/nsbox/rootfs-builder/
	install -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/nsbox/
	cp -r docs $(DESTDIR)$(PREFIX)/share/doc/nsbox/
	install -m 0644 docs/man/nsbox.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 docs/man/nsboxd.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	sed -e 's#@PREFIX@#$(PREFIX)#g' manager/systemd/nsboxd.service.in > $(DESTDIR)/etc/systemd/system/nsboxd.service
	sed -e 's#@PREFIX@#$(PREFIX)#g' manager/systemd/nsbox-http.service.in > $(DESTDIR)/etc/systemd/system/nsbox-http.service
	install -m 0644 manager/systemd/nsbox.slice manager/systemd/nsboxd.socket $(DESTDIR)/etc/systemd/system/
	install -d $(DESTDIR)$(PREFIX)/share/nsbox/systemd
	sed -e 's#@PREFIX@#$(PREFIX)#g' manager/systemd/nsboxd-live-restore.conf > $(DESTDIR)$(PREFIX)/share/nsbox/systemd/nsboxd-live-restore.conf
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

# The Python SDK (stdlib only), importable by $(PYTHON) as `nsbox`.
.PHONY: install-sdk
install-sdk:
	install -d $(DESTDIR)$(PYTHON_SITE)/nsbox
	install -m 0644 sdk/python/nsbox/*.py $(DESTDIR)$(PYTHON_SITE)/nsbox/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/nsboxd $(DESTDIR)$(PREFIX)/bin/nsbox $(DESTDIR)$(PREFIX)/bin/nsbox-http \
		$(DESTDIR)/etc/systemd/system/nsboxd.service $(DESTDIR)/etc/systemd/system/nsbox.slice \
		$(DESTDIR)/etc/systemd/system/nsboxd.socket $(DESTDIR)/etc/systemd/system/nsbox-http.service
	rm -f $(DESTDIR)$(PREFIX)/share/man/man1/nsbox.1 $(DESTDIR)$(PREFIX)/share/man/man8/nsboxd.8
	rm -rf $(DESTDIR)$(PREFIX)/libexec/nsbox $(DESTDIR)$(PREFIX)/share/nsbox $(DESTDIR)$(PREFIX)/share/doc/nsbox
	rm -rf $(DESTDIR)$(PYTHON_SITE)/nsbox
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

test-format:
	@bad=$$(for f in $$(git ls-files '*.c' '*.h'); do \
		clang-format --style=file "$$f" | cmp -s - "$$f" || echo "$$f"; done); \
	if [ -n "$$bad" ]; then echo "not clang-formatted (run make format):"; echo "$$bad"; exit 1; fi; \
	echo "format: ok"

# The layering of the C tree (docs/architecture.md) and the checker's own tests.
test-layers:
	$(PYTHON) tests/layers/check_layers.py
	$(PYTHON) -m pytest -q -p no:cacheprovider tests/layers

format:
	clang-format --style=file -i $$(git ls-files '*.c' '*.h')

test-unit: $(UNITS)
	@set -e; for t in $(UNITS); do echo "== $$t"; $$t; done

test-integration: all
	$(call integration,)

asan:
	$(MAKE) BUILD=build-asan SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" all \
		$(patsubst $(BUILD)/%,build-asan/%,$(UNITS))

clean:
	rm -rf $(BUILD) build-asan
