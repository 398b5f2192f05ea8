//! `outboxctl demo` end to end: the real binaries on the sample data, with faults; it must
//! exit 0 (its invariants held) and show its final table, and its inbox is checked here
//! from the sink's own files (`--eml-dir`) against the demo's database.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_runtime::private_postgres;
use std::collections::HashMap;

/// An email as the sink wrote it to its folder, byte for byte as received.
struct Received {
    file: String,
    text: String,
}

impl Received {
    /// A header field's value, folded lines joined.
    fn header(&self, name: &str) -> Option<String> {
        let head = self.text.split("\r\n\r\n").next().unwrap_or("");
        let unfolded = head.replace("\r\n ", " ").replace("\r\n\t", " ");
        unfolded.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

#[tokio::test]
async fn the_demo_runs_its_invariants_hold_and_each_email_arrives_once_in_its_language() {
    let eml_dir = std::env::temp_dir().join(format!("outbox-demo-inbox-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&eml_dir);
    // Run from a directory of its own, as a newcomer runs it from anywhere: the sample
    // data is built in and the other binaries are found beside outboxctl.
    let elsewhere = std::env::temp_dir().join(format!("outbox-demo-cwd-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).unwrap();
    // A URL with a password, as a real one has (the test server trusts local connections
    // and ignores it): the demo must not show it to other users on the processes' command
    // lines, nor print it.
    let password = format!("DemoPw{}", uuid::Uuid::new_v4().simple());
    let url = with_password(&outbox_testkit::server_url(), &password);
    let watching = CommandLineWatch::start(&password);
    let output = outbox_testkit::process::Run::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(["demo", "--eml-dir", eml_dir.to_str().unwrap()])
        .current_dir(&elsewhere)
        .env("DATABASE_URL", &url)
        .output()
        .await;
    let exposed = watching.stop().await;
    let _ = std::fs::remove_dir(&elsewhere);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        exposed.is_empty(),
        "the password was on command lines: {exposed:?}"
    );
    assert!(
        !stdout.contains(&password) && !stderr.contains(&password),
        "the demo printed the password:\n{stdout}\n{stderr}"
    );
    // The demo keeps its database for a look around; this test looks, then drops it.
    let database = stderr
        .lines()
        .find_map(|l| l.strip_prefix("demo database: "))
        .map(str::to_owned);
    let verdict = match &database {
        Some(name) => inbox_matches_the_database(name, &eml_dir).await,
        None => Err("the demo named no database".to_owned()),
    };
    if let Some(name) = &database {
        outbox_store::connect::drop_database(&outbox_testkit::server_url(), name)
            .await
            .unwrap();
    }
    let _ = std::fs::remove_dir_all(&eml_dir);

    assert!(output.status.success(), "{stdout}\n{stderr}");
    if let Err(why) = verdict {
        panic!("{why}\n{stdout}");
    }
    assert!(stdout.contains("invariants hold"), "{stdout}");
    assert!(stdout.contains("effective duplicates   0"), "{stdout}");
    // The demo's sink is on loopback: a demo that forgot to open it in the egress guard
    // would fail every alert and still settle them all.
    assert!(
        stdout.contains("failed                                              0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("still in flight                                     0"),
        "{stdout}"
    );
    assert!(
        stderr.contains("one per identity, whichever run decided it"),
        "{stderr}"
    );
    // One email of each is shown as a person reads it: the Spanish renewal, the English
    // news, decoded.
    assert!(
        stdout.contains("Subject: Renovación: el contrato"),
        "{stdout}"
    );
    assert!(stdout.contains("días"), "{stdout}");
    assert!(stdout.contains("Subject: Event on northwind: "), "{stdout}");
    assert!(stdout.contains("Matched terms: "), "{stdout}");
    assert!(stdout.contains("the inbox has it once"), "{stdout}");
}

/// `url` with `password` for its user.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user, server) = rest.split_once('@').unwrap();
    format!("{scheme}://{user}:{password}@{server}")
}

/// Reads every process's command line, over and over, until stopped, keeping those that
/// hold `secret`: what `ps` shows every user of the machine.
struct CommandLineWatch {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl CommandLineWatch {
    fn start(secret: &str) -> CommandLineWatch {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let secret = secret.to_owned();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            while !*stopped.borrow() {
                for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                    let Ok(line) = std::fs::read(entry.path().join("cmdline")) else {
                        continue;
                    };
                    let line = String::from_utf8_lossy(&line).replace('\0', " ");
                    if line.contains(&secret) && !seen.contains(&line) {
                        seen.push(line);
                    }
                }
                let _ =
                    tokio::time::timeout(std::time::Duration::from_millis(20), stopped.changed())
                        .await;
            }
            seen
        });
        CommandLineWatch { stop, task }
    }

    async fn stop(self) -> Vec<String> {
        self.stop.send(true).unwrap();
        self.task.await.unwrap()
    }
}

/// Every accepted email alert is in the inbox exactly once by Message-ID, the held one is
/// there once too, nothing else is there, and each mailbox got its kind of alert in its
/// language.
async fn inbox_matches_the_database(
    database: &str,
    eml_dir: &std::path::Path,
) -> Result<(), String> {
    let options: sqlx::postgres::PgConnectOptions = outbox_testkit::server_url()
        .parse()
        .map_err(|e: sqlx::Error| e.to_string())?;
    let pool = sqlx::PgPool::connect_with(options.database(database))
        .await
        .map_err(|e| e.to_string())?;
    let alerts: Vec<(uuid::Uuid, String, String, String)> = sqlx::query_as(
        "SELECT a.id, d.name, a.subject, s.state \
         FROM alerts a JOIN destinations d ON d.id = a.destination_id \
         JOIN alert_states s ON s.alert_id = a.id WHERE d.kind = 'email'",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| e.to_string())?;
    pool.close().await;

    let mut received: Vec<Received> = Vec::new();
    for entry in std::fs::read_dir(eml_dir).map_err(|e| format!("{eml_dir:?}: {e}"))? {
        let path = entry.unwrap().path();
        received.push(Received {
            file: path.display().to_string(),
            text: String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned(),
        });
    }
    let mut by_message_id: HashMap<String, Vec<&Received>> = HashMap::new();
    for message in &received {
        let id = message
            .header("Message-ID")
            .ok_or(format!("{} has no Message-ID", message.file))?;
        by_message_id.entry(id).or_default().push(message);
    }

    let count = |state: &str, destination: &str| {
        alerts
            .iter()
            .filter(|(_, d, _, s)| s == state && d == destination)
            .count()
    };
    if count("accepted", "cfo-mail") == 0 || count("accepted", "ops-mail") == 0 {
        return Err(format!("both mailboxes should get mail: {alerts:?}"));
    }
    let held: Vec<_> = alerts.iter().filter(|(_, _, _, s)| s == "held").collect();
    if held.len() != 1 || held[0].1 != "cfo-mail" {
        return Err(format!("exactly the CFO's first email is held: {held:?}"));
    }
    let mut expected = 0;
    for (id, destination, subject, state) in &alerts {
        let message_id = format!("<{id}@demo.example>");
        let copies = by_message_id.get(&message_id).map_or(0, Vec::len);
        match state.as_str() {
            "accepted" | "held" if copies != 1 => {
                return Err(format!(
                    "{state} alert {id} is in the inbox {copies} times, not once"
                ))
            }
            "accepted" | "held" => expected += 1,
            // A 451 is refused before the inbox; nothing else may stay unsettled.
            other => return Err(format!("email alert {id} ended {other}")),
        }
        let message = by_message_id[&message_id][0];
        if message.header("X-Alert-Id").as_deref() != Some(id.to_string().as_str()) {
            return Err(format!("{} does not name alert {id}", message.file));
        }
        let (recipient, kind, word) = match destination.as_str() {
            "cfo-mail" => ("cfo@demo.example", "contract:", "Proveedor:"),
            _ => ("ops-team@demo.example", "watchlist:", "Matched terms:"),
        };
        if !subject.starts_with(kind) {
            return Err(format!("{destination} got {subject}"));
        }
        if message.header("To").as_deref() != Some(recipient) || !message.text.contains(word) {
            return Err(format!(
                "{} is not the {destination} email it should be:\n{}",
                message.file, message.text
            ));
        }
    }
    if received.len() != expected {
        return Err(format!(
            "{} messages in the inbox, {expected} email alerts delivered or held",
            received.len()
        ));
    }
    Ok(())
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `outboxctl demo` with `DATABASE_URL` unset and `PGPORT` on a port where nothing
/// listens: as `postgres` when the tests run as root (PostgreSQL refuses root), as the
/// current user otherwise.
fn demo_without_a_server(
    port: u16,
    extra_env: &[(&str, &str)],
) -> (std::process::Command, BinaryCopies) {
    // The demo runs as `postgres`, which may not be able to reach the build directory (a
    // clone in a private temporary directory): it runs copies of the binaries it needs,
    // in a folder of this call's own (its port is unique among the calls running now).
    let copies =
        std::env::temp_dir().join(format!("outbox-demo-bins-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&copies).unwrap();
    for binary in [
        env!("CARGO_BIN_EXE_outboxctl"),
        env!("CARGO_BIN_EXE_decider"),
        env!("CARGO_BIN_EXE_dispatcher"),
        env!("CARGO_BIN_EXE_sink"),
    ] {
        let path = std::path::Path::new(binary);
        std::fs::copy(path, copies.join(path.file_name().unwrap())).unwrap();
    }
    let outboxctl = copies.join("outboxctl");
    let mut command = if private_postgres::is_root() {
        // By its full path: the test may give the demo a PATH without it.
        let setpriv = std::env::split_paths(&std::env::var_os("PATH").unwrap())
            .map(|dir| dir.join("setpriv"))
            .find(|path| path.is_file())
            .expect("setpriv (util-linux) on the PATH");
        private_postgres::as_postgres_through(setpriv, outboxctl)
    } else {
        std::process::Command::new(outboxctl)
    };
    command
        .arg("demo")
        .current_dir(std::env::temp_dir())
        .env_remove("DATABASE_URL")
        .env_remove("PG_BINDIR")
        .env("PGPORT", port.to_string())
        .env("HOME", std::env::temp_dir())
        .envs(extra_env.iter().copied());
    (command, BinaryCopies(copies))
}

/// The folder of binaries a demo ran from, removed when dropped (some 180 MB a call).
struct BinaryCopies(std::path::PathBuf);

impl Drop for BinaryCopies {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_server_the_demo_runs_on_a_private_one_and_leaves_nothing_behind() {
    let port = free_port();
    let output = tokio::task::spawn_blocking(move || {
        let (mut demo, _copies) = demo_without_a_server(port, &[]);
        demo.output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("invariants hold"), "{stdout}");
    // One line names the server the demo used, and where it lived.
    let named: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("the demo runs on a private server"))
        .collect();
    assert_eq!(named.len(), 1, "{stderr}");
    assert!(
        named[0].starts_with(&format!("no PostgreSQL answers at 127.0.0.1:{port}")),
        "{stderr}"
    );
    let dir = named[0]
        .split_once(" on a socket in ")
        .and_then(|(_, rest)| rest.split_once(" only, started"))
        .map(|(dir, _)| std::path::PathBuf::from(dir))
        .unwrap_or_else(|| panic!("no directory in {}", named[0]));
    // Nothing left behind: the directory is gone and no server runs from it.
    assert!(!dir.exists(), "{} is still there", dir.display());
    let still_running = std::process::Command::new("pgrep")
        .args(["-a", "-f", &dir.display().to_string()])
        .output()
        .unwrap();
    assert!(
        !still_running.status.success(),
        "a process of the private server still runs: {}",
        String::from_utf8_lossy(&still_running.stdout)
    );
}

#[tokio::test]
async fn without_a_server_or_postgresql_installed_the_demo_says_how_to_get_one() {
    let nowhere = std::env::temp_dir().join(format!("outbox-no-pg-{}", std::process::id()));
    std::fs::create_dir_all(&nowhere).unwrap();
    let nowhere_str = nowhere.display().to_string();
    let port = free_port();
    // PostgreSQL's programs hidden: PG_BINDIR names a folder without them, PATH too.
    let (mut demo, _copies) =
        demo_without_a_server(port, &[("PG_BINDIR", &nowhere_str), ("PATH", &nowhere_str)]);
    let output = demo.output().unwrap();
    let _ = std::fs::remove_dir(&nowhere);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: no PostgreSQL answers at 127.0.0.1:{port} and its programs (initdb, \
             pg_ctl) are not installed"
        )),
        "{stderr}"
    );
    for advice in [
        "apt-get install postgresql",
        "dnf install",
        "brew install",
        "docker run",
    ] {
        assert!(stderr.contains(advice), "{advice} not in {stderr}");
    }
}
