# SPDX-License-Identifier: Apache-2.0
# Bounded fuzzing of the request parser (make test-fuzz).
#
# libFuzzer ships with clang; on Debian 12 its runtime (libclang_rt.fuzzer)
# is in libclang-rt-14-dev. The target is built from the sources it covers,
# with ASan and UBSan, and run for FUZZ_SECONDS on a copy of the seed corpus
# (tests/fuzz/corpus stays as committed; new inputs go to the build dir).
FUZZ_SECONDS ?= 30
FUZZ_CC      ?= clang
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_TARGET  := $(FUZZ_DIR)/fuzz_request
FUZZ_SOURCES := tests/fuzz/fuzz_request.c common/jsonrpc.c common/error.c common/textenc.c common/size.c \
                policy/policy.c policy/params.c

# fs.* paths: fs_path_parse and the prefix walk of mkdir -p (manager/fs_path.c).
FUZZ_FS_TARGET  := $(FUZZ_DIR)/fuzz_fs_path
FUZZ_FS_SOURCES := tests/fuzz/fuzz_fs_path.c manager/fs_path.c common/error.c

# nsbox-egress's sniffers: TLS SNI, HTTP request heads, DNS questions (egress/sniff.c).
FUZZ_SNIFF_TARGET  := $(FUZZ_DIR)/fuzz_sniff
FUZZ_SNIFF_SOURCES := tests/fuzz/fuzz_sniff.c egress/sniff.c

.PHONY: test-fuzz deps-fuzz fuzz-build
deps-fuzz:
	$(call apt_install,clang libclang-rt-14-dev libjansson-dev)

$(FUZZ_TARGET): $(FUZZ_SOURCES) common/jsonrpc.h common/textenc.h common/error.h common/size.h policy/policy.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -std=gnu11 -D_GNU_SOURCE -Icommon -Ipolicy -fno-omit-frame-pointer \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
		-o $@ $(FUZZ_SOURCES) $(shell pkg-config --cflags --libs jansson) -lm

$(FUZZ_FS_TARGET): $(FUZZ_FS_SOURCES) manager/fs_path.h common/error.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -std=gnu11 -D_GNU_SOURCE -Icommon -Imanager -fno-omit-frame-pointer \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $(FUZZ_FS_SOURCES)

$(FUZZ_SNIFF_TARGET): $(FUZZ_SNIFF_SOURCES) egress/sniff.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -std=gnu11 -D_GNU_SOURCE -Iegress -fno-omit-frame-pointer \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $(FUZZ_SNIFF_SOURCES)

fuzz-build: deps-fuzz
	$(MAKE) $(FUZZ_TARGET) $(FUZZ_FS_TARGET) $(FUZZ_SNIFF_TARGET)

test-fuzz: fuzz-build
	@mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/artifacts
	$(FUZZ_TARGET) -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
		-print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/artifacts/ \
		$(FUZZ_DIR)/corpus tests/fuzz/corpus
	@mkdir -p $(FUZZ_DIR)/corpus-fs-path
	$(FUZZ_FS_TARGET) -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
		-print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/artifacts/ \
		$(FUZZ_DIR)/corpus-fs-path tests/fuzz/corpus-fs-path
	@mkdir -p $(FUZZ_DIR)/corpus-sniff
	$(FUZZ_SNIFF_TARGET) -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -max_len=20000 \
		-print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/artifacts/ \
		$(FUZZ_DIR)/corpus-sniff tests/fuzz/corpus-sniff
