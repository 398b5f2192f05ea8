//! `outboxctl`, the operator's tool.
//!
//! Layout:
//! - [`Cli`]: the command line (clap); every flag also reads an environment variable.
//! - [`run`]: dispatches a parsed command.
//! - `setup`: `migrate`, `tenant create`, `destination add|list`.
//! - `schema`: `migrate --status`, the migrations a database has applied and those pending.
//! - `credentials`: signing secrets from files or standard input, sealed with
//!   `OUTBOX_SECRET_KEYS`; `destination rotate-secret`, `secrets rewrap`,
//!   `token create|list|revoke`.
//! - `secret_input`: a secret given in a file or on standard input (signing secrets, an
//!   email API's key, an SMTP password), never as an argument.
//! - `demo`: the whole system on the sample data, in a database of its own;
//!   `demo_server`: which server it runs on (a private one when none answers).
//! - `inspect`: `alert show`, `outbox list`.
//! - `mail_view`: a stored email read back for people (headers that matter, text part),
//!   for the demo's printout.
//! - `operate`: `replay`, `resolve`, `revise`, `stats`, `prune`, `destination enable|disable`.
//! - `sources`: what the monitors read: `contract import`, `watchlist add`,
//!   `article ingest`, `tenant configure`.
//! - `accounts`: `operator add|list|remove`, the console's operator accounts (a new
//!   account's password is printed once; `outbox_core::password` makes and hashes it).
//! - `template`: `template preview`, an alert rendered as email (`outbox-render`) and
//!   printed instead of sent.
//! - `audit`: the audit log's line for each command that changes accounts, tokens,
//!   destinations or secrets, written once the command succeeded (`cli:NAME`).
//! - `table`: plain-text tables for people (`--json` gives one JSON object per line).
//!   Text others wrote (subjects, a destination's answer, evidence) is shown through
//!   `outbox_core::untrusted::visible` in every view, and `error:` lines too.
//!
//! Output contract: a command that creates something prints only its id (or token) on
//! stdout, and guidance on stderr, so scripts can capture it. Bad input exits non-zero with
//! a one-line reason and writes nothing.

mod accounts;
mod audit;
mod credentials;
mod demo;
mod demo_server;
mod inspect;
mod mail_view;
mod operate;
mod schema;
mod secret_input;
mod setup;
mod sources;
mod table;
mod template;

use clap::{Parser, Subcommand};
use outbox_core::sealing::SealingKeys;
use outbox_core::AlertState;

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
    Tenant(TenantCommand),
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Manage destinations.
    #[command(subcommand)]
    Destination(DestinationCommand),
    /// Signing secrets at rest.
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Inspect alerts.
    #[command(subcommand)]
    Alert(AlertCommand),
    /// Inspect the outbox.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Put held or failed alerts back in the queue (same id, key and payload).
    Replay(operate::ReplayArgs),
    /// Settle an uncertain or held alert by what you established at the destination.
    Resolve(operate::ResolveArgs),
    /// Correct an alert's payload: a new revision, as through the API.
    Revise {
        /// The alert (its latest revision).
        id: String,
        /// File with the corrected payload (a JSON object).
        #[arg(long)]
        payload: String,
        /// Why: kept with the revision.
        #[arg(long)]
        reason: String,
        /// Who: the operator's name in the evidence.
        #[arg(long, env = "USER", default_value = "operator")]
        actor: String,
    },
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
    Prune {
        /// Prune alerts settled longer ago than this, e.g. 30d.
        #[arg(long, value_parser = outbox_core::duration::parse_positive)]
        older_than: std::time::Duration,
        /// Prune failed alerts too (they can no longer be replayed with their payload).
        #[arg(long)]
        include_failed: bool,
        /// Count what would be pruned; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Alerts per transaction.
        #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
        batch: i64,
        /// One JSON object instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Contracts for the renewal monitor.
    #[command(subcommand)]
    Contract(ContractCommand),
    /// Watchlist entries for the news monitor.
    #[command(subcommand)]
    Watchlist(WatchlistCommand),
    /// News articles for the watchlists.
    #[command(subcommand)]
    Article(ArticleCommand),
    /// Email templates.
    #[command(subcommand)]
    Template(TemplateCommand),
    /// Operator accounts of the console (`decider serve --console-listen`).
    #[command(subcommand)]
    Operator(OperatorCommand),
}

/// `operator ...`
#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Create an account; prints its password, which is shown only this once.
    Add {
        /// Its name; the evidence of its actions names it `console:NAME`.
        name: String,
        /// viewer (reads) or operator (reads and acts).
        #[arg(long, value_enum)]
        role: accounts::Role,
        /// Limit it to these tenants (names or ids; repeat or separate with commas).
        /// Default: every tenant.
        #[arg(long = "tenant", alias = "tenants", value_delimiter = ',')]
        tenants: Vec<String>,
    },
    /// List accounts (never passwords).
    List {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove an account; its sessions end at once.
    Remove {
        /// Its name.
        name: String,
    },
}

/// `template ...`
#[derive(Debug, Subcommand)]
pub enum TemplateCommand {
    /// Print an alert rendered as email (subject, plain text, HTML) without sending it.
    Preview(template::PreviewArgs),
}

/// `contract ...`
#[derive(Debug, Subcommand)]
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
#[derive(Debug, Subcommand)]
pub enum WatchlistCommand {
    /// Add a watchlist entry; prints its id.
    Add(sources::WatchlistArgs),
}

/// `article ...`
#[derive(Debug, Subcommand)]
pub enum ArticleCommand {
    /// Ingest a Webz.io News API page (`{"posts": [...]}`); prints how many were new.
    Ingest {
        /// The file (`-` for standard input).
        #[arg(default_value = "-")]
        file: String,
    },
}

/// `tenant ...`
#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant; prints its id.
    Create {
        /// Unique name.
        name: String,
        /// IANA time zone in which renewal days are counted.
        #[arg(long, default_value = "UTC")]
        time_zone: String,
        /// Renewal tiers in days before the action date.
        #[arg(long)]
        tiers: Option<String>,
    },
    /// Change a tenant's time zone, renewal tiers or email language.
    Configure {
        /// Tenant name or id.
        name: String,
        /// IANA time zone.
        #[arg(long)]
        time_zone: Option<String>,
        /// Renewal tiers, e.g. 90,30,7.
        #[arg(long)]
        tiers: Option<String>,
        /// Language of email to destinations without one of their own: en or es.
        #[arg(long)]
        locale: Option<outbox_render::Locale>,
    },
}

/// `token ...`
#[derive(Debug, Subcommand)]
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

/// `secrets ...`
#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Encrypt every stored signing secret with the current key of OUTBOX_SECRET_KEYS
    /// (plain-text ones, and those under older keys). Safe to interrupt and run again.
    Rewrap {
        /// Destinations read per query.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(i64).range(1..=10_000))]
        batch: i64,
    },
}

/// `destination ...`
#[derive(Debug, Subcommand)]
pub enum DestinationCommand {
    /// Add a webhook or email destination; prints its id.
    Add(setup::DestinationArgs),
    /// Replace a destination's signing secret; the old one keeps signing beside the new
    /// one for --overlap, then stops.
    RotateSecret(credentials::RotateArgs),
    /// Change a destination's settings.
    Update(setup::UpdateArgs),
    /// Stop delivering to a destination; its alerts wait, pending.
    Disable {
        /// Destination name.
        name: String,
        /// Tenant name or id.
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: String,
        /// Who: recorded as the reason.
        #[arg(long, env = "USER", default_value = "operator")]
        actor: String,
    },
    /// Deliver to a destination again.
    Enable {
        /// Destination name.
        name: String,
        /// Tenant name or id.
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: String,
        /// Who.
        #[arg(long, env = "USER", default_value = "operator")]
        actor: String,
    },
    /// Show one destination: its settings, and what its in-flight bound means.
    Show {
        /// Destination name.
        name: String,
        /// Tenant name or id.
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: String,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// List destinations.
    List {
        /// Only this tenant's (name or id).
        #[arg(long, env = "OUTBOX_TENANT")]
        tenant: Option<String>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `alert ...`
#[derive(Debug, Subcommand)]
pub enum AlertCommand {
    /// Show an alert: identity, state, revisions, attempts and evidence trail.
    Show {
        /// The alert's id.
        id: String,
        /// The whole record as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `outbox ...`
#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// List alerts, oldest first: the live queue by default, or those in one state.
    List {
        /// pending, sending, uncertain, held, failed, accepted or superseded.
        #[arg(long)]
        status: Option<AlertState>,
        /// Only this tenant's (name).
        #[arg(long)]
        tenant: Option<String>,
        /// Only this destination's (name).
        #[arg(long)]
        destination: Option<String>,
        /// Only alerts approved within this long (e.g. 2h).
        #[arg(long, value_parser = outbox_core::duration::parse_positive)]
        since: Option<std::time::Duration>,
        /// At most this many rows.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=100_000))]
        limit: i64,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Runs one command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Migrate { status: false } => return setup::migrate(&cli.database_url).await,
        Command::Migrate { status: true } => return schema::status(&cli.database_url).await,
        Command::Demo(args) => {
            let server = demo_server::choose(&cli.database_url)?;
            let passed = demo::run(&server.url, args, server.private.is_some()).await;
            drop(server);
            return if passed? {
                Ok(())
            } else {
                Err(anyhow::anyhow!("the demo's invariants did not hold"))
            };
        }
        Command::Template(TemplateCommand::Preview(args)) => {
            return template::preview(&cli.database_url, args).await;
        }
        _ => {}
    }
    let pool = outbox_store::connect(&cli.database_url, "outboxctl", 4).await?;
    outbox_store::schema::check_current(&pool).await?;
    let audited = audit::line_for(&cli.command);
    let result = match cli.command {
        Command::Migrate { .. } | Command::Demo(_) | Command::Template(_) => {
            unreachable!("handled above")
        }
        Command::Tenant(TenantCommand::Create {
            name,
            time_zone,
            tiers,
        }) => setup::create_tenant(&pool, &name, &time_zone, tiers.as_deref()).await,
        Command::Tenant(TenantCommand::Configure {
            name,
            time_zone,
            tiers,
            locale,
        }) => {
            sources::configure_tenant(&pool, &name, time_zone.as_deref(), tiers.as_deref(), locale)
                .await
        }
        Command::Contract(ContractCommand::Import {
            file,
            tenant,
            format,
        }) => sources::import_contracts(&pool, &file, &tenant, format.as_deref()).await,
        Command::Watchlist(WatchlistCommand::Add(args)) => {
            sources::add_watchlist_entry(&pool, args).await
        }
        Command::Article(ArticleCommand::Ingest { file }) => {
            sources::ingest_articles(&pool, &file).await
        }
        Command::Token(TokenCommand::Create {
            tenant,
            label,
            expires_in,
        }) => credentials::create_token(&pool, &tenant, label.as_deref(), expires_in).await,
        Command::Token(TokenCommand::List { tenant, json }) => {
            credentials::list_tokens(&pool, tenant.as_deref(), json).await
        }
        Command::Token(TokenCommand::Revoke { id }) => credentials::revoke_token(&pool, &id).await,
        Command::Destination(DestinationCommand::Add(args)) => {
            setup::add_destination(&pool, &cli.secret_keys, args).await
        }
        Command::Destination(DestinationCommand::Show { name, tenant, json }) => {
            setup::show_destination(&pool, &tenant, &name, json).await
        }
        Command::Destination(DestinationCommand::Update(args)) => {
            setup::update_destination(&pool, args).await
        }
        Command::Destination(DestinationCommand::RotateSecret(args)) => {
            credentials::rotate_secret(&pool, &cli.secret_keys, args).await
        }
        Command::Secrets(SecretsCommand::Rewrap { batch }) => {
            credentials::rewrap(&pool, &cli.secret_keys, batch).await
        }
        Command::Destination(DestinationCommand::List { tenant, json }) => {
            setup::list_destinations(&pool, tenant.as_deref(), json).await
        }
        Command::Alert(AlertCommand::Show { id, json }) => {
            inspect::show_alert(&pool, &id, json).await
        }
        Command::Outbox(OutboxCommand::List {
            status,
            tenant,
            destination,
            since,
            limit,
            json,
        }) => {
            let filter = outbox_store::outbox::Filter {
                state: status,
                tenant,
                destination,
                since,
                limit,
            };
            inspect::list_outbox(&pool, &filter, json).await
        }
        Command::Replay(args) => operate::replay(&pool, args).await,
        Command::Resolve(args) => operate::resolve(&pool, args).await,
        Command::Revise {
            id,
            payload,
            reason,
            actor,
        } => operate::revise(&pool, &id, &payload, &reason, &actor).await,
        Command::Stats { json } => operate::stats(&pool, json).await,
        Command::Prune {
            older_than,
            include_failed,
            dry_run,
            batch,
            json,
        } => operate::prune(&pool, older_than, include_failed, dry_run, batch, json).await,
        Command::Destination(DestinationCommand::Disable {
            name,
            tenant,
            actor,
        }) => operate::set_destination(&pool, &name, &tenant, false, &actor).await,
        Command::Destination(DestinationCommand::Enable {
            name,
            tenant,
            actor,
        }) => operate::set_destination(&pool, &name, &tenant, true, &actor).await,
        Command::Operator(OperatorCommand::Add {
            name,
            role,
            tenants,
        }) => accounts::add(&pool, &name, role, &tenants).await,
        Command::Operator(OperatorCommand::List { json }) => accounts::list(&pool, json).await,
        Command::Operator(OperatorCommand::Remove { name }) => accounts::remove(&pool, &name).await,
    };
    let result = match (result, audited) {
        (Ok(()), Some(line)) => audit::record(&pool, line).await,
        (result, _) => result,
    };
    pool.close().await;
    result
}

fn parse_secret_keys(spec: &str) -> Result<SealingKeys, String> {
    SealingKeys::parse(spec).map_err(|err| err.to_string())
}
