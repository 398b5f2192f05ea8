//! A Patroni cluster of a test's own, made from the project's own `deploy/patroni/` files:
//! one etcd, two Patroni nodes (each a PostgreSQL server in a temporary directory, on free
//! ports) and HAProxy routing to the leader with Patroni's `/primary` check. The per-node
//! settings go in through Patroni's `PATRONI_*` environment variables and HAProxy's
//! `${...}` expansions, exactly as `docker-compose.yml`'s `ha` profile passes them.
//!
//! A node can be crashed (`SIGKILL` to its Patroni and its whole PostgreSQL at once, as a
//! machine that dies) and started again (Patroni rewinds it and it rejoins as a replica).
//! Everything is killed and removed when the cluster is dropped; a cluster dropped while
//! its test panics prints the end of each of its logs first.
//!
//! Patroni and PostgreSQL refuse to run as root: when the tests do, Patroni runs as the
//! `postgres` user through `setpriv`, which execs, so the process we hold is Patroni itself.

use crate::cluster::{bindir, children_of, free_port, hand_to_postgres, psql_connection};
use outbox_runtime::private_postgres::{as_postgres, is_root};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The password of every role the cluster makes (`postgres`, `replicator`, `rewinder`).
pub const PASSWORD: &str = "outbox-ha-test";

/// How long the cluster may take to make itself, elect a leader, or fail over.
const PATIENCE: Duration = Duration::from_secs(90);

/// A running etcd, two Patroni nodes and HAProxy.
#[derive(Debug)]
pub struct PatroniCluster {
    root: PathBuf,
    etcd: Child,
    etcd_client: String,
    nodes: [Node; 2],
    haproxy: Child,
    /// The port on 127.0.0.1 where HAProxy leads to the primary.
    pub port: u16,
}

/// One Patroni node: its PostgreSQL port, its REST API port, and its process while alive.
#[derive(Debug)]
struct Node {
    name: String,
    dir: PathBuf,
    pg_port: u16,
    api_port: u16,
    patroni: Option<Child>,
    /// How many times it was started, to name its log files.
    starts: usize,
}

/// How the cluster's primary commits, set in Patroni's dynamic configuration.
pub use crate::cluster::Replication;

impl PatroniCluster {
    /// Starts etcd, node 1 (which makes the cluster and leads), node 2 (a replica, the
    /// synchronous standby in [`Replication::Synchronous`]) and HAProxy; returns once
    /// HAProxy leads to a primary that node 2 streams from.
    pub fn start(replication: Replication) -> PatroniCluster {
        let root = std::env::temp_dir().join(format!("outbox-ha-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&root).expect("make the cluster's directory");
        let (etcd, etcd_client) = start_etcd(&root);
        // Patroni runs as `postgres`, which may not be able to read the checkout (a clone
        // in a private temporary directory): it reads a copy of the settings.
        std::fs::copy(deploy_dir().join("patroni.yml"), root.join("patroni.yml"))
            .expect("copy patroni.yml");
        let nodes = [1, 2].map(|n| Node::new(&root, n));
        let port = free_port();
        let haproxy = start_haproxy(&root, port, &nodes);
        let mut cluster = PatroniCluster {
            root,
            etcd,
            etcd_client,
            nodes,
            haproxy,
            port,
        };
        cluster.wait_for("etcd to answer", |c| {
            http(&c.etcd_client, "GET", "/health", None).is_some_and(|(status, _)| status == 200)
        });
        cluster.start_node(0);
        cluster.wait_for("node1 to lead", |c| c.leader() == Some(0));
        if replication == Replication::Asynchronous {
            // Asynchronous, and promoted however far behind: with Patroni's default
            // `maximum_lag_on_failover` (1 MiB) a replica that a loaded machine let fall
            // further behind is never promoted, and the outage lasts until the old leader is
            // back. The test measures what a failover loses, so it lets one happen.
            cluster.set_dynamic(
                r#"{"synchronous_mode": false, "maximum_lag_on_failover": 1073741824}"#,
            );
        }
        cluster.start_node(1);
        let wanted = match replication {
            Replication::Synchronous => "sync_standby",
            Replication::Asynchronous => "replica",
        };
        cluster.wait_for("node2 to join as a replica", |c| {
            c.member("node2")
                .is_some_and(|m| m.contains(&format!("\"role\": \"{wanted}\"")))
        });
        cluster.wait_until_caught_up();
        cluster
    }

    /// Waits until the leader's other node streams from it and has replayed everything the
    /// leader had written when this was called. (Patroni reports a replica fresh from its
    /// base backup with no lag before it streams: its replication slot is made on the
    /// leader's next loop, and until then whatever the leader writes reaches nobody.)
    pub fn wait_until_caught_up(&mut self) {
        let leader = self.leader().expect("a leader");
        let follower = &self.nodes[1 - leader].name.clone();
        let port = self.nodes[leader].pg_port.to_string();
        let bin = bindir();
        let sql = |query: &str| -> Option<String> {
            let output = Command::new(bin.join("psql"))
                .args(psql_connection("127.0.0.1", &port))
                .args(["-Atq", "-c", query])
                .env("PGPASSWORD", PASSWORD)
                .output()
                .ok()?;
            output
                .status
                .success()
                .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        };
        let target = sql("SELECT pg_current_wal_lsn()").expect("the leader's WAL position");
        let query = format!(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = '{follower}' \
             AND state = 'streaming' AND replay_lsn >= '{target}'"
        );
        self.wait_for("the replica to stream and catch up", |_| {
            sql(&query).as_deref() == Some("1")
        });
    }

    /// A URL for `database` through HAProxy, with `target_session_attrs=read-write` as the
    /// documentation recommends.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/{database}?target_session_attrs=read-write",
            self.port
        )
    }

    /// A URL for `database` on node `index` (0 or 1) alone.
    pub fn node_url(&self, index: usize, database: &str) -> String {
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/{database}",
            self.nodes[index].pg_port
        )
    }

    /// A libpq multi-host URL for `database` naming node `first` and then the other, with
    /// `target_session_attrs=read-write`: a process that reaches the nodes directly.
    pub fn multi_host_url(&self, first: usize, database: &str) -> String {
        let other = 1 - first;
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{},127.0.0.1:{}/{database}\
             ?target_session_attrs=read-write",
            self.nodes[first].pg_port, self.nodes[other].pg_port
        )
    }

    /// The index of the node whose Patroni says it is the running primary, if any.
    pub fn leader(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&index| {
            self.nodes[index].patroni.is_some()
                && http(&self.api(index), "GET", "/primary", None)
                    .is_some_and(|(status, _)| status == 200)
        })
    }

    /// Waits until a node other than `not` leads, and returns it.
    pub async fn wait_for_new_leader(&self, not: usize) -> usize {
        let started = Instant::now();
        loop {
            if let Some(leader) = self.leader().filter(|&leader| leader != not) {
                return leader;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "no new leader after {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until node `index` runs again as a replica streaming from the leader.
    pub async fn wait_until_replica(&self, index: usize) {
        let name = self.nodes[index].name.clone();
        let started = Instant::now();
        loop {
            if self.member(&name).is_some_and(|m| {
                (m.contains("\"role\": \"replica\"") || m.contains("\"role\": \"sync_standby\""))
                    && m.contains("\"state\": \"running\"")
            }) {
                return;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "{name} did not rejoin as a replica after {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Crashes node `index` as its machine would die: `SIGKILL` to Patroni and to its
    /// PostgreSQL's postmaster and every process of it, at once. (Killing the postmaster
    /// alone is not a failover: the node's Patroni starts it again and keeps the lead.)
    pub fn crash(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        let mut patroni = node.patroni.take().expect("the node is running");
        let postmaster = std::fs::read_to_string(node.dir.join("data/postmaster.pid"))
            .ok()
            .and_then(|pid| pid.lines().next().map(|line| line.trim().to_owned()));
        let mut pids = vec![patroni.id().to_string()];
        if let Some(postmaster) = postmaster {
            pids.extend(children_of(&postmaster));
            pids.push(postmaster);
        }
        let _ = Command::new("kill")
            .arg("-KILL")
            .args(&pids)
            .stderr(Stdio::null())
            .status();
        let _ = patroni.wait();
    }

    /// Starts node `index`'s Patroni again on its data directory.
    pub fn restart(&mut self, index: usize) {
        self.start_node(index);
    }

    /// The end of every log of the cluster, for a failing test.
    pub fn logs(&self) -> String {
        let mut logs = String::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.root)
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok().map(|e| e.path()))
                    .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            logs.push_str(&format!("==> {} <==\n", file.display()));
            for line in &lines[lines.len().saturating_sub(60)..] {
                logs.push_str(line);
                logs.push('\n');
            }
        }
        logs
    }

    fn api(&self, index: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[index].api_port)
    }

    /// Node `name`'s entry in Patroni's view of the cluster, as JSON text.
    fn member(&self, name: &str) -> Option<String> {
        let index = self.leader()?;
        let (status, body) = http(&self.api(index), "GET", "/cluster", None)?;
        if status != 200 {
            return None;
        }
        // One object per member, each opening with its name: no JSON parser needed here.
        let start = body.find(&format!("\"name\": \"{name}\""))?;
        let end = body[start..]
            .find('}')
            .map_or(body.len(), |end| start + end);
        Some(body[start..end].to_owned())
    }

    /// Changes Patroni's dynamic configuration (`PATCH /config`), as an operator does with
    /// `patronictl edit-config`.
    fn set_dynamic(&self, json: &str) {
        let index = self.leader().expect("a leader to configure");
        let answer = http(&self.api(index), "PATCH", "/config", Some(json));
        assert!(
            answer.as_ref().is_some_and(|(status, _)| *status == 200),
            "PATCH /config {json}: {answer:?}"
        );
    }

    fn start_node(&mut self, index: usize) {
        let bin = bindir();
        let etcd = self.etcd_client.clone();
        let node = &mut self.nodes[index];
        node.starts += 1;
        let log = self.root.join(format!("{}-{}.log", node.name, node.starts));
        let mut command = if is_root() {
            as_postgres("patroni")
        } else {
            Command::new("patroni")
        };
        let api = format!("127.0.0.1:{}", node.api_port);
        let postgres = format!("127.0.0.1:{}", node.pg_port);
        let patroni = command
            .arg(self.root.join("patroni.yml"))
            .current_dir(&node.dir)
            .env("HOME", &node.dir)
            .env("PATRONI_NAME", &node.name)
            .env("PATRONI_RESTAPI_LISTEN", &api)
            .env("PATRONI_RESTAPI_CONNECT_ADDRESS", &api)
            .env("PATRONI_POSTGRESQL_LISTEN", &postgres)
            .env("PATRONI_POSTGRESQL_CONNECT_ADDRESS", &postgres)
            .env("PATRONI_POSTGRESQL_DATA_DIR", node.dir.join("data"))
            .env("PATRONI_POSTGRESQL_PGPASS", node.dir.join("pgpass"))
            .env("PATRONI_POSTGRESQL_BIN_DIR", &bin)
            .env("PATRONI_ETCD3_HOSTS", &etcd)
            .env("PATRONI_SUPERUSER_PASSWORD", PASSWORD)
            .env("PATRONI_REPLICATION_PASSWORD", PASSWORD)
            .env("PATRONI_REWIND_PASSWORD", PASSWORD)
            .stdin(Stdio::null())
            .stdout(log_file(&log))
            .stderr(log_file(&log))
            .spawn()
            .expect("start patroni (Debian: apt-get install patroni)");
        node.patroni = Some(patroni);
    }

    fn wait_for(&mut self, what: &str, ready: impl Fn(&PatroniCluster) -> bool) {
        let started = Instant::now();
        while !ready(self) {
            if started.elapsed() > PATIENCE {
                panic!(
                    "waited {PATIENCE:?} for {what}; the cluster's logs:\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the Patroni cluster's logs:\n{}", self.logs());
        }
        for index in 0..self.nodes.len() {
            if self.nodes[index].patroni.is_some() {
                self.crash(index);
            }
        }
        for child in [&mut self.haproxy, &mut self.etcd] {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The project's `deploy/patroni/` folder.
fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/patroni")
}

/// Starts a one-member etcd in `root`; returns it and its client address.
fn start_etcd(root: &Path) -> (Child, String) {
    let (client_port, peer_port) = (free_port(), free_port());
    let client = format!("127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let etcd = Command::new("etcd")
        .args(["--name", "etcd1", "--data-dir"])
        .arg(root.join("etcd"))
        .args(["--listen-client-urls", &format!("http://{client}")])
        .args(["--advertise-client-urls", &format!("http://{client}")])
        .args(["--listen-peer-urls", &peer])
        .args(["--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("etcd1={peer}")])
        .stdin(Stdio::null())
        .stdout(log_file(&root.join("etcd.log")))
        .stderr(log_file(&root.join("etcd.log")))
        .spawn()
        .expect("start etcd (Debian: apt-get install etcd-server)");
    (etcd, client)
}

/// Starts HAProxy on 127.0.0.1:`port` with the project's `haproxy.cfg`, its two backends
/// the two nodes, passed in the environment as the compose file passes them.
fn start_haproxy(root: &Path, port: u16, nodes: &[Node; 2]) -> Child {
    let mut command = Command::new("haproxy");
    command
        .args(["-db", "-f"])
        .arg(deploy_dir().join("haproxy.cfg"))
        .env("OUTBOX_HAPROXY_LISTEN", format!("127.0.0.1:{port}"));
    for (n, node) in (1..).zip(nodes) {
        command
            .env(
                format!("PATRONI_NODE{n}_POSTGRES"),
                format!("127.0.0.1:{}", node.pg_port),
            )
            .env(
                format!("PATRONI_NODE{n}_API_PORT"),
                node.api_port.to_string(),
            );
    }
    command
        .stdin(Stdio::null())
        .stdout(log_file(&root.join("haproxy.log")))
        .stderr(log_file(&root.join("haproxy.log")))
        .spawn()
        .expect("start haproxy (Debian: apt-get install haproxy)")
}

impl Node {
    /// Node `n`'s directory (handed to `postgres`) and free ports; not started yet.
    fn new(root: &Path, n: usize) -> Node {
        let dir = root.join(format!("node{n}"));
        std::fs::create_dir_all(&dir).expect("make a node's directory");
        hand_to_postgres(&dir);
        Node {
            name: format!("node{n}"),
            dir,
            pg_port: free_port(),
            api_port: free_port(),
            patroni: None,
            starts: 0,
        }
    }
}

fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open a log file")
}

/// One HTTP/1.0 request to `address` (Patroni's REST API, etcd's health): its status and
/// body, or `None` when nothing answered within a second.
fn http(address: &str, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    let address = address.parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_owned();
    Some((status, body))
}
