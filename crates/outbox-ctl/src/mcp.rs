//! `outboxctl mcp`: the MCP server on standard input and output, for an agent on the
//! operator's or a developer's machine that starts its tools as local commands. It acts
//! with one tenant's API token, read from a file (a token given as an argument would show
//! in `ps`), and serves what `/mcp` serves (`outbox_api::mcp`).

use anyhow::Context;
use outbox_store::PgPool;
use std::path::PathBuf;

/// `mcp`'s flags.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// A file whose first line is the tenant's API token (`outboxctl token create`).
    #[arg(long, env = "OUTBOX_MCP_TOKEN_FILE")]
    token_file: PathBuf,
}

/// Serves until the client closes standard input.
pub(crate) async fn serve(pool: &PgPool, args: McpArgs) -> anyhow::Result<()> {
    let token = outbox_runtime::read_secret_file(&args.token_file).map_err(anyhow::Error::msg)?;
    outbox_api::mcp::serve_stdio(pool.clone(), token.trim().to_owned())
        .await
        .context("serving MCP on standard input and output")
}
