# SPDX-License-Identifier: Apache-2.0
# JavaScript test clients from npm, each pinned with its lock file in a dir of
# tests/, installed into a cache dir, never into the tree. A test that needs
# one runs `make -s NAME` and `make -s NAME-dir` (the dir of its node_modules).
#
# $(call npm_client,NAME,DIR,WHAT): targets NAME (install, once per
# package.json + package-lock.json: the dir's name carries their hash, so a
# finished install is never stale; it is built aside and renamed, so a
# half-done one is never used) and NAME-dir.
define npm_client
NPM_CLIENTS += $(1)
$(1)_DIR := $(CACHE_DIR)/npm/$(1)-$$(shell cat $(2)/package.json $(2)/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
.PHONY: $(1) $(1)-dir
$(1): $$($(1)_DIR)/.installed
$$($(1)_DIR)/.installed:
	@command -v npm >/dev/null || { echo "$(1): npm is missing (make deps-test installs it)" >&2; exit 1; }
	@echo "  NPM $(3) -> $$($(1)_DIR)"
	@rm -rf $$($(1)_DIR).tmp && mkdir -p $$($(1)_DIR).tmp
	@cp $(2)/package.json $(2)/package-lock.json $$($(1)_DIR).tmp/
	@cd $$($(1)_DIR).tmp && npm ci --no-audit --no-fund --loglevel=error
	@touch $$($(1)_DIR).tmp/.installed
	@rm -rf $$($(1)_DIR) && mv $$($(1)_DIR).tmp $$($(1)_DIR)
$(1)-dir:
	@echo $$($(1)_DIR)
endef

# The official MCP SDK client: tests/integration/mcp/test_mcp.py drives `nsbox mcp` with it.
$(eval $(call npm_client,mcp-sdk,tests/mcp,@modelcontextprotocol/sdk))
# The MCP Inspector (0.15.0, the last release that does not ask for Node >= 22), whose
# `--cli` mode tests/integration/mcp/test_mcp_family.py runs against `nsbox mcp`.
$(eval $(call npm_client,mcp-inspector,tests/mcp/inspector,@modelcontextprotocol/inspector))
# The unmodified E2B SDKs: tests/integration/e2b/ drives nsbox-http's E2B API with them.
$(eval $(call npm_client,e2b-sdk,tests/e2b,e2b @e2b/code-interpreter))
