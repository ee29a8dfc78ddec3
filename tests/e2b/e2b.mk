# SPDX-License-Identifier: Apache-2.0
# The unmodified E2B JavaScript SDKs (e2b and @e2b/code-interpreter, pinned
# with their lock file in tests/e2b/), installed from npm into a cache dir,
# never into the tree. tests/integration/e2b/ drives nsbox-http's E2B API with
# them and runs `make -s e2b-sdk` itself when they are not there yet.
#   make e2b-sdk       install it (once per package.json + package-lock.json)
#   make e2b-sdk-dir   print the dir that holds its node_modules
E2B_SDK_HASH := $(shell cat tests/e2b/package.json tests/e2b/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
E2B_SDK_DIR  := $(CACHE_DIR)/npm/e2b-$(E2B_SDK_HASH)

.PHONY: e2b-sdk e2b-sdk-dir
e2b-sdk: $(E2B_SDK_DIR)/.installed

# The dir name carries the hash of what it holds, so a finished install is
# never stale; it is built aside and renamed, so a half-done one is never used.
$(E2B_SDK_DIR)/.installed:
	@command -v npm >/dev/null || { echo "e2b-sdk: npm is missing (make deps-test installs it)" >&2; exit 1; }
	@echo "  NPM e2b @e2b/code-interpreter -> $(E2B_SDK_DIR)"
	@rm -rf $(E2B_SDK_DIR).tmp && mkdir -p $(E2B_SDK_DIR).tmp
	@cp tests/e2b/package.json tests/e2b/package-lock.json $(E2B_SDK_DIR).tmp/
	@cd $(E2B_SDK_DIR).tmp && npm ci --no-audit --no-fund --loglevel=error
	@touch $(E2B_SDK_DIR).tmp/.installed
	@rm -rf $(E2B_SDK_DIR) && mv $(E2B_SDK_DIR).tmp $(E2B_SDK_DIR)

e2b-sdk-dir:
	@echo $(E2B_SDK_DIR)
