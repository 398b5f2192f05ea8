//! PostgreSQL servers of a test's own, for failover tests: a primary made with `initdb` in a
//! temporary directory on a free port, and streaming replicas made from it with
//! `pg_basebackup -R`. Each can be killed (`SIGKILL` to the postmaster, as a crash) and
//! promoted (`pg_ctl promote`). Everything is stopped and removed when dropped.
//!
//! PostgreSQL's tools refuse to run as root: when the tests do, the tools run as the
//! `postgres` user (`runuser`), which then owns the directory. The tools are found in
//! `PG_BINDIR`, else in the newest `/usr/lib/postgresql/*/bin`.

use outbox_runtime::private_postgres::is_root;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One PostgreSQL server of the test's own.
#[derive(Debug)]
pub struct Server {
    root: PathBuf,
    data: PathBuf,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    bin: PathBuf,
}

/// How a primary commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// A commit waits until a standby has flushed it (`synchronous_standby_names = '*'`).
    Synchronous,
    /// A commit returns as soon as it is flushed locally.
    Asynchronous,
}

impl Server {
    /// Makes and starts a primary that accepts streaming replicas.
    pub fn primary(replication: Replication) -> Server {
        let bin = bindir();
        let root = std::env::temp_dir().join(format!("outbox-pg-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&root).expect("make the server's directory");
        hand_to_postgres(&root);
        let data = root.join("data");
        run(
            &bin,
            "initdb",
            &[
                "-D",
                path(&data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        let synchronous = match replication {
            Replication::Synchronous => "synchronous_standby_names = '*'\n",
            Replication::Asynchronous => "",
        };
        let server = Server {
            port: free_port(),
            data,
            root,
            bin,
        };
        server.append_config(&format!(
            "listen_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\nfsync = off\n\
             {synchronous}",
            server.root.display()
        ));
        std::fs::write(
            server.data.join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 trust\n\
             host replication all 127.0.0.1/32 trust\n",
        )
        .expect("write pg_hba.conf");
        server.start();
        server
    }

    /// Makes and starts a streaming replica of this server (`pg_basebackup -R`).
    pub fn replica(&self) -> Server {
        let root = std::env::temp_dir().join(format!("outbox-pg-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&root).expect("make the replica's directory");
        hand_to_postgres(&root);
        let data = root.join("data");
        let port = self.port.to_string();
        run(
            &self.bin,
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                path(&data),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        );
        let replica = Server {
            port: free_port(),
            data,
            root,
            bin: self.bin.clone(),
        };
        // Copied from the primary with everything else; once promoted, a replica has no
        // standby of its own to wait for (a failover manager would name the next one).
        replica.append_config(&format!(
            "unix_socket_directories = '{}'\nsynchronous_standby_names = ''\n",
            replica.root.display()
        ));
        replica.start();
        replica
    }

    /// From now on, connections over TCP must give `password` (scram-sha-256) for
    /// `postgres`: the server's set-up as most installations have it.
    pub fn require_password(&self, password: &str) {
        let escaped = password.replace('\'', "''");
        let (socket, port) = (self.root.display().to_string(), self.port.to_string());
        let alter = format!("ALTER ROLE postgres PASSWORD '{escaped}'");
        let mut args = psql_connection(&socket, &port).to_vec();
        args.extend(["-c", &alter]);
        run(&self.bin, "psql", &args);
        std::fs::write(
            self.data.join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n\
             host replication all 127.0.0.1/32 scram-sha-256\n",
        )
        .expect("write pg_hba.conf");
        run(&self.bin, "pg_ctl", &["reload", "-D", path(&self.data)]);
        // The reload is a signal, taken in its own time: wait until a connection over TCP
        // without the password is refused.
        let started = std::time::Instant::now();
        while as_postgres(&self.bin, "psql")
            .arg("-w")
            .args(psql_connection("127.0.0.1", &port))
            .args(["-c", "SELECT 1"])
            .output()
            .is_ok_and(|out| out.status.success())
        {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "the server still lets connections in without a password"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// A URL for `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Kills the server as a crash of its machine would: `SIGKILL` to the postmaster and
    /// every process it started, at once, so that no backend commits anything after.
    pub fn kill(&self) {
        let postmaster = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .expect("read postmaster.pid")
            .lines()
            .next()
            .expect("a pid")
            .trim()
            .to_owned();
        let mut pids = children_of(&postmaster);
        pids.push(postmaster.clone());
        // A child may have ended on its own since it was listed: only the postmaster's
        // end is checked.
        let _ = Command::new("kill")
            .arg("-KILL")
            .args(&pids)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run kill");
        let started = std::time::Instant::now();
        while Path::new(&format!("/proc/{postmaster}/stat"))
            .exists()
            .then(|| std::fs::read_to_string(format!("/proc/{postmaster}/stat")))
            .and_then(Result::ok)
            .is_some_and(|stat| !stat.contains(") Z "))
        {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "the postmaster {postmaster} outlived SIGKILL"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Cuts this replica off from its primary: its WAL receiver is pointed at a port where
    /// nothing listens, so from now on it falls behind by everything the primary commits,
    /// as a replica on a broken or slow link does. Returns once the receiver is gone.
    pub fn cut_off(&self) {
        let nowhere = free_port();
        let socket = self.root.display().to_string();
        let port = self.port.to_string();
        let psql = |sql: &str| {
            as_postgres(&self.bin, "psql")
                .args(psql_connection(&socket, &port))
                .args(["-Atq", "-c", sql])
                .output()
                .expect("run psql")
        };
        psql(&format!(
            "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port={nowhere} user=postgres'"
        ));
        psql("SELECT pg_reload_conf()");
        let started = std::time::Instant::now();
        loop {
            let streaming =
                psql("SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'");
            if String::from_utf8_lossy(&streaming.stdout).trim() == "0" {
                return;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "the replica still streams from its primary"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Promotes this replica to a primary and waits until it takes writes.
    pub fn promote(&self) {
        run(
            &self.bin,
            "pg_ctl",
            &["promote", "-w", "-D", path(&self.data)],
        );
    }

    /// The server's log, for a failing test.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default()
    }

    fn start(&self) {
        let port = format!("-p {}", self.port);
        let log = self.root.join("server.log");
        run(
            &self.bin,
            "pg_ctl",
            &[
                "start",
                "-w",
                "-D",
                path(&self.data),
                "-o",
                &port,
                "-l",
                path(&log),
            ],
        );
    }

    fn append_config(&self, lines: &str) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data.join("postgresql.conf"))
            .expect("open postgresql.conf");
        file.write_all(lines.as_bytes())
            .expect("write postgresql.conf");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Already dead after `kill`: then this fails quietly, and the directory goes.
        let _ = as_postgres(&self.bin, "pg_ctl")
            .args(["stop", "-m", "immediate", "-D", path(&self.data)])
            .output();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The processes whose parent is `pid` (from `/proc/<pid>/stat`'s fourth field).
pub(crate) fn children_of(pid: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{name}/stat")).ok()?;
            // The command name is in parentheses and may hold spaces: read after it.
            let after_name = &stat[stat.rfind(')')? + 2..];
            let parent = after_name.split(' ').nth(1)?;
            (parent == pid).then_some(name)
        })
        .collect()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

pub(crate) fn bindir() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BINDIR") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's tools in /usr/lib/postgresql (or set PG_BINDIR)")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions.pop().expect("a PostgreSQL version installed").1
}

/// The flags that connect `psql` to database `postgres` as `postgres`, at `host` (an
/// address, or the directory of the server's socket) and `port`.
pub(crate) fn psql_connection<'a>(host: &'a str, port: &'a str) -> [&'a str; 8] {
    ["-h", host, "-p", port, "-U", "postgres", "-d", "postgres"]
}

/// The tool as a command, run as `postgres` when the tests run as root.
fn as_postgres(bin: &Path, tool: &str) -> Command {
    let tool = bin.join(tool);
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(tool);
        command
    } else {
        Command::new(tool)
    }
}

pub(crate) fn hand_to_postgres(dir: &Path) {
    if is_root() {
        let status = Command::new("chown")
            .args(["postgres:postgres", path(dir)])
            .status()
            .expect("run chown");
        assert!(status.success(), "chown postgres {}", dir.display());
    }
}

/// Runs a PostgreSQL tool; panics with its output when it fails.
fn run(bin: &Path, tool: &str, args: &[&str]) {
    let output = as_postgres(bin, tool)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("run {tool}: {err}"));
    assert!(
        output.status.success(),
        "{tool} {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A port nobody listens on now, that no other test can be handed before its server listens.
pub(crate) fn free_port() -> u16 {
    // Below the ephemeral range, never the same twice in this process: a port chosen now
    // and listened on seconds later must not be handed to another test meanwhile.
    outbox_runtime::private_postgres::unused_port().expect("a free port")
}
