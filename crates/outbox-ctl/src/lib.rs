//! `outboxctl`, the operator's tool.
//!
//! Layout:
//! - [`Cli`], [`Command`]: the command line (clap); every flag also reads an environment
//!   variable. A subject's subcommands (`tenant ...`, `destination ...`) and a command's
//!   flags are declared in the module that runs them.
//! - [`run`]: runs a parsed command; the commands on the database are sent on by one
//!   table, a subject's commands by its module's own table.
//! - `schema`: `migrate`, and `migrate --status` (the migrations a database has applied
//!   and those pending).
//! - `tenants`: `tenant create|configure`; `names`: names (and alert ids) as operators
//!   type them.
//! - `destinations`: `destination add|update|list|show|enable|disable`, a module per
//!   kind of destination.
//! - `credentials`: signing secrets from files or standard input, sealed with
//!   `OUTBOX_SECRET_KEYS`; `destination rotate-secret`, `secrets rewrap`.
//! - `tokens`: `token create|list|revoke`.
//! - `secret_input`: a secret given in a file or on standard input (signing secrets, an
//!   email API's key, an SMTP password), never as an argument.
//! - `demo`: the whole system on the sample data, in a database of its own, on a private
//!   server when none answers; its printout shows stored emails as people read them.
//! - `inspect`: `alert show`, `outbox list`.
//! - `evidence`: `evidence verify|export|check|checkpoint|keygen`, the tamper-evident
//!   trail (`outbox-evidence`); `check` and `keygen` need no database.
//! - `lanes`: `lanes list`, an ordered destination's lanes held up by their head.
//! - `replay`, `resolve`, `revise`: acting on alerts, each action with the operator's
//!   name and note in the evidence (`accountable`: `--actor` and `--note`).
//! - `stats`: the figures; `prune`: retention.
//! - `sources`: what the monitors read: `contract import`, `watchlist add`,
//!   `article ingest`.
//! - `accounts`: `operator add|list|remove`, the console's operator accounts (a new
//!   account's password is printed once; `outbox_core::password` makes and hashes it).
//! - `template`: `template preview`, an alert rendered as email (`outbox-render`) and
//!   printed instead of sent.
//! - `audit`: the audit log's line for each command that changes accounts, tokens,
//!   destinations or secrets, written once the command succeeded (`cli:NAME`).
//! - `mcp`: `mcp --token-file F`, the MCP server for agents over standard input and
//!   output (`outbox_api::mcp::serve_stdio`); logs go to standard error.
//! - `table`: plain-text tables for people (`--json` gives one JSON object per line).
//!   Text others wrote (subjects, a destination's answer, evidence) is shown through
//!   `outbox_core::untrusted::visible` in every view, and `error:` lines too.
//!
//! Output contract: a command that creates something prints only its id (or token) on
//! stdout, and guidance on stderr, so scripts can capture it. Bad input exits non-zero with
//! a one-line reason and writes nothing.

mod accountable;
mod accounts;
mod audit;
mod credentials;
mod demo;
mod destinations;
mod evidence;
mod inspect;
mod lanes;
mod mcp;
mod names;
mod prune;
mod replay;
mod resolve;
mod revise;
mod schema;
mod secret_input;
mod sources;
mod stats;
mod table;
mod template;
mod tenants;
mod tokens;

use clap::{Parser, Subcommand};
use outbox_core::sealing::SealingKeys;
use outbox_store::PgPool;

/// The operator's tool for the alert outbox.
#[derive(Debug, Parser)]
#[command(
    name = "outboxctl",
    version = outbox_store::schema::version_line(),
    about,
    after_help = "The reference of every command: docs/operations.md, section outboxctl."
)]
pub struct Cli {
    /// PostgreSQL connection URL.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres",
        global = true,
        hide_env_values = true
    )]
    pub database_url: String,

    /// Keys that encrypt signing secrets at rest: `id:base64,...` (32-byte keys; the first
    /// encrypts, all decrypt). Without it secrets are stored in plain text.
    #[arg(
        long,
        env = "OUTBOX_SECRET_KEYS",
        global = true,
        default_value = "",
        hide_default_value = true,
        hide_env_values = true,
        value_parser = parse_secret_keys
    )]
    pub secret_keys: SealingKeys,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the schema's migrations (safe to run again).
    Migrate {
        /// Apply nothing: list each migration this build carries, applied (with when) or
        /// pending, and any the database has that this build does not.
        #[arg(long)]
        status: bool,
    },
    /// Run the whole system on the sample data in a database of its own, with faults,
    /// and check that every alert was delivered once or is held with its reason.
    Demo(demo::DemoArgs),
    /// Manage tenants.
    #[command(subcommand)]
    Tenant(tenants::TenantCommand),
    /// Manage API tokens.
    #[command(subcommand)]
    Token(tokens::TokenCommand),
    /// Manage destinations.
    #[command(subcommand)]
    Destination(destinations::DestinationCommand),
    /// Signing secrets at rest.
    #[command(subcommand)]
    Secrets(credentials::SecretsCommand),
    /// Inspect alerts.
    #[command(subcommand)]
    Alert(inspect::AlertCommand),
    /// Inspect the outbox.
    #[command(subcommand)]
    Outbox(inspect::OutboxCommand),
    /// Ordered lanes (destinations with `--ordering per-key`).
    #[command(subcommand)]
    Lanes(lanes::LanesCommand),
    /// The tamper-evident trail: verify chains and checkpoints, export and check an
    /// alert's proof bundle, make a checkpoint, create a signing key.
    #[command(subcommand)]
    Evidence(evidence::EvidenceCommand),
    /// Put held or failed alerts back in the queue (same id, key and payload).
    Replay(replay::ReplayArgs),
    /// Settle an uncertain or held alert by what you established at the destination.
    Resolve(resolve::ResolveArgs),
    /// Correct an alert's payload: a new revision, as through the API.
    Revise(revise::ReviseArgs),
    /// Counts by state, destination and tenant; what is stuck; the last hour.
    Stats {
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Retention: removes the payload, attempt rows and evidence lines of alerts that
    /// finished (accepted or superseded; failed with --include-failed) before the cutoff.
    /// Identity, fingerprint, outcome, reference and times stay, so a repeated approval
    /// is still recognised. Live, held and uncertain alerts are never touched.
    Prune(prune::PruneArgs),
    /// Contracts for the renewal monitor.
    #[command(subcommand)]
    Contract(sources::ContractCommand),
    /// Watchlist entries for the news monitor.
    #[command(subcommand)]
    Watchlist(sources::WatchlistCommand),
    /// News articles for the watchlists.
    #[command(subcommand)]
    Article(sources::ArticleCommand),
    /// Email templates.
    #[command(subcommand)]
    Template(template::TemplateCommand),
    /// Operator accounts of the console (`decider serve --console-listen`).
    #[command(subcommand)]
    Operator(accounts::OperatorCommand),
    /// Serve MCP (Model Context Protocol) on standard input and output for a local agent,
    /// acting with one tenant's API token: the tools and resources of `/mcp`.
    Mcp(mcp::McpArgs),
}

/// Runs one command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let Cli {
        database_url,
        secret_keys,
        command,
    } = cli;
    match command {
        // These reach the database by themselves, if at all: it may not have the schema yet.
        Command::Migrate { status: false } => schema::migrate(&database_url).await,
        Command::Migrate { status: true } => schema::status(&database_url).await,
        Command::Demo(args) => demo::run(&database_url, args).await,
        Command::Template(template::TemplateCommand::Preview(args)) => {
            template::preview(&database_url, args).await
        }
        Command::Evidence(command) if command.is_offline() => evidence::run_offline(&command),
        command => run_on_database(&database_url, &secret_keys, command).await,
    }
}

/// Runs a command on the database at `database_url`, which must have the schema this build
/// expects, and writes the command's audit line once it succeeded.
async fn run_on_database(
    database_url: &str,
    keys: &SealingKeys,
    command: Command,
) -> anyhow::Result<()> {
    let pool = outbox_store::connect(database_url, "outboxctl", 4).await?;
    outbox_store::schema::check_current(&pool).await?;
    let audited = audit::line_for(&command);
    let result = dispatch(&pool, keys, command).await;
    let result = match (result, audited) {
        (Ok(()), Some(line)) => audit::record(&pool, line).await,
        (result, _) => result,
    };
    pool.close().await;
    result
}

/// Which module runs each command that works on the database: a table, one arm a command
/// (or a subject's commands, which its module's own table sends on).
async fn dispatch(pool: &PgPool, keys: &SealingKeys, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Migrate { .. } | Command::Demo(_) | Command::Template(_) => {
            unreachable!("`run` runs these without the pool")
        }
        Command::Tenant(command) => tenants::run(pool, command).await,
        Command::Token(command) => tokens::run(pool, command).await,
        Command::Destination(command) => destinations::run(pool, keys, command).await,
        Command::Secrets(credentials::SecretsCommand::Rewrap { batch }) => {
            credentials::rewrap(pool, keys, batch).await
        }
        Command::Alert(inspect::AlertCommand::Show { id, json }) => {
            inspect::show_alert(pool, &id, json).await
        }
        Command::Outbox(inspect::OutboxCommand::List(args)) => {
            inspect::list_outbox(pool, args).await
        }
        Command::Lanes(lanes::LanesCommand::List(args)) => lanes::list(pool, args).await,
        Command::Evidence(command) => evidence::run(pool, command).await,
        Command::Replay(args) => replay::replay(pool, args).await,
        Command::Resolve(args) => resolve::resolve(pool, args).await,
        Command::Revise(args) => revise::revise(pool, args).await,
        Command::Stats { json } => stats::stats(pool, json).await,
        Command::Prune(args) => prune::prune(pool, args).await,
        Command::Contract(sources::ContractCommand::Import {
            file,
            tenant,
            format,
        }) => sources::import_contracts(pool, &file, &tenant, format.as_deref()).await,
        Command::Watchlist(sources::WatchlistCommand::Add(args)) => {
            sources::add_watchlist_entry(pool, args).await
        }
        Command::Article(sources::ArticleCommand::Ingest { file }) => {
            sources::ingest_articles(pool, &file).await
        }
        Command::Operator(command) => accounts::run(pool, command).await,
        Command::Mcp(args) => mcp::serve(pool, args).await,
    }
}

fn parse_secret_keys(spec: &str) -> Result<SealingKeys, String> {
    SealingKeys::parse(spec).map_err(|err| err.to_string())
}
