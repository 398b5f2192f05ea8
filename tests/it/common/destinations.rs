//! Destinations as the tests add them: straight through the store ([`add_destination`]),
//! or as `outboxctl destination add` ([`DestinationAdd`], which starts from the kind of
//! destination of tenant `acme`, a webhook or an email relay, and takes the flags a test
//! adds).

use super::add_tenant;
use super::cli::{outboxctl, CliRun};
use super::procs::{Sink, TEST_ALLOW_PRIVATE};
use outbox_testkit::TestDb;
use std::time::Duration;

/// The command line of one `outboxctl destination add` for tenant `acme`.
#[derive(Clone)]
pub struct DestinationAdd {
    args: Vec<String>,
}

impl DestinationAdd {
    /// `destination add --tenant acme --name NAME`, with no kind or address yet.
    pub fn named(name: &str) -> Self {
        DestinationAdd { args: Vec::new() }.args(&[
            "destination",
            "add",
            "--tenant",
            "acme",
            "--name",
            name,
        ])
    }

    /// A webhook destination posting to `url`.
    pub fn webhook(name: &str, url: &str) -> Self {
        Self::named(name).args(&["--url", url])
    }

    /// An email destination sending from `alerts@acme.example` through the relay at
    /// 127.0.0.1:`port`, speaking `tls` (`none`, `starttls` or `tls`); loopback opened.
    pub fn email_relay(name: &str, port: &str, tls: &str) -> Self {
        Self::named(name)
            .args(&["--kind", "email", "--smtp-host", "127.0.0.1"])
            .args(&["--smtp-port", port, "--smtp-tls", tls])
            .args(&["--from", "alerts@acme.example"])
            .loopback_allowed()
    }

    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.args
            .extend(args.iter().map(|arg| arg.as_ref().to_owned()));
        self
    }

    /// Opens loopback, where the tests' receivers listen, in the egress guard
    /// (`--allow-private`).
    pub fn loopback_allowed(self) -> Self {
        self.args(&["--allow-private", TEST_ALLOW_PRIVATE])
    }

    /// The arguments, for a run with its own environment or input.
    pub fn to_args(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }

    pub fn into_args(self) -> Vec<String> {
        self.args
    }

    /// Runs it, as it may fail.
    pub async fn run(&self, db: &TestDb) -> CliRun {
        outboxctl(db, &self.to_args()).await
    }

    /// Runs it, and it must succeed.
    pub async fn add(&self, db: &TestDb) -> CliRun {
        let run = self.run(db).await;
        assert!(run.ok, "{:?}: {}", self.args, run.stderr);
        run
    }
}

/// A fresh database with tenant `acme` and its webhook destination `ops` posting to
/// `sink`, as `configure` sets it: the database and the tenant's id.
pub async fn acme_with_ops_at(
    sink: &Sink,
    configure: impl FnOnce(&mut outbox_store::destinations::NewDestination),
) -> (TestDb, uuid::Uuid) {
    let db = TestDb::new().await;
    let tenant = add_tenant(&db, "acme", &[]).await;
    add_destination(&db, tenant.id, "ops", &sink.hook_url(), configure).await;
    (db, tenant.id)
}

/// Adds a destination pointing at `url`, with the given capabilities.
pub async fn add_destination(
    db: &TestDb,
    tenant_id: uuid::Uuid,
    name: &str,
    url: &str,
    configure: impl FnOnce(&mut outbox_store::destinations::NewDestination),
) {
    let mut destination = outbox_store::destinations::NewDestination {
        timeout: Duration::from_secs(1),
        max_in_flight: 64,
        ..outbox_store::destinations::NewDestination::webhook(tenant_id, name, url)
    };
    configure(&mut destination);
    outbox_store::destinations::create(&db.pool, &destination)
        .await
        .unwrap();
}
