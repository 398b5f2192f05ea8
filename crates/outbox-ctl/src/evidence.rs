//! `evidence verify|export|check|checkpoint|keygen`: the tamper-evident trail for
//! auditors (`outbox-evidence` does the work; this module reads flags and prints).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Subcommand;
use outbox_core::evidence_chain::hex;
use outbox_core::evidence_signing::{CheckpointSigner, PublicKey};
use outbox_evidence::verify::{self, Problem, Trust};
use outbox_evidence::{bundle, checkpoint};
use sqlx::PgPool;
use uuid::Uuid;

/// `evidence ...`
#[derive(Debug, Subcommand)]
pub enum EvidenceCommand {
    /// Recompute evidence chains and check them against the signed checkpoints; exits 0
    /// only when everything matches, and names the first entry that does not.
    Verify(VerifyArgs),
    /// Write one alert's proof bundle (its entries, chain, checkpoint, inclusion proof and
    /// signature) to standard output, for `evidence check` to verify with no database.
    Export {
        /// The alert.
        #[arg(long)]
        alert: Uuid,
    },
    /// Verify a proof bundle offline.
    Check {
        /// The bundle (`evidence export`'s output).
        file: PathBuf,
        /// A public key the checkpoint must be signed with (`ed25519-pub:…`); repeat for
        /// several. Without one, the bundle's own key is used, which proves only that the
        /// bundle is consistent.
        #[arg(long = "public-key", value_name = "KEY")]
        public_keys: Vec<String>,
    },
    /// Make a checkpoint now (deciders and dispatchers make one every
    /// `--checkpoint-interval`), signed with `OUTBOX_EVIDENCE_SIGNING_KEY` when set. While
    /// another process is making one, waits for it (up to a minute), then covers the rest.
    Checkpoint {
        /// Chain the entries of alerts from before the chain existed first (all of them).
        #[arg(long)]
        backfill: bool,
    },
    /// Create a signing key: prints the secret (`ed25519:…`, for
    /// `OUTBOX_EVIDENCE_SIGNING_KEY`) on standard output, and its public key and key id on
    /// standard error.
    Keygen,
}

/// `evidence verify` flags.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["alert", "since", "all"])))]
pub struct VerifyArgs {
    /// One alert.
    #[arg(long)]
    alert: Option<Uuid>,
    /// The checkpoints made in this last while (e.g. 24h), the alerts under them, and
    /// everything after the newest.
    #[arg(long, value_parser = outbox_core::duration::parse_positive)]
    since: Option<Duration>,
    /// Everything.
    #[arg(long)]
    all: bool,
    /// Trust only checkpoints signed by this public key (`ed25519-pub:…`); repeat for
    /// several (rotated keys). Without one, keys are read from the database, which a
    /// database administrator could have replaced.
    #[arg(
        long = "public-key",
        value_name = "KEY",
        env = "OUTBOX_EVIDENCE_PUBLIC_KEYS",
        value_delimiter = ','
    )]
    public_keys: Vec<String>,
    /// A checkpoint's number and hash kept outside the database (`N:HASH`, from the
    /// `evidence checkpoint made` log line or an earlier bundle), which must still be
    /// there unchanged; repeat for several.
    #[arg(long = "checkpoint", value_name = "N:HASH")]
    anchors: Vec<verify::Anchor>,
    /// One JSON object instead of sentences.
    #[arg(long)]
    json: bool,
}

fn parse_keys(texts: &[String]) -> anyhow::Result<Vec<PublicKey>> {
    texts
        .iter()
        .map(|t| PublicKey::from_text(t.trim()).context("--public-key"))
        .collect()
}

impl EvidenceCommand {
    /// Whether the command needs no database (`check`, `keygen`).
    pub fn is_offline(&self) -> bool {
        matches!(
            self,
            EvidenceCommand::Check { .. } | EvidenceCommand::Keygen
        )
    }
}

/// Runs a command that needs no database.
pub fn run_offline(command: &EvidenceCommand) -> anyhow::Result<()> {
    match command {
        EvidenceCommand::Check { file, public_keys } => check(file, public_keys),
        EvidenceCommand::Keygen => keygen(),
        _ => unreachable!("run on the database by `run`"),
    }
}

/// Commands on the database.
pub async fn run(pool: &PgPool, command: EvidenceCommand) -> anyhow::Result<()> {
    match command {
        EvidenceCommand::Verify(args) => verify(pool, args).await,
        EvidenceCommand::Export { alert } => export(pool, alert).await,
        EvidenceCommand::Checkpoint { backfill } => make_checkpoint(pool, backfill).await,
        EvidenceCommand::Check { .. } | EvidenceCommand::Keygen => {
            unreachable!("run offline by `run_offline`")
        }
    }
}

async fn verify(pool: &PgPool, args: VerifyArgs) -> anyhow::Result<()> {
    let trust = Trust::load(pool, parse_keys(&args.public_keys)?).await?;
    let keys_note = if trust.pinned.is_empty() {
        "signatures checked with the keys stored in the database (pin yours with --public-key)"
    } else {
        "signatures checked with the keys given"
    };
    let anchored = verify::check_anchors(pool, &args.anchors).await?;
    let mut problems: Vec<Problem>;
    let mut count: u64;
    if let Some(alert) = args.alert {
        let report = verify::verify_alert(pool, alert, &trust, true).await?;
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            let place = match report.checkpoint {
                Some((seq, at, covered)) => format!(
                    "evidence verified up to checkpoint {seq} at {} ({covered} of {} entries)",
                    at.format("%Y-%m-%d %H:%M:%S UTC"),
                    report.entries
                ),
                None => format!(
                    "{} entries chain correctly; no checkpoint covers them yet",
                    report.entries
                ),
            };
            let pruned = if report.pruned {
                " (pruned: the entries' hashes were kept, their lines were not)"
            } else {
                ""
            };
            if report.problems.is_empty() && anchored.is_empty() {
                println!("alert {alert}: {place}{pruned}; {keys_note}");
            }
        }
        count = report.problems.len() as u64;
        problems = report.problems;
    } else {
        let since = args
            .since
            .map(|d| chrono::Duration::from_std(d).map(|d| chrono::Utc::now() - d))
            .transpose()
            .context("--since is too long")?;
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("verifying {bar:30} {pos}/{len} alerts")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let summary = verify::verify_walk(pool, since, &trust, |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })
        .await?;
        bar.finish_and_clear();
        if args.json {
            println!("{}", serde_json::to_string(&summary)?);
        } else {
            let newest = match summary.newest_checkpoint {
                Some((seq, at, _)) => format!(
                    "newest checkpoint {seq} at {}",
                    at.format("%Y-%m-%d %H:%M:%S UTC")
                ),
                None => "no checkpoint yet".to_owned(),
            };
            println!(
                "verified {} alerts, {} entries and {} checkpoints; {newest}; {} entries not \
                 under a checkpoint yet; {keys_note}",
                summary.alerts,
                summary.entries,
                summary.checkpoints,
                summary.entries_not_checkpointed
            );
        }
        count = summary.problem_count;
        problems = summary.problems;
    }
    count += anchored.len() as u64;
    problems.splice(0..0, anchored);
    if count == 0 {
        return Ok(());
    }
    if !args.json {
        for p in &problems {
            println!(
                "mismatch: {}",
                outbox_core::untrusted::visible(&p.to_string())
            );
        }
        if count > problems.len() as u64 {
            println!("... and {} more", count - problems.len() as u64);
        }
    }
    bail!(
        "the evidence does not verify: {count} problem(s), the first: {}",
        problems[0]
    )
}

async fn export(pool: &PgPool, alert: Uuid) -> anyhow::Result<()> {
    let bundle = bundle::export(pool, alert).await?;
    use std::io::Write;
    std::io::stdout().write_all(&bundle::to_canonical(&bundle))?;
    Ok(())
}

fn check(file: &PathBuf, public_keys: &[String]) -> anyhow::Result<()> {
    let pinned = parse_keys(public_keys)?;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    match bundle::check(&bytes, &pinned) {
        Ok(proven) => {
            let under = match &proven.checkpoint {
                Some((seq, at, covered, key)) => format!(
                    "its first {covered} are under checkpoint {seq} made at {}, {}",
                    chrono::DateTime::from_timestamp_micros(*at)
                        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                        .unwrap_or_default(),
                    match (key, pinned.is_empty()) {
                        (Some(key), false) => format!("signed by key {key} (one of those given)"),
                        (Some(key), true) => format!(
                            "signed by key {key} (the bundle's own key: give --public-key to \
                             check it is yours)"
                        ),
                        (None, _) => "unsigned".to_owned(),
                    }
                ),
                None => "no checkpoint covers them yet".to_owned(),
            };
            println!(
                "alert {}: {} entries chain correctly; {under}",
                proven.alert_id, proven.entries
            );
            Ok(())
        }
        Err(reason) => bail!("the bundle does not verify: {reason}"),
    }
}

/// How long `evidence checkpoint` waits for another process's checkpoint to finish.
const BUSY_WAIT: Duration = Duration::from_secs(60);

async fn make_checkpoint(pool: &PgPool, backfill: bool) -> anyhow::Result<()> {
    let settings = checkpoint::CheckpointInterval(Some(checkpoint::DEFAULT_INTERVAL))
        .settings(None)?
        .expect("an interval gives settings");
    checkpoint::register(pool, &settings).await?;
    if backfill {
        checkpoint::backfill_all(pool).await?;
    }
    let mut made_any = false;
    let mut busy_deadline = None;
    loop {
        match checkpoint::make_checkpoint(pool, settings.signer.as_deref()).await? {
            Ok(made) => {
                made_any = true;
                let signed = if made.signed { "signed" } else { "unsigned" };
                println!(
                    "checkpoint {} over {} chain heads, hash {}, {signed}",
                    made.seq,
                    made.size,
                    hex(&made.hash)
                );
                if !made.more {
                    return Ok(());
                }
            }
            Err(checkpoint::Skipped::NothingNew) if made_any => return Ok(()),
            Err(checkpoint::Skipped::NothingNew) => {
                println!("nothing new since the last checkpoint");
                return Ok(());
            }
            // A decider or dispatcher is making the periodic one: wait for it, then cover
            // what it left, so the operator's command ends with everything checkpointed.
            Err(checkpoint::Skipped::Busy) => {
                let now = tokio::time::Instant::now();
                let deadline = *busy_deadline.get_or_insert_with(|| {
                    eprintln!("another process is making a checkpoint; waiting for it");
                    now + BUSY_WAIT
                });
                if now >= deadline {
                    bail!(
                        "another process has been making checkpoints for {}s; try again later",
                        BUSY_WAIT.as_secs()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(checkpoint::Skipped::WritersStillOpen(open)) => bail!(
                "transactions open for longer than {}s may still write evidence ({}); try again",
                checkpoint::WRITERS_WAIT.as_secs(),
                open.join(", ")
            ),
        }
    }
}

fn keygen() -> anyhow::Result<()> {
    let (signer, secret) = CheckpointSigner::generate();
    println!("{secret}");
    eprintln!(
        "public key {} (key id {}): give it to auditors for `evidence verify --public-key`",
        signer.public_key().to_text(),
        signer.key_id()
    );
    Ok(())
}
