//! The MCP server over standard input and output, for an agent that runs `outboxctl mcp`
//! on its own machine: the same tools and resources as `/mcp`, acting with one token.
//! Standard output carries the protocol only; logs go to standard error.

use outbox_store::PgPool;
use rmcp::ServiceExt;

use super::OutboxMcp;
use crate::auth::Caller;
use crate::AppState;

/// Serves MCP on standard input and output with `token` until the client closes its end.
/// The token is checked first, so a wrong one ends the command at once with the reason;
/// after that every request authenticates it again (a revoked token stops working).
pub async fn serve_stdio(pool: PgPool, token: String) -> std::io::Result<()> {
    let state = AppState::new(pool);
    Caller::authenticate(&state, &token)
        .await
        .map_err(|problem| std::io::Error::other(problem.detail().to_owned()))?;
    let running = OutboxMcp::with_token(state, token)
        .serve(rmcp::transport::io::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
