//! `evidence verify|export|check|checkpoint|keygen`: the tamper-evident trail for
//! auditors (`outbox-evidence` does the work; this module reads flags and prints).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::Subcommand;
use outbox_core::evidence::chain::hex;
use outbox_core::evidence::signing::{CheckpointSigner, PublicKey};
use outbox_evidence::verify::{self, Problem, Trust};
use outbox_evidence::{bundle, checkpoint, earlier, published, trusted_keys};
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
    /// Verify a proof bundle offline. Exits 0 only when the bundle holds together and a
    /// checkpoint signed by a key you trust covers it (or when a flag below accepts less,
    /// and the output says so).
    Check(CheckArgs),
    /// Make a checkpoint now (deciders and dispatchers make one every
    /// `--checkpoint-interval`), signed with `OUTBOX_EVIDENCE_SIGNING_KEY` when set. While
    /// another process is making one, waits for it (up to a minute), then covers the rest.
    /// Refuses (exit 1) when the newest checkpoint was deleted or changed.
    Checkpoint {
        /// Chain the entries of alerts from before the chain existed first (all of them).
        #[arg(long)]
        backfill: bool,
        /// After a refusal: go on after this checkpoint (`N:HASH`, the newest one made, as
        /// your `evidence checkpoint made` log lines record it; not the database's word).
        /// The next checkpoint is numbered N+1 and chains from HASH; `verify` goes on
        /// naming the lost ones.
        #[arg(long, value_name = "N:HASH")]
        continue_after: Option<verify::Anchor>,
    },
    /// Create a signing key: its secret (`ed25519:…`, for `OUTBOX_EVIDENCE_SIGNING_KEY`)
    /// goes to a new file only you can read (`--out`), or to standard output when that is a
    /// terminal or `--stdout` says so; its public key and key id go to standard error.
    Keygen(KeygenArgs),
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
    /// several (rotated keys). Without one, the keys in OUTBOX_EVIDENCE_PUBLIC_KEYS
    /// (comma-separated); without those, keys are read from the database, which a
    /// database administrator could have replaced.
    #[arg(long = "public-key", value_name = "KEY")]
    public_keys: Vec<String>,
    /// A checkpoint's number and hash kept outside the database (`N:HASH`, from the
    /// `evidence checkpoint made` log line or an earlier bundle), which must still be
    /// there unchanged; repeat for several.
    #[arg(long = "checkpoint", value_name = "N:HASH")]
    anchors: Vec<verify::Anchor>,
    /// A checkpoint log (what `--checkpoint-log` of deciders and dispatchers writes, kept
    /// outside the database): every checkpoint in it must still be stored, unchanged;
    /// repeat for several. With keys given, each of its notes must
    /// be signed by one of them.
    #[arg(long = "checkpoints", value_name = "FILE")]
    checkpoint_logs: Vec<PathBuf>,
    /// An earlier bundle of an alert (`evidence export`'s output, kept by the auditor):
    /// the alert's chain in the database must extend it, the same heads for the entries it held and the same
    /// checkpoint under each number it named; repeat for several.
    #[arg(long = "earlier", value_name = "BUNDLE")]
    earlier: Vec<PathBuf>,
    /// One JSON object instead of sentences.
    #[arg(long)]
    json: bool,
}

/// `evidence check` flags.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The bundle (`evidence export`'s output), at most 64 MiB.
    file: PathBuf,
    /// A public key the checkpoint must be signed with (`ed25519-pub:…`); repeat for
    /// several. Without one, the keys in OUTBOX_EVIDENCE_PUBLIC_KEYS (comma-separated).
    #[arg(long = "public-key", value_name = "KEY")]
    public_keys: Vec<String>,
    /// Accept a bundle that no signed checkpoint covers (none yet, or an unsigned one):
    /// says what its chain shows and that nothing anchors it, and exits 0.
    #[arg(long)]
    allow_unanchored: bool,
    /// With no key given, check the signature with the public key inside the bundle:
    /// says that this key is not one you trust, and exits 0.
    #[arg(long)]
    trust_embedded_key: bool,
    /// A checkpoint log (what `--checkpoint-log` of deciders and dispatchers writes, kept
    /// outside the database): the bundle's checkpoint must be the one it holds under that
    /// number; repeat for several. With keys given, each of its notes must
    /// be signed by one of them.
    #[arg(long = "checkpoints", value_name = "FILE")]
    checkpoint_logs: Vec<PathBuf>,
    /// An earlier bundle of an alert (`evidence export`'s output, kept by the auditor):
    /// the bundle checked (of the same alert) must extend it, the same heads for the entries it held and the same
    /// checkpoint under each number it named; repeat for several.
    #[arg(long = "earlier", value_name = "BUNDLE")]
    earlier: Vec<PathBuf>,
}

/// `evidence keygen` flags.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Write the secret to this file, created readable and writable by you alone (0600);
    /// an existing file is never overwritten.
    #[arg(long, value_name = "FILE", conflicts_with = "stdout")]
    out: Option<PathBuf>,
    /// Print the secret on standard output even when that is a pipe or a file (a file the
    /// shell creates for `>` is readable by others under the usual umask).
    #[arg(long)]
    stdout: bool,
}

/// The keys the auditor trusts, from the flags or the environment, read alike by
/// `verify` and `check`.
fn auditor_keys(given: &[String]) -> anyhow::Result<Vec<PublicKey>> {
    trusted_keys::auditor_keys(given).map_err(anyhow::Error::msg)
}

impl EvidenceCommand {
    /// Whether the command needs no database (`check`, `keygen`).
    pub fn is_offline(&self) -> bool {
        matches!(self, EvidenceCommand::Check(_) | EvidenceCommand::Keygen(_))
    }
}

/// Runs a command that needs no database.
pub fn run_offline(command: &EvidenceCommand) -> anyhow::Result<()> {
    match command {
        EvidenceCommand::Check(args) => check(args),
        EvidenceCommand::Keygen(args) => keygen(args),
        _ => unreachable!("run on the database by `run`"),
    }
}

/// Commands on the database.
pub async fn run(pool: &PgPool, command: EvidenceCommand) -> anyhow::Result<()> {
    match command {
        EvidenceCommand::Verify(args) => verify(pool, args).await,
        EvidenceCommand::Export { alert } => export(pool, alert).await,
        EvidenceCommand::Checkpoint {
            backfill,
            continue_after,
        } => make_checkpoint(pool, backfill, continue_after).await,
        EvidenceCommand::Check(_) | EvidenceCommand::Keygen(_) => {
            unreachable!("run offline by `run_offline`")
        }
    }
}

async fn verify(pool: &PgPool, args: VerifyArgs) -> anyhow::Result<()> {
    let trust = Trust::load(pool, auditor_keys(&args.public_keys)?).await?;
    let keys_note = if trust.pinned.is_empty() {
        "signatures checked with the keys stored in the database (pin yours with --public-key)"
    } else {
        "signatures checked with the keys given"
    };
    let mut anchored = verify::check_anchors(pool, &args.anchors).await?;
    for path in &args.checkpoint_logs {
        let (anchors, in_log) = log_anchors(path, &trust.pinned)?;
        anchored.extend(in_log);
        anchored.extend(published::hold_database_to(pool, &anchors).await?);
    }
    for path in &args.earlier {
        anchored.extend(held_to_earlier(pool, path, &trust.pinned).await?);
    }
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
    let bundle = bundle::to_canonical(&bundle::export(pool, alert).await?);
    if bundle.len() as u64 > bundle::MAX_BUNDLE_BYTES {
        bail!(
            "alert {alert}'s bundle would be {} MiB, more than `evidence check` reads ({} MiB)",
            bundle.len() / (1024 * 1024),
            bundle::MAX_BUNDLE_BYTES / (1024 * 1024)
        );
    }
    use std::io::Write;
    std::io::stdout().write_all(&bundle)?;
    Ok(())
}

fn check(args: &CheckArgs) -> anyhow::Result<()> {
    let keys = auditor_keys(&args.public_keys)?;
    if args.trust_embedded_key && !keys.is_empty() {
        bail!(
            "--trust-embedded-key: keys to trust were given (--public-key or {}), and the \
             bundle is checked against those",
            trusted_keys::PUBLIC_KEYS_VARIABLE
        );
    }
    let file = &args.file;
    let bytes = std::fs::File::open(file)
        .and_then(bundle::read)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let trusting = bundle::Trusting {
        keys,
        allow_unanchored: args.allow_unanchored,
        trust_embedded_key: args.trust_embedded_key,
    };
    let proven = bundle::check(&bytes, &trusting)
        .map_err(|reason| anyhow!("the bundle does not verify: {reason}"))?;
    let mut logged = Vec::new();
    if !args.checkpoint_logs.is_empty() {
        let checked: bundle::Bundle = serde_json::from_slice(&bytes)?;
        for path in &args.checkpoint_logs {
            let (anchors, in_log) = log_anchors(path, &trusting.keys)?;
            if let Some(problem) = in_log.first() {
                bail!("the bundle does not verify: {problem}");
            }
            if let Some((seq, hash)) = earlier::checkpoint_of_bundle(&checked) {
                logged.push(
                    published::log_says(&anchors, seq, &hash)
                        .map_err(|why| anyhow!("the bundle does not verify: {why}"))?,
                );
            }
        }
    }
    if !args.earlier.is_empty() {
        let checked: bundle::Bundle = serde_json::from_slice(&bytes)?;
        let heads: Vec<_> = checked.entries.iter().map(|e| e.head).collect();
        let now = earlier::checkpoint_of_bundle(&checked);
        for path in &args.earlier {
            let before = read_earlier(path, &trusting.keys)?;
            logged.push(
                earlier::extends(&before, checked.alert.id, &heads, now)
                    .map_err(|why| anyhow!("the bundle does not verify: {why}"))?,
            );
        }
    }
    println!("{}", what_a_bundle_shows(&proven));
    for note in &proven.notes {
        println!("note: {note}");
    }
    for line in logged {
        println!("{line}");
    }
    Ok(())
}

/// An earlier bundle kept by the auditor, checked as any bundle is (it may predate the
/// checkpoint that now covers its entries, so it need not be anchored itself).
fn read_earlier(path: &std::path::Path, keys: &[PublicKey]) -> anyhow::Result<bundle::Bundle> {
    let bytes = std::fs::File::open(path)
        .and_then(bundle::read)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let trusting = bundle::Trusting {
        keys: keys.to_vec(),
        allow_unanchored: true,
        trust_embedded_key: false,
    };
    bundle::check(&bytes, &trusting).map_err(|why| {
        anyhow!(
            "the earlier bundle {} does not verify: {why}",
            path.display()
        )
    })?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// What the database's chain of an earlier bundle's alert says against that bundle: a
/// problem when it does not extend it.
async fn held_to_earlier(
    pool: &PgPool,
    path: &std::path::Path,
    keys: &[PublicKey],
) -> anyhow::Result<Vec<verify::Problem>> {
    let before = read_earlier(path, keys)?;
    let alert = before.alert.id;
    let chain = outbox_store::evidence_chain::chain(pool, alert).await?;
    let heads: Vec<_> = chain.entries.iter().filter_map(|e| e.hash).collect();
    // The earlier bundle's checkpoint must still be stored, unchanged (whatever covers the
    // chain's newest entries now); the chain must extend the entries it held.
    let then = earlier::checkpoint_of_bundle(&before);
    let mut problems = match then {
        Some((seq, hash)) => {
            verify::check_anchors(
                pool,
                &[verify::Anchor {
                    seq: i64::try_from(seq).unwrap_or(i64::MAX),
                    hash,
                }],
            )
            .await?
        }
        None => Vec::new(),
    };
    if let Err(why) = earlier::extends(&before, alert, &heads, then) {
        problems.push(verify::Problem {
            place: format!("alert {alert} (earlier bundle {})", path.display()),
            what: why,
        });
    }
    Ok(problems)
}

/// The checkpoints the log at `path` holds, as anchors, and what is wrong in the log
/// itself (notes no key of `keys` signed, when keys are given; numbers out of order).
fn log_anchors(
    path: &std::path::Path,
    keys: &[PublicKey],
) -> anyhow::Result<(Vec<verify::Anchor>, Vec<verify::Problem>)> {
    let parsed = published::read_log(path)?;
    if let Some(at) = parsed.torn_tail {
        eprintln!(
            "{}: the last note, from byte {at}, was cut short and is left out",
            path.display()
        );
    }
    Ok(published::anchors_of(&parsed, keys))
}

/// `check`'s line: what the bundle shows, and in capitals what it does not when it is not
/// anchored under a key the auditor trusts.
fn what_a_bundle_shows(proven: &bundle::Proven) -> String {
    let chained = format!(
        "alert {}: {} entries chain correctly",
        proven.alert_id, proven.entries
    );
    let under = |c: &bundle::UnderCheckpoint| {
        format!(
            "its first {} are under checkpoint {} made at {}",
            c.entries,
            c.seq,
            chrono::DateTime::from_timestamp_micros(c.made_at_micros)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                .unwrap_or_default()
        )
    };
    let key = |c: &bundle::UnderCheckpoint| c.key_id.clone().unwrap_or_default();
    match &proven.standing {
        bundle::Standing::Trusted(c) => format!(
            "{chained}; {}, signed by key {} (one you trust)",
            under(c),
            key(c)
        ),
        bundle::Standing::EmbeddedKey(c) => format!(
            "{chained}; {}, signed by key {}, the bundle's own key: NOT TRUSTED. This shows \
             only that whoever holds that key signed it, which may be whoever wrote the \
             bundle; check it again with --public-key and the key you hold",
            under(c),
            key(c)
        ),
        bundle::Standing::Unsigned(c) => format!(
            "{chained}; {}, which is unsigned: NOT ANCHORED. Anyone can make an unsigned \
             checkpoint, so this shows only that the bundle holds together",
            under(c)
        ),
        bundle::Standing::NotCovered => format!(
            "{chained}; no checkpoint covers them: NOT ANCHORED. This shows only that the \
             bundle holds together, which whoever wrote it could have made so"
        ),
    }
}

/// How long `evidence checkpoint` waits for another process's checkpoint to finish.
const BUSY_WAIT: Duration = Duration::from_secs(60);

async fn make_checkpoint(
    pool: &PgPool,
    backfill: bool,
    continue_after: Option<verify::Anchor>,
) -> anyhow::Result<()> {
    let settings = checkpoint::CheckpointInterval(Some(checkpoint::DEFAULT_INTERVAL))
        .settings(None)?
        .expect("an interval gives settings");
    checkpoint::register(pool, &settings).await?;
    if backfill {
        checkpoint::backfill_all(pool).await?;
    }
    let mut memory = continue_after.map_or_else(
        checkpoint::Memory::default,
        checkpoint::Memory::continuing_after,
    );
    let mut made_any = false;
    let mut busy_deadline = None;
    loop {
        match checkpoint::make_checkpoint(pool, settings.signer.as_deref(), &mut memory).await? {
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
            Err(checkpoint::Skipped::Refused(refused)) => bail!("no checkpoint made: {refused}"),
            Err(checkpoint::Skipped::WritersStillOpen(open)) => bail!(
                "transactions open for longer than {}s may still write evidence ({}); try again",
                checkpoint::WRITERS_WAIT.as_secs(),
                open.join(", ")
            ),
        }
    }
}

fn keygen(args: &KeygenArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    // Refused before a key is made: `keygen > file` would leave the secret in a file the
    // shell created readable by others.
    if args.out.is_none() && !args.stdout && !std::io::stdout().is_terminal() {
        bail!(
            "standard output is not a terminal: the secret would go to a pipe or to a file \
             others may read; write it with --out FILE (created 0600), or pass --stdout to \
             send it there on purpose"
        );
    }
    let (signer, secret) = CheckpointSigner::generate();
    match &args.out {
        Some(path) => write_secret_file(path, &secret)?,
        None => println!("{secret}"),
    }
    eprintln!(
        "public key {} (key id {}): give it to auditors for `evidence verify --public-key`",
        signer.public_key().to_text(),
        signer.key_id()
    );
    eprintln!(
        "signed-note verifier key {}: for tools that read the checkpoint log's notes",
        outbox_core::evidence::note::note_verifier_key(&signer.public_key())
    );
    Ok(())
}

/// Writes `secret` (and a newline) to a new file at `path` that only its owner can read
/// and write; refuses a path that exists (a file, or a link to one).
fn write_secret_file(path: &std::path::Path, secret: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| {
            format!(
                "cannot create {} (an existing file is never overwritten)",
                path.display()
            )
        })?;
    let written = file
        .write_all(format!("{secret}\n").as_bytes())
        .and_then(|()| file.sync_all());
    if let Err(err) = written {
        // A partial key is no key: nothing is left behind.
        let _ = std::fs::remove_file(path);
        return Err(err).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}
