# SPDX-License-Identifier: Apache-2.0
# The official MCP SDK client (@modelcontextprotocol/sdk, pinned with its
# lock file in tests/mcp/), installed from npm into a cache dir, never into the
# tree. tests/integration/mcp/test_mcp.py drives `nsbox mcp` with it and runs
# `make -s mcp-sdk` itself when the SDK is not there yet.
#   make mcp-sdk       install it (once per package.json + package-lock.json)
#   make mcp-sdk-dir   print the dir that holds its node_modules
MCP_SDK_HASH := $(shell cat tests/mcp/package.json tests/mcp/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
MCP_SDK_DIR  := $(CACHE_DIR)/npm/mcp-$(MCP_SDK_HASH)

.PHONY: mcp-sdk mcp-sdk-dir
mcp-sdk: $(MCP_SDK_DIR)/.installed

# The dir name carries the hash of what it holds, so a finished install is
# never stale; it is built aside and renamed, so a half-done one is never used.
$(MCP_SDK_DIR)/.installed:
	@command -v npm >/dev/null || { echo "mcp-sdk: npm is missing (make deps-test installs it)" >&2; exit 1; }
	@echo "  NPM @modelcontextprotocol/sdk -> $(MCP_SDK_DIR)"
	@rm -rf $(MCP_SDK_DIR).tmp && mkdir -p $(MCP_SDK_DIR).tmp
	@cp tests/mcp/package.json tests/mcp/package-lock.json $(MCP_SDK_DIR).tmp/
	@cd $(MCP_SDK_DIR).tmp && npm ci --no-audit --no-fund --loglevel=error
	@touch $(MCP_SDK_DIR).tmp/.installed
	@rm -rf $(MCP_SDK_DIR) && mv $(MCP_SDK_DIR).tmp $(MCP_SDK_DIR)

mcp-sdk-dir:
	@echo $(MCP_SDK_DIR)

# The MCP Inspector (@modelcontextprotocol/inspector, pinned with its lock file
# in tests/mcp/inspector/; 0.15.0, the last release that does not ask for
# Node >= 22), whose `--cli` mode tests/integration/mcp/test_mcp_family.py runs
# against `nsbox mcp`. Installed the same way as the SDK, in its own dir.
#   make mcp-inspector       install it
#   make mcp-inspector-dir   print the dir that holds its node_modules
MCP_INSPECTOR_HASH := $(shell cat tests/mcp/inspector/package.json tests/mcp/inspector/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
MCP_INSPECTOR_DIR  := $(CACHE_DIR)/npm/mcp-inspector-$(MCP_INSPECTOR_HASH)

.PHONY: mcp-inspector mcp-inspector-dir
mcp-inspector: $(MCP_INSPECTOR_DIR)/.installed

$(MCP_INSPECTOR_DIR)/.installed:
	@command -v npm >/dev/null || { echo "mcp-inspector: npm is missing (make deps-test installs it)" >&2; exit 1; }
	@echo "  NPM @modelcontextprotocol/inspector -> $(MCP_INSPECTOR_DIR)"
	@rm -rf $(MCP_INSPECTOR_DIR).tmp && mkdir -p $(MCP_INSPECTOR_DIR).tmp
	@cp tests/mcp/inspector/package.json tests/mcp/inspector/package-lock.json $(MCP_INSPECTOR_DIR).tmp/
	@cd $(MCP_INSPECTOR_DIR).tmp && npm ci --no-audit --no-fund --loglevel=error
	@touch $(MCP_INSPECTOR_DIR).tmp/.installed
	@rm -rf $(MCP_INSPECTOR_DIR) && mv $(MCP_INSPECTOR_DIR).tmp $(MCP_INSPECTOR_DIR)

mcp-inspector-dir:
	@echo $(MCP_INSPECTOR_DIR)
