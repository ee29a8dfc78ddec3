# SPDX-License-Identifier: Apache-2.0
# Playwright's client library (npm playwright-core, pinned with its lock file
# in tests/browser/; no browser download: it connects over CDP to the Chromium
# inside a sandbox), installed from npm into a cache dir, never into the tree.
# tests/integration/browser/ runs `make -s playwright` itself when it is not
# there yet.
#   make playwright       install it (once per package.json + package-lock.json)
#   make playwright-dir   print the dir that holds its node_modules
PLAYWRIGHT_HASH := $(shell cat tests/browser/package.json tests/browser/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
PLAYWRIGHT_DIR  := $(CACHE_DIR)/npm/playwright-$(PLAYWRIGHT_HASH)

.PHONY: playwright playwright-dir
playwright: $(PLAYWRIGHT_DIR)/.installed

$(PLAYWRIGHT_DIR)/.installed:
	@command -v npm >/dev/null || { echo "playwright: npm is missing (make deps-test installs it)" >&2; exit 1; }
	@echo "  NPM playwright-core -> $(PLAYWRIGHT_DIR)"
	@rm -rf $(PLAYWRIGHT_DIR).tmp && mkdir -p $(PLAYWRIGHT_DIR).tmp
	@cp tests/browser/package.json tests/browser/package-lock.json $(PLAYWRIGHT_DIR).tmp/
	@cd $(PLAYWRIGHT_DIR).tmp && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
	@touch $(PLAYWRIGHT_DIR).tmp/.installed
	@rm -rf $(PLAYWRIGHT_DIR) && mv $(PLAYWRIGHT_DIR).tmp $(PLAYWRIGHT_DIR)

playwright-dir:
	@echo $(PLAYWRIGHT_DIR)
