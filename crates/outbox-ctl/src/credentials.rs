//! Signing secrets and the other secrets destinations hold: reading them from files or
//! standard input, sealing them with `OUTBOX_SECRET_KEYS`, `destination rotate-secret`,
//! `secrets rewrap`.

use anyhow::{bail, Context};
use outbox_core::sealing::{self, SealingKeys};
use outbox_core::{duration, signing};
use outbox_store::destinations::{self, StoredSecrets};
use outbox_store::{tenants, PgPool};
use std::time::Duration;
use uuid::Uuid;

/// `secrets ...`
#[derive(Debug, clap::Subcommand)]
pub enum SecretsCommand {
    /// Encrypt every stored signing secret with the current key of OUTBOX_SECRET_KEYS
    /// (plain-text ones, and those under older keys). Safe to interrupt and run again.
    Rewrap {
        /// Destinations read per query.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(i64).range(1..=10_000))]
        batch: i64,
    },
}

/// Where `destination add` reads signing secrets from, beside `--secret` on the command
/// line (which other users of the machine can see in `ps`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SecretSources {
    /// File with signing secrets, one per line (repeatable).
    #[arg(long = "secret-file", value_name = "PATH")]
    files: Vec<String>,
    /// Read signing secrets from standard input, one per line.
    #[arg(long)]
    secret_stdin: bool,
}

impl SecretSources {
    /// Whether the secrets are to be read from standard input.
    pub(crate) fn reads_stdin(&self) -> bool {
        self.secret_stdin
    }

    /// The secrets of every source, each checked to be a `whsec_` secret. Errors name the
    /// source, never the secret.
    pub(crate) fn read(&self) -> anyhow::Result<Vec<String>> {
        let mut secrets = Vec::new();
        for path in &self.files {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--secret-file `{path}` cannot be read"))?;
            secrets.extend(secret_lines(&text, &format!("--secret-file `{path}`"))?);
        }
        if self.secret_stdin {
            secrets.extend(secret_lines(
                &crate::secret_input::from_stdin("--secret-stdin")?,
                "--secret-stdin",
            )?);
        }
        Ok(secrets)
    }
}

/// Non-empty lines of `text`, each a valid secret.
fn secret_lines(text: &str, source: &str) -> anyhow::Result<Vec<String>> {
    let secrets: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if secrets.is_empty() {
        bail!("{source} holds no signing secret");
    }
    for secret in &secrets {
        signing::decode_secret(secret).with_context(|| source.to_owned())?;
    }
    Ok(secrets)
}

/// Secrets as they are to be stored for destination `id`: sealed with the current key, or
/// as given (with a warning) when no key is configured.
pub(crate) fn stored_form(
    keys: &SealingKeys,
    id: Uuid,
    secrets: &[impl AsRef<str>],
) -> Vec<String> {
    if keys.is_empty() {
        if !secrets.is_empty() {
            eprintln!(
                "warning: OUTBOX_SECRET_KEYS is not set: the signing secret is stored in plain \
                 text (set it and run `outboxctl secrets rewrap` to encrypt)"
            );
        }
        return secrets
            .iter()
            .map(|secret| secret.as_ref().to_owned())
            .collect();
    }
    secrets
        .iter()
        .map(|secret| keys.seal(id, secret.as_ref()).expect("keys are configured"))
        .collect()
}

/// One secret (a new signing secret, an SMTP password, an email API's key) as it is to be
/// stored for destination `id`, as [`stored_form`] stores each.
pub(crate) fn stored_one(keys: &SealingKeys, id: Uuid, secret: &str) -> String {
    // One secret in, one out.
    stored_form(keys, id, &[secret]).remove(0)
}

/// `destination rotate-secret` flags.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["secret_file", "secret_stdin", "generate"])))]
pub struct RotateArgs {
    /// Destination name.
    name: String,
    /// Tenant name or id.
    #[arg(long, env = "OUTBOX_TENANT")]
    tenant: String,
    /// File holding the new signing secret.
    #[arg(long, value_name = "PATH")]
    secret_file: Option<String>,
    /// Read the new signing secret from standard input.
    #[arg(long)]
    secret_stdin: bool,
    /// Generate the new secret and print it (the only time it is shown).
    #[arg(long)]
    generate: bool,
    /// How long the replaced secret keeps signing beside the new one (0s: it stops now).
    #[arg(long, default_value = "24h", value_parser = duration::parse)]
    overlap: Duration,
}

pub(crate) async fn rotate_secret(
    pool: &PgPool,
    keys: &SealingKeys,
    args: RotateArgs,
) -> anyhow::Result<()> {
    let (secret, generated) = if args.generate {
        (signing::generate_secret(), true)
    } else if let Some(path) = &args.secret_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--secret-file `{path}` cannot be read"))?;
        (
            one_secret(&text, &format!("--secret-file `{path}`"))?,
            false,
        )
    } else {
        (
            one_secret(
                &crate::secret_input::from_stdin("--secret-stdin")?,
                "--secret-stdin",
            )?,
            false,
        )
    };
    if args.overlap > Duration::from_secs(90 * 24 * 3600) {
        bail!("--overlap must be at most 90d");
    }
    let tenant = tenants::find(pool, &args.tenant).await?;
    let id = destinations::id_by_name(pool, tenant.id, &args.name).await?;
    let stored = stored_one(keys, id, &secret);
    let rotation = destinations::rotate_secret(pool, id, &stored, args.overlap).await?;
    if generated {
        println!("{secret}");
    }
    match rotation.retiring_until {
        Some(until) => eprintln!(
            "destination `{}` now signs with the new secret; the {} replaced secret(s) also \
             sign until {}",
            args.name,
            rotation.retiring,
            until.format("%Y-%m-%d %H:%M:%S UTC")
        ),
        None => eprintln!(
            "destination `{}` now signs with the new secret only",
            args.name
        ),
    }
    Ok(())
}

fn one_secret(text: &str, source: &str) -> anyhow::Result<String> {
    let mut secrets = secret_lines(text, source)?;
    if secrets.len() != 1 {
        bail!("{source} must hold exactly one signing secret");
    }
    Ok(secrets.remove(0))
}

/// `secrets rewrap`: every stored secret sealed with the current key. Destinations are
/// rewritten one at a time, each only if its secrets did not change meanwhile, so the
/// command can be interrupted and run again; what is already current is left alone.
pub(crate) async fn rewrap(pool: &PgPool, keys: &SealingKeys, batch: i64) -> anyhow::Result<()> {
    let Some(current) = keys.current_id() else {
        bail!("OUTBOX_SECRET_KEYS is not set: there is no key to encrypt with");
    };
    let (mut rewrapped, mut already, mut failed, mut raced) = (0u64, 0u64, 0u64, 0u64);
    let mut after = None;
    loop {
        let page = destinations::stored_secrets_page(pool, after, batch).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        for stored in page {
            let all = stored
                .signing_secrets
                .iter()
                .chain(&stored.retiring_signing_secrets)
                .chain(&stored.smtp_password)
                .chain(&stored.bearer_token);
            if all.clone().all(|s| keys.is_current(s)) {
                already += 1;
                continue;
            }
            let reseal = |values: &[String]| -> Result<Vec<String>, sealing::OpenError> {
                values
                    .iter()
                    .map(|value| {
                        if keys.is_current(value) {
                            return Ok(value.clone());
                        }
                        let plain = keys.open(stored.id, value)?;
                        Ok(keys.seal(stored.id, &plain).expect("keys are configured"))
                    })
                    .collect()
            };
            let resealed = reseal(&stored.signing_secrets).and_then(|current| {
                Ok(StoredSecrets {
                    id: stored.id,
                    signing_secrets: current,
                    retiring_signing_secrets: reseal(&stored.retiring_signing_secrets)?,
                    smtp_password: reseal(stored.smtp_password.as_slice())?.pop(),
                    bearer_token: reseal(stored.bearer_token.as_slice())?.pop(),
                })
            });
            match resealed {
                Err(err) => {
                    failed += 1;
                    eprintln!("destination {}: {err}", stored.id);
                }
                Ok(new) => {
                    if destinations::replace_stored_secrets(pool, &stored, &new).await? {
                        rewrapped += 1;
                    } else {
                        raced += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "secrets of {rewrapped} destination(s) sealed with key `{current}`; {already} already \
         were"
    );
    if failed > 0 {
        bail!("{failed} destination(s) have secrets that cannot be decrypted with the configured keys");
    }
    if raced > 0 {
        bail!("{raced} destination(s) changed while rewrapping; run the command again");
    }
    Ok(())
}

impl RotateArgs {
    /// The tenant and the destination's name, as given, for the audit log.
    pub(crate) fn audited(&self) -> (&str, &str) {
        (&self.tenant, &self.name)
    }
}
