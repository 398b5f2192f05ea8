//! The private PostgreSQL server the demo and the tests start when no server answers at the
//! default address: "private" means that only the user who started it (and root) can
//! connect, and that nothing another user prepared beforehand is used.

use outbox_runtime::private_postgres::{self, PrivateServer, RunAs};
use sqlx::Connection;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A fresh folder to start a server under, readable by everyone as `/tmp` is (the server
/// runs as `postgres` when the tests run as root), removed when dropped.
struct Parent(PathBuf);

impl Parent {
    fn new(tag: &str) -> Parent {
        // Short: the server's socket path, under it, must fit in 107 bytes.
        let random = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("outbox-{tag}-{}", &random[..8]));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Parent(dir)
    }
}

impl Drop for Parent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn start(parent: &Path) -> PrivateServer {
    let parent = parent.to_path_buf();
    tokio::task::spawn_blocking(move || PrivateServer::start(&parent, RunAs::PostgresWhenRoot))
        .await
        .unwrap()
        .unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn only_its_owner_can_reach_the_private_server() {
    let parent = Parent::new("owner");
    let server = start(&parent.0).await;

    // Its owner connects through the socket in its directory.
    let mut conn = sqlx::PgConnection::connect(&server.url("postgres"))
        .await
        .unwrap();
    let listening: String = sqlx::query_scalar("SHOW listen_addresses")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    // No TCP address at all: on 127.0.0.1 every local user would be trusted as superuser.
    assert_eq!(listening, "", "the private server listens on TCP");
    // The directory that holds the trusted socket (and the log) is its owner's alone.
    assert_eq!(mode(server.dir()), 0o700, "{}", server.dir().display());

    if private_postgres::is_root() {
        // Another local account, unprivileged, tries the socket as the server's superuser.
        let psql = private_postgres::find_bindir()
            .map(|dir| dir.join("psql"))
            .filter(|psql| psql.is_file())
            .unwrap_or_else(|| PathBuf::from("psql"));
        let target = format!(
            "host={} user=postgres dbname=postgres connect_timeout=5",
            server.dir().display()
        );
        let output = std::process::Command::new("setpriv")
            .args([
                "--reuid",
                "nobody",
                "--regid",
                "nogroup",
                "--clear-groups",
                "--",
            ])
            .arg(&psql)
            .args(["-w", "-X", "-d", &target, "-c", "SELECT 1"])
            .env("HOME", "/")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "another user connected to the private server: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        assert!(said.contains("Permission denied"), "{said}");
    }
}

#[tokio::test]
async fn a_directory_another_user_prepared_is_never_used() {
    let parent = Parent::new("planted");
    // What another user could have prepared: the directory names the server once used
    // (predictable from a process id), each with its log linked to a file of the victim's.
    let victim = parent.0.join("authorized_keys");
    std::fs::write(&victim, "ssh-ed25519 AAAAvictim victim@host\n").unwrap();
    let mut planted = Vec::new();
    for name in [
        format!("private-postgres-{}", std::process::id()),
        format!("outbox-private-postgres-{}", std::process::id()),
    ] {
        let dir = parent.0.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("server.log")).unwrap();
        planted.push(dir);
    }

    let server = start(&parent.0).await;
    let used = server.dir().to_path_buf();
    assert!(
        !planted.contains(&used),
        "the server took over a prepared directory: {}",
        used.display()
    );
    assert_eq!(used.parent(), Some(parent.0.as_path()));
    assert_eq!(mode(&used), 0o700, "{}", used.display());
    // Its log is inside its own directory, a file and not a link.
    let log = std::fs::symlink_metadata(used.join("server.log")).unwrap();
    assert!(log.file_type().is_file());
    drop(server);

    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "ssh-ed25519 AAAAvictim victim@host\n",
        "the server wrote through a planted link"
    );
    assert!(!used.exists(), "{} is left behind", used.display());
}
