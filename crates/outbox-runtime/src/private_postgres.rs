//! A private, throwaway PostgreSQL server, for the demo and the tests when no server answers
//! at the default address and `DATABASE_URL` was not given: made with the `initdb` and
//! `pg_ctl` installed on the machine (never downloaded), in a directory of its own, and
//! stopped and removed at the end.
//!
//! "Private" means only the user who started it (and root) can connect: the server listens
//! on no TCP address at all, only on a Unix socket inside its own directory, which is made
//! with a random name, exclusively (an existing directory or a planted symlink is never
//! taken over), with mode 0700. Trust authentication is safe there because nobody else can
//! reach the socket to be trusted; a server on `127.0.0.1` would trust every local user,
//! and a superuser can run programs (`COPY ... TO PROGRAM`) as whoever started it.
//!
//! "At the end" includes the ends a process does not choose: a watcher (a shell loop in a
//! process group of its own, so a terminal's Ctrl-C does not reach it) waits for the
//! process that started the server to be gone, then stops the server and removes its
//! directory. Dropping the [`PrivateServer`] does the same at once.
//!
//! The programs are found in `PG_BINDIR` when it is set (and only there), else through
//! `pg_config --bindir`, `initdb` on the `PATH`, and the usual places of Debian and Ubuntu
//! (`/usr/lib/postgresql/N/bin`), the PGDG packages (`/usr/pgsql-N/bin`) and Homebrew.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The arguments of `setpriv` (util-linux) that run the program after them as the
/// `postgres` user, with its groups.
pub const SETPRIV_AS_POSTGRES: [&str; 6] = [
    "--reuid",
    "postgres",
    "--regid",
    "postgres",
    "--init-groups",
    "--",
];

/// `program` as a command run as the `postgres` user through `setpriv`, which execs: the
/// child is the program itself.
pub fn as_postgres(program: impl AsRef<std::ffi::OsStr>) -> Command {
    as_postgres_through("setpriv", program)
}

/// The same with `setpriv` at `setpriv` (a full path, for a program given a `PATH`
/// without it).
pub fn as_postgres_through(
    setpriv: impl AsRef<std::ffi::OsStr>,
    program: impl AsRef<std::ffi::OsStr>,
) -> Command {
    let mut command = Command::new(setpriv);
    command.args(SETPRIV_AS_POSTGRES).arg(program);
    command
}

/// The default server's address: `127.0.0.1` on `PGPORT` (libpq's variable), else 5432.
pub fn default_address() -> (String, u16) {
    let port = std::env::var("PGPORT")
        .ok()
        .and_then(|port| port.parse().ok())
        .unwrap_or(5432);
    ("127.0.0.1".to_owned(), port)
}

/// The URL of the default server: what every binary uses without `DATABASE_URL`.
pub fn default_url() -> String {
    let (host, port) = default_address();
    format!("postgres://postgres@{host}:{port}/postgres")
}

/// Whether something accepts TCP connections at the default address.
pub fn default_server_answers() -> bool {
    let (host, port) = default_address();
    format!("{host}:{port}")
        .parse()
        .ok()
        .is_some_and(|address| {
            std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_secs(2))
                .is_ok()
        })
}

/// Who the server runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAs {
    /// The current user; refused when that is root, as PostgreSQL refuses it.
    CurrentUser,
    /// The current user, or the `postgres` user when the current one is root (the tests,
    /// which run as root on CI machines).
    PostgresWhenRoot,
}

/// Why a private server could not be started; each says what to do, in one line.
#[derive(Debug, thiserror::Error)]
pub enum PrivateServerError {
    /// No `initdb` and `pg_ctl` on this machine.
    #[error(
        "no PostgreSQL answers at {address} and its programs (initdb, pg_ctl) are not \
         installed to start a private one: install them (Debian/Ubuntu: apt-get install \
         postgresql; Fedora: dnf install postgresql-server; macOS: brew install \
         postgresql@15; or run one with Docker: docker run -d -p 5432:5432 -e \
         POSTGRES_HOST_AUTH_METHOD=trust postgres:15), set PG_BINDIR to where they are, or \
         set DATABASE_URL to a server that runs"
    )]
    NotInstalled {
        /// The default address, where nothing answered.
        address: String,
    },
    /// Running as root, which PostgreSQL refuses.
    #[error(
        "no PostgreSQL answers at {address}, and a private one cannot run as root (PostgreSQL \
         refuses it): run this as another user (e.g. `runuser -u postgres -- ...` or \
         `sudo -u postgres ...`), or set DATABASE_URL to a server that runs"
    )]
    Root {
        /// The default address, where nothing answered.
        address: String,
    },
    /// A PostgreSQL program failed.
    #[error("starting a private PostgreSQL: {0}")]
    Failed(String),
}

/// A running private server; stopped and removed when dropped.
#[derive(Debug)]
pub struct PrivateServer {
    root: PathBuf,
    bin: PathBuf,
    run_as_postgres: bool,
    /// The watcher that removes the server should this process end without dropping it;
    /// ended by the drop, which does its work at once.
    watcher: Option<std::process::Child>,
    /// The server's version (`PostgreSQL 15.4`), for the line that names it.
    pub version: String,
    /// How long making and starting it took.
    pub started_in: std::time::Duration,
}

impl PrivateServer {
    /// Makes and starts a server in a new private directory under `parent` (the system's
    /// temporary directory when `parent` cannot be written or is too deep for a socket).
    pub fn start(parent: &Path, run_as: RunAs) -> Result<PrivateServer, PrivateServerError> {
        let started = Instant::now();
        let (host, port) = default_address();
        let address = format!("{host}:{port}");
        let root_user = is_root();
        if root_user && run_as == RunAs::CurrentUser {
            return Err(PrivateServerError::Root { address });
        }
        let bin = find_bindir().ok_or(PrivateServerError::NotInstalled { address })?;
        let mut server = PrivateServer {
            root: server_dir(parent)?,
            bin,
            run_as_postgres: root_user,
            watcher: None,
            version: String::new(),
            started_in: std::time::Duration::ZERO,
        };
        if server.run_as_postgres {
            server.hand_to_postgres()?;
        }
        server.watcher = Some(server.watch_owner()?);
        server.init_and_start()?;
        server.version = server.read_version();
        server.started_in = started.elapsed();
        Ok(server)
    }

    /// Makes the cluster and starts it listening on a socket in its own directory and on no
    /// TCP address. Local (socket) connections are trusted, which only the directory's owner
    /// can make; TCP is rejected in `pg_hba.conf` too, should anything ever open a port.
    /// `fsync` is off: the server holds a demo's or a test's data, which nobody wants back
    /// after a crash.
    fn init_and_start(&self) -> Result<(), PrivateServerError> {
        let data = self.root.join("data");
        self.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--auth-local=trust".as_ref(),
                "--auth-host=reject".as_ref(),
                "--no-sync".as_ref(),
                "--no-instructions".as_ref(),
            ],
        )?;
        // The socket directory is the server's own (mode 0700), and the socket itself is
        // made 0700 as well. The port only names the socket file.
        let options = format!(
            "-p {SOCKET_PORT} -c listen_addresses='' -c unix_socket_directories='{}' \
             -c unix_socket_permissions=0700 -c fsync=off",
            self.root.display()
        );
        let log = self.root.join("server.log");
        self.run(
            "pg_ctl",
            &[
                "start".as_ref(),
                "-w".as_ref(),
                "-D".as_ref(),
                data.as_os_str(),
                "-o".as_ref(),
                options.as_ref(),
                "-l".as_ref(),
                log.as_os_str(),
            ],
        )
    }

    /// Gives the server's directory to `postgres`, the user it runs as when we are root.
    fn hand_to_postgres(&self) -> Result<(), PrivateServerError> {
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&self.root)
            .status();
        if status.is_ok_and(|s| s.success()) {
            Ok(())
        } else {
            Err(PrivateServerError::Failed(format!(
                "cannot hand {} to the postgres user",
                self.root.display()
            )))
        }
    }

    /// `PostgreSQL 15.4`, or empty when `postgres --version` says nothing.
    fn read_version(&self) -> String {
        let version = self
            .command("postgres")
            .arg("--version")
            .output()
            .ok()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .unwrap_or_default();
        version.replace("postgres (PostgreSQL) ", "PostgreSQL ")
    }

    /// A URL for `database` on this server: its socket directory, percent-encoded, as the
    /// host (libpq and sqlx read a host that starts with `/` as a socket directory).
    pub fn url(&self, database: &str) -> String {
        let dir = self.root.to_string_lossy();
        let mut host = String::with_capacity(dir.len() * 3);
        for byte in dir.bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
                host.push(char::from(byte));
            } else {
                host.push_str(&format!("%{byte:02X}"));
            }
        }
        format!("postgres://postgres@{host}:{SOCKET_PORT}/{database}")
    }

    /// Where it lives, for the line that names it.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// `PostgreSQL 15.4 on a socket in DIR only`.
    pub fn describe(&self) -> String {
        format!(
            "{} on a socket in {} only",
            self.version,
            self.root.display()
        )
    }

    /// A PostgreSQL program as a command, run as `postgres` when this process is root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.run_as_postgres {
            as_postgres(path)
        } else {
            Command::new(path)
        };
        // Its own process group: a terminal's Ctrl-C goes to the demo, whose end stops the
        // server in order, not to the server's processes.
        use std::os::unix::process::CommandExt;
        command.process_group(0);
        command
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<(), PrivateServerError> {
        let output = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|err| PrivateServerError::Failed(format!("{program}: {err}")))?;
        if output.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&output.stderr);
        let last = said.lines().rev().find(|line| !line.trim().is_empty());
        Err(PrivateServerError::Failed(format!(
            "{program} failed: {}",
            last.unwrap_or("(no message)").trim()
        )))
    }

    /// Starts the watcher that stops the server and removes its directory once this process
    /// is gone, however it ended.
    fn watch_owner(&self) -> Result<std::process::Child, PrivateServerError> {
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = if self.run_as_postgres {
            format!(
                "setpriv {} '{}'",
                SETPRIV_AS_POSTGRES.join(" "),
                pg_ctl.display()
            )
        } else {
            format!("'{}'", pg_ctl.display())
        };
        let script = format!(
            "while kill -0 {owner} 2>/dev/null; do sleep 1; done; \
             {stop} stop -m immediate -D '{dir}/data' >/dev/null 2>&1; rm -rf '{dir}'",
            owner = std::process::id(),
            dir = self.root.display(),
        );
        use std::os::unix::process::CommandExt;
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|err| PrivateServerError::Failed(format!("starting its watcher: {err}")))
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let data = self.root.join("data");
        let _ = self
            .command("pg_ctl")
            .args(["stop", "-m", "immediate", "-D"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.root);
        if let Some(mut watcher) = self.watcher.take() {
            let _ = watcher.kill();
            let _ = watcher.wait();
        }
    }
}

/// Where `initdb` and `pg_ctl` are, if anywhere.
pub fn find_bindir() -> Option<PathBuf> {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("PG_BINDIR") {
        let dir = PathBuf::from(dir);
        return has_tools(&dir).then_some(dir);
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut usual = Vec::new();
    for (parent, prefix, suffix) in [
        ("/usr/lib/postgresql", "", "bin"),
        ("/usr", "pgsql-", "bin"),
        ("/opt/homebrew/opt", "postgresql@", "bin"),
        ("/usr/local/opt", "postgresql@", "bin"),
    ] {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(parent)
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let name = entry.file_name().into_string().ok()?;
                let version = name.strip_prefix(prefix)?.parse().ok()?;
                Some((version, entry.path().join(suffix)))
            })
            .collect();
        // The newest first.
        versions.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
        usual.extend(versions.into_iter().map(|(_, dir)| dir));
    }
    from_pg_config
        .into_iter()
        .chain(on_path)
        .chain(usual)
        .find(|dir| has_tools(dir))
}

/// Whether this process runs as root, as which PostgreSQL refuses to run.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// The port the private server's socket file is named after (`.s.PGSQL.5432`): it listens on
/// no TCP port, and its socket directory is its own, so no other server can clash.
const SOCKET_PORT: u16 = 5432;

/// The longest socket directory that leaves room for the socket's file name within the
/// 107 bytes PostgreSQL allows a socket path (`sun_path` less its terminating NUL).
const LONGEST_SOCKET_DIR: usize = 107 - "/.s.PGSQL.5432".len();

/// A new directory for the server under `parent`, or under the system's temporary
/// directory when `parent` cannot be written or is too deep for a socket path.
fn server_dir(parent: &Path) -> Result<PathBuf, PrivateServerError> {
    if let Ok(dir) = private_dir_in(parent) {
        return Ok(dir);
    }
    let fallback = std::env::temp_dir();
    private_dir_in(&fallback)
        .map_err(|err| PrivateServerError::Failed(format!("{}: {err}", fallback.display())))
}

/// Makes `parent/private-postgres-RANDOM` with mode 0700, exclusively: `mkdir` fails on
/// anything already there, a symlink included, so a directory (or a planted `server.log`
/// link inside one) prepared by another user is never used; a name taken is retried with
/// another random one. Nothing but the owner (and root) can then enter it, which is what
/// keeps the trusted socket and the log inside it private.
pub fn private_dir_in(parent: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for _ in 0..8 {
        let dir = parent.join(format!("private-postgres-{}", random_hex(8)?));
        if dir.as_os_str().len() > LONGEST_SOCKET_DIR {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "too deep for a socket path",
            ));
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
}

/// `bytes` random bytes from the kernel, as lowercase hex.
fn random_hex(bytes: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// A TCP port on 127.0.0.1 that nothing listens on now, for a server that will listen
/// there a little later (PostgreSQL, Patroni, HAProxy, etcd). It is taken below the
/// kernel's ephemeral range (`ip_local_port_range`), so that no `bind` to port 0 and no
/// outgoing connection of another process can be handed the same port meanwhile; within
/// one process, successive calls never return the same port.
pub fn unused_port() -> Option<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOWEST: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_start: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|&start| start > LOWEST + 1_000)
        .unwrap_or(32_768);
    let span = ephemeral_start - LOWEST;
    // Each process starts at its own place in the span, so two processes rarely try the
    // same ports; the bind below catches the rest.
    let start = (std::process::id().wrapping_mul(7_919)) % span;
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = LOWEST + (start + step) % span;
        let port = u16::try_from(port).ok()?;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Some(port);
        }
    }
    None
}
