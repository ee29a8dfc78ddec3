/* Placeholder until the MCP server lands. */
#include "cli.h"

int cmd_mcp(const struct cli *cli, int argc, char **argv)
{
        return cli_fail("nsbox mcp is not implemented yet");
}
