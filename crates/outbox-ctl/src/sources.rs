//! Feeding the monitors: `contract import`, `watchlist add`, `article ingest`.

use anyhow::{bail, Context};
use outbox_core::watchlist_query::Query;
use outbox_decider::contracts::{self, Format};
use outbox_store::sources::{self, NewWatchlistEntry};
use outbox_store::{tenants, PgPool};
use std::io::Read;
use std::time::Duration;

/// `contract ...`
#[derive(Debug, clap::Subcommand)]
pub enum ContractCommand {
    /// Import (or update, by external id) contracts from a CSV or JSON file; a file with
    /// any bad row imports nothing. Prints how many were imported.
    Import {
        /// The file (`-` for standard input, with --format).
        file: String,
        /// Tenant name or id.
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: String,
        /// csv or json (default: from the file name).
        #[arg(long)]
        format: Option<String>,
    },
}

/// `watchlist ...`
#[derive(Debug, clap::Subcommand)]
pub enum WatchlistCommand {
    /// Add a watchlist entry; prints its id.
    Add(WatchlistArgs),
}

/// `article ...`
#[derive(Debug, clap::Subcommand)]
pub enum ArticleCommand {
    /// Ingest a Webz.io News API page (`{"posts": [...]}`); prints how many were new.
    Ingest {
        /// The file (`-` for standard input).
        #[arg(default_value = "-")]
        file: String,
    },
}

/// Reads FILE, or standard input for `-`.
fn read_input(path: &str) -> anyhow::Result<String> {
    if path == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {path}"))
}

/// Reads FILE, or standard input for `-`, refusing it once it passes `max` bytes: a
/// huge file is never held in memory whole.
fn read_input_capped(path: &str, max: usize) -> anyhow::Result<String> {
    let source: Box<dyn Read> = if path == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).with_context(|| format!("reading {path}"))?)
    };
    let mut bytes = Vec::new();
    source
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {path}"))?;
    if bytes.len() > max {
        bail!("{path} is larger than {} MiB; nothing ingested", max >> 20);
    }
    String::from_utf8(bytes).with_context(|| format!("{path} is not UTF-8 text"))
}

pub(crate) async fn import_contracts(
    pool: &PgPool,
    path: &str,
    tenant: &str,
    format: Option<&str>,
) -> anyhow::Result<()> {
    let format = match format {
        Some("csv") => Format::Csv,
        Some("json") => Format::Json,
        Some(other) => bail!("unknown format `{other}` (expected csv or json)"),
        None => Format::from_path(path).ok_or_else(|| {
            anyhow::anyhow!(
                "cannot tell the format of `{path}`: name it .csv or .json, or pass --format"
            )
        })?,
    };
    let text = read_input(path)?;
    let tenant = tenants::find(pool, tenant).await?;
    let (inserted, updated) = contracts::import(pool, tenant.id, &text, format).await?;
    println!("{}", inserted + updated);
    eprintln!(
        "imported {} contract(s) for tenant `{}`: {inserted} new, {updated} updated",
        inserted + updated,
        tenant.name
    );
    Ok(())
}

/// `watchlist add` flags.
#[derive(Debug, clap::Args)]
pub struct WatchlistArgs {
    /// Owning tenant (name or id).
    #[arg(long, env = "OUTBOX_TENANT")]
    tenant: String,
    /// Unique name within the tenant.
    #[arg(long)]
    name: String,
    /// Terms, "quoted phrases" and -exclusions; all terms must appear.
    #[arg(long)]
    query: String,
    /// Destination name; repeat for several.
    #[arg(long = "destination", required = true)]
    destinations: Vec<String>,
    /// Articles of one event (same thread, or same title within the window) share one alert.
    #[arg(long)]
    group_events: bool,
    /// Window for same-title grouping.
    #[arg(long, default_value = "48h", value_parser = outbox_core::duration::parse_positive)]
    group_window: Duration,
}

pub(crate) async fn add_watchlist_entry(pool: &PgPool, args: WatchlistArgs) -> anyhow::Result<()> {
    let name = crate::names::checked_name("watchlist", &args.name)?.to_owned();
    Query::parse(&args.query)?;
    let tenant = tenants::find(pool, &args.tenant).await?;
    let known: Vec<String> = sources::destination_index(pool, tenant.id)
        .await?
        .into_iter()
        .map(|(name, ..)| name)
        .collect();
    if let Some(unknown) = args.destinations.iter().find(|d| !known.contains(d)) {
        bail!(
            "tenant `{}` has no destination named `{unknown}`",
            tenant.name
        );
    }
    let id = sources::add_watchlist_entry(
        pool,
        &NewWatchlistEntry {
            tenant_id: tenant.id,
            name: name.clone(),
            query: args.query,
            destinations: args.destinations,
            group_events: args.group_events,
            group_window_secs: args.group_window.as_secs(),
        },
    )
    .await?;
    println!("{id}");
    eprintln!(
        "added watchlist entry `{name}` for tenant `{}`",
        tenant.name
    );
    Ok(())
}

pub(crate) async fn ingest_articles(pool: &PgPool, path: &str) -> anyhow::Result<()> {
    let text = read_input_capped(path, outbox_decider::news::MAX_ARTICLE_PAGE_BYTES)?;
    let (new, total) = outbox_decider::news::ingest(pool, &text).await?;
    println!("{new}");
    eprintln!("{total} article(s) read, {new} new");
    Ok(())
}
