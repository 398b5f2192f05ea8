//! API tokens: `token create|list|revoke`. A token is printed once, when it is created;
//! only its hash is stored.

use chrono::{DateTime, Utc};
use outbox_core::duration;
use outbox_store::tokens::{self, Revoked};
use outbox_store::{tenants, PgPool};
use std::time::Duration;
use uuid::Uuid;

use crate::table::Table;

/// `token ...`
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Create an API token for a tenant; prints the token, which is shown only this once.
    Create {
        /// Tenant name or id.
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: String,
        /// A note on what the token is for.
        #[arg(long)]
        label: Option<String>,
        /// Refuse the token once this long has passed (e.g. 90d); default: never.
        #[arg(long, value_parser = outbox_core::duration::parse_positive)]
        expires_in: Option<std::time::Duration>,
    },
    /// List tokens (never the token itself): id, label, created, last used, expiry, state.
    List {
        /// Only this tenant's (name or id).
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: Option<String>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by id: the API refuses it from the next request on.
    Revoke {
        /// The token's id (from `token list`).
        id: String,
    },
}

/// Runs a `token ...` command.
pub(crate) async fn run(pool: &PgPool, command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create {
            tenant,
            label,
            expires_in,
        } => create(pool, &tenant, label.as_deref(), expires_in).await,
        TokenCommand::List { tenant, json } => list(pool, tenant.as_deref(), json).await,
        TokenCommand::Revoke { id } => revoke(pool, &id).await,
    }
}

/// `token create`: prints the new token, shown only this once.
async fn create(
    pool: &PgPool,
    tenant: &str,
    label: Option<&str>,
    expires_in: Option<Duration>,
) -> anyhow::Result<()> {
    let tenant = tenants::find(pool, tenant).await?;
    let token = tokens::create_expiring(pool, tenant.id, label, expires_in).await?;
    println!("{}", token.expose());
    let lifetime = match expires_in {
        Some(d) => format!("; it expires in {}", duration::format(d)),
        None => String::new(),
    };
    eprintln!(
        "API token for tenant `{}`: shown only now, store it somewhere safe{lifetime}",
        tenant.name
    );
    Ok(())
}

/// `token list`: every token but the token itself, with its state.
async fn list(pool: &PgPool, tenant: Option<&str>, json: bool) -> anyhow::Result<()> {
    let tenant_id = crate::tenants::filter(pool, tenant).await?;
    let tokens = tokens::list(pool, tenant_id).await?;
    if json {
        for token in &tokens {
            println!("{}", outbox_core::untrusted::to_json_line(token)?);
        }
        return Ok(());
    }
    let now = Utc::now();
    let time = |t: Option<DateTime<Utc>>| {
        t.map_or_else(
            || "-".to_owned(),
            |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
    };
    let mut table = Table::new([
        "ID",
        "TENANT",
        "LABEL",
        "CREATED",
        "LAST USED",
        "EXPIRES",
        "STATE",
    ]);
    for t in tokens {
        let state = if t.revoked_at.is_some() {
            "revoked"
        } else if t.expires_at.is_some_and(|at| at <= now) {
            "expired"
        } else {
            "active"
        };
        table.row([
            t.id.to_string(),
            t.tenant,
            t.label.unwrap_or_default(),
            time(Some(t.created_at)),
            time(t.last_used_at),
            time(t.expires_at),
            state.to_owned(),
        ]);
    }
    print!("{table}");
    Ok(())
}

/// `token revoke`: the API refuses the token from the next request on.
async fn revoke(pool: &PgPool, id: &str) -> anyhow::Result<()> {
    let id = Uuid::parse_str(id).map_err(|_| anyhow::anyhow!("`{id}` is not a token id"))?;
    match tokens::revoke(pool, id).await? {
        Revoked::Now => eprintln!("token {id} revoked: the API refuses it from now on"),
        Revoked::Already(at) => eprintln!(
            "token {id} was already revoked at {}",
            at.format("%Y-%m-%d %H:%M:%S UTC")
        ),
    }
    Ok(())
}
