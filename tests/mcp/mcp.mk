# The official MCP SDK client, installed into a cache dir (make mcp-sdk).
.PHONY: mcp-sdk
mcp-sdk:
	@true
