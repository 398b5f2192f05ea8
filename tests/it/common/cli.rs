//! The real `outboxctl` as the tests run it: [`Outboxctl`] (arguments, environment and
//! standard input for one run), what a run printed ([`CliRun`]), and the checks every
//! refusal must pass.

use outbox_testkit::TestDb;

/// What one `outboxctl` run printed, and whether it succeeded.
pub struct CliRun {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// One run of the real `outboxctl` against a test's database, as operator `alice`, with no
/// tenant, secret keys, evidence keys or egress opening taken from the environment the
/// tests run in.
pub struct Outboxctl<'a> {
    db: &'a TestDb,
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: Option<String>,
}

impl<'a> Outboxctl<'a> {
    pub fn on(db: &'a TestDb) -> Self {
        Outboxctl {
            db,
            args: Vec::new(),
            env: Vec::new(),
            stdin: None,
        }
    }

    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.args
            .extend(args.iter().map(|arg| arg.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn envs(mut self, envs: &[(&str, &str)]) -> Self {
        for (key, value) in envs {
            self = self.env(key, value);
        }
        self
    }

    /// Opens loopback in the egress guard through the environment (`OUTBOX_ALLOW_PRIVATE`),
    /// for the sinks and receivers the tests run there.
    pub fn loopback_allowed(self) -> Self {
        self.env("OUTBOX_ALLOW_PRIVATE", super::procs::TEST_ALLOW_PRIVATE)
    }

    pub fn stdin(mut self, text: &str) -> Self {
        self.stdin = Some(text.to_owned());
        self
    }

    pub async fn run(self) -> CliRun {
        let mut run = outbox_testkit::process::Run::new(env!("CARGO_BIN_EXE_outboxctl"))
            .args(&self.args)
            .env("DATABASE_URL", &self.db.url)
            .env("USER", "alice")
            .env_remove("OUTBOX_TENANT")
            .env_remove("OUTBOX_SECRET_KEYS")
            .env_remove("OUTBOX_ALLOW_PRIVATE")
            .env_remove("OUTBOX_EVIDENCE_SIGNING_KEY")
            .env_remove("OUTBOX_EVIDENCE_PUBLIC_KEYS");
        for (key, value) in &self.env {
            run = run.env(key, value);
        }
        if let Some(text) = self.stdin {
            run = run.stdin(text);
        }
        let output = run.output().await;
        CliRun {
            ok: output.status.success(),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
    }
}

/// Runs the real `outboxctl` against `db`, as operator `alice`.
pub async fn outboxctl(db: &TestDb, args: &[&str]) -> CliRun {
    Outboxctl::on(db).args(args).run().await
}

/// Runs the real `outboxctl` against `db`, as operator `alice`; it must succeed.
pub async fn outboxctl_ok(db: &TestDb, args: &[&str]) -> CliRun {
    let run = outboxctl(db, args).await;
    assert!(run.ok, "{args:?}: {}", run.stderr);
    run
}

/// `outboxctl revise ID` with this payload, which must succeed.
pub async fn revise(db: &TestDb, id: &str, payload: &str) -> CliRun {
    let dir = std::env::temp_dir().join(format!("revise-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let corrected = dir.join("payload.json");
    std::fs::write(&corrected, payload).unwrap();
    let path = corrected.to_str().unwrap();
    let revised = outboxctl(
        db,
        &["revise", id, "--payload", path, "--reason", "new text"],
    )
    .await;
    std::fs::remove_dir_all(&dir).ok();
    assert!(revised.ok, "{}", revised.stderr);
    revised
}

/// A refusal as scripts see it: nothing on stdout, one `error: ` line on stderr that
/// contains `needle`.
pub fn assert_refused(run: &CliRun, needle: &str) {
    assert!(!run.ok, "should have failed: {}", run.stdout);
    assert!(run.stdout.is_empty(), "stdout: {}", run.stdout);
    assert_eq!(run.stderr.lines().count(), 1, "stderr: {}", run.stderr);
    assert!(run.stderr.starts_with("error: "), "stderr: {}", run.stderr);
    assert!(
        run.stderr.contains(needle),
        "`{needle}` not in: {}",
        run.stderr
    );
}
