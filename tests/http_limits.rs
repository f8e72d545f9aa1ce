//! The HTTP endpoints' limits, on the real binary (docs/reliability.md, "The HTTP endpoints"): a
//! client that stops mid-header does not keep the process alive after SIGTERM; thousands of idle
//! connections neither grow the memory nor block the probes; with few file descriptors, clients
//! that keep their connections open do not take those the watches and NATS need; and a stop
//! stays within the grace period + 2 s with the API server blackholed.

mod common;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kube2nats_harness::apiserver::{ApiServer, ApiServerOptions, INITIAL_TOKEN};
use kube2nats_harness::nats::NatsServer;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const PODS_WATCH: &str =
    "[[watches]]\nname = \"pods\"\nresource = \"pods\"\nnamespaces = [\"default\"]\n";
/// The grace period of these tests; a stop must end within it + 2 s.
const GRACE: Duration = Duration::from_secs(1);
const STOP_BOUND: Duration = Duration::from_secs(GRACE.as_secs() + 2);

/// A daemon watching pods in `default` of the API server at `api_url`, publishing to `nats` in
/// core mode, its HTTP endpoints on `port`, with a 1 s grace period.
fn config(sim: &ApiServer, api_url: &str, nats: &NatsServer, port: u16, extra: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), INITIAL_TOKEN);
    // The token file must outlive the process's reads of it.
    std::mem::forget(dir);
    format!(
        "{}\n[nats]\nurl = \"{}\"\n[state]\nenabled = false\n{extra}\n{PODS_WATCH}",
        kube_section(sim, &token)
            .replace(&sim.url(), api_url)
            .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"))
            .replace("grace_period = \"5s\"", "grace_period = \"1s\""),
        nats.url()
    )
}

/// A `GET` on a fresh connection: the status, or why there was none.
fn get(port: u16, path: &str) -> Result<u16, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: kube2nats\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("reading the response: {e}"))?;
    response
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {response:?}"))
}

async fn ready(port: u16) {
    eventually("/readyz answers 200", || get(port, "/readyz") == Ok(200)).await;
}

/// Up to `n` connections to the daemon's HTTP port that never send a byte; fewer if one cannot
/// be made within 5 s (the daemon no longer accepts and its backlog is full: a burst can fill
/// the backlog for a moment, and the kernel retries the connection after 1 s and 3 s).
fn idle_connections(port: u16, n: usize) -> Vec<TcpStream> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    (0..n)
        .map_while(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok())
        .collect()
}

/// Clients that each keep a connection to the daemon's HTTP port open for as long as they run:
/// a request every [`CROWD_PACE`], within the header-read timeout, so the daemon never closes
/// the connection for idleness; a client whose connection is closed (evicted at the cap) opens
/// another. More clients than the daemon has file descriptors: only its connection cap stands
/// between them and the descriptors the watches and NATS need.
struct Crowd {
    clients: tokio::task::JoinSet<()>,
}

/// Time between two requests of one client of a [`Crowd`].
const CROWD_PACE: Duration = Duration::from_secs(2);

impl Crowd {
    fn start(port: u16, clients: usize) -> Crowd {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..clients {
            set.spawn(async move {
                loop {
                    if let Ok(connection) =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    {
                        keep_asking(connection).await;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
        }
        Crowd { clients: set }
    }
}

/// Asks for `/healthz` every [`CROWD_PACE`] on `connection` until the daemon closes it.
async fn keep_asking(mut connection: tokio::net::TcpStream) {
    let mut buf = vec![0; 4096];
    loop {
        let request = b"GET /healthz HTTP/1.1\r\nHost: kube2nats\r\n\r\n";
        if connection.write_all(request).await.is_err() {
            return;
        }
        // The answer (a connection still in the backlog gets it once accepted), or the close.
        match tokio::time::timeout(CROWD_PACE, connection.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => tokio::time::sleep(CROWD_PACE).await,
            Err(_) => {}
        }
    }
}

/// Raises this test process's soft open-files limit to `want` (within the hard limit): the idle
/// connections are file descriptors of the test too.
fn raise_open_files_limit(want: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0, "getrlimit(RLIMIT_NOFILE)");
    assert!(
        limit.rlim_max >= want,
        "this test needs {want} open files; the hard limit is {} (raise it: ulimit -Hn {want})",
        limit.rlim_max
    );
    if limit.rlim_cur < want {
        limit.rlim_cur = want;
        // SAFETY: as above.
        let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
        assert_eq!(set, 0, "setrlimit(RLIMIT_NOFILE, {want})");
    }
}

/// A client that opens a connection, sends half a request header and stops loses the
/// connection to the header-read timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stopped_mid_header_loses_the_connection() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let port = free_port();
    let _process = Process::spawn(&config(&sim, &sim.url(), &nats, port, ""));
    ready(port).await;

    let took = tokio::task::spawn_blocking(move || {
        let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: kube")
            .unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let started = tokio::time::Instant::now();
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest);
        started.elapsed()
    })
    .await
    .unwrap();
    // Counted from the connection's opening, a moment before `started`; a second more for a
    // loaded machine.
    assert!(
        (Duration::from_secs(4)..Duration::from_secs(6)).contains(&took),
        "the half-sent request's connection was closed after {took:?}; the header-read timeout is 5 s"
    );
}

/// A client that sent half a request header and stopped does not keep the process alive after
/// SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stopped_mid_header_does_not_hold_up_the_stop() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let port = free_port();
    let mut process = Process::spawn(&config(&sim, &sim.url(), &nats, port, ""));
    ready(port).await;

    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    process.terminate();
    let (code, took) = process.wait_exit(Duration::from_secs(15));
    println!("stopped {took:?} after SIGTERM with a half-sent request open");
    assert_eq!(code, Some(0), "{}", process.rest());
    assert!(
        took <= STOP_BOUND,
        "stopped {took:?} after SIGTERM with a half-sent request open; promised: grace period + 2 s = {STOP_BOUND:?}"
    );
    drop(slow);
}

/// 4,000 connections that send nothing barely move the resident memory, and `/readyz` still
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_neither_grow_memory_nor_block_the_probes() {
    raise_open_files_limit(8192);
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let port = free_port();
    let process = Process::spawn(&config(&sim, &sim.url(), &nats, port, ""));
    ready(port).await;
    let before = rss_kib(process.pid());

    let idle = tokio::task::spawn_blocking(move || idle_connections(port, 4000))
        .await
        .unwrap();
    assert_eq!(idle.len(), 4000, "connections accepted");
    // Let the daemon accept all of them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib(process.pid());
    let readyz = tokio::task::spawn_blocking(move || get(port, "/readyz"))
        .await
        .unwrap();
    let grown_mib = after.saturating_sub(before) as f64 / 1024.0;
    println!("RSS {before} KiB -> {after} KiB with 4,000 idle connections (+{grown_mib:.1} MiB)");
    assert_eq!(readyz, Ok(200), "/readyz with 4,000 idle connections open");
    assert!(
        grown_mib < 8.0,
        "4,000 idle connections grew the RSS by {grown_mib:.1} MiB ({before} -> {after} KiB)"
    );
    drop(idle);
}

/// With an open-files limit of 512 and more clients than that keeping their connections open, a
/// watch that the API server dropped reconnects, kube2nats reconnects to a restarted NATS, and
/// the events are published; once the clients are gone, the probes answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_leave_descriptors_for_the_watches_and_nats() {
    raise_open_files_limit(4096);
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let mut nats = NatsServer::start().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    let port = free_port();
    // A cap above the limit: the reserve alone lowers it (the default, 64, is below 512 - 256).
    let config = config(&sim, &sim.url(), &nats, port, "")
        .replace("[http]\n", "[http]\nmax_connections = 4096\n");
    let process = Process::spawn_command(&config, |command| {
        // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 512,
                    rlim_max: 512,
                };
                match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        }
    });
    process.line_with(&["http.max_connections lowered"]);
    ready(port).await;

    let mut crowd = Crowd::start(port, 600);
    // Longer than the header-read timeout: the connections are held for good, not for its 5 s.
    tokio::time::sleep(Duration::from_secs(6)).await;
    // The watch must open a new connection to the API server, and its events reach NATS.
    sim.drop_watches();
    sim.create("pods", Some("default"), pod("in-the-crowd"));
    let got = inbox.next().await;
    assert_eq!(got.short(), "ADDED in-the-crowd", "{}", process.rest());
    // kube2nats must open a new connection to NATS.
    nats.restart().await.unwrap();
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let mut inbox = Inbox::subscribe(&nc, "kube.>").await;
    sim.create("pods", Some("default"), pod("after-nats-restart"));
    let got = inbox.next().await;
    assert_eq!(
        got.short(),
        "ADDED after-nats-restart",
        "{}",
        process.rest()
    );
    crowd.clients.shutdown().await;
    for path in ["/readyz", "/healthz", "/metrics"] {
        let status = tokio::task::spawn_blocking(move || get(port, path))
            .await
            .unwrap();
        assert_eq!(
            status,
            Ok(200),
            "{path} after the crowd, with 512 file descriptors"
        );
    }
    drop(process);
}

/// A TCP proxy in front of the API server that can stop forwarding without closing anything:
/// requests and responses in flight, and new connections, hang, as behind a dead route.
struct Blackhole {
    addr: SocketAddr,
    dead: Arc<AtomicBool>,
}

impl Blackhole {
    async fn start(upstream: SocketAddr) -> Blackhole {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let dead = Arc::new(AtomicBool::new(false));
        let flag = dead.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let dead = flag.clone();
                tokio::spawn(async move {
                    if dead.load(Ordering::SeqCst) {
                        return std::future::pending::<()>().await;
                    }
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        forward(client_read, server_write, dead.clone()),
                        forward(server_read, client_write, dead),
                    );
                });
            }
        });
        Blackhole { addr, dead }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn cut(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }
}

/// Copies until either side closes; once `dead`, holds both sides open and forwards nothing.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    dead: Arc<AtomicBool>,
) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if dead.load(Ordering::SeqCst) {
            let _keep = (from, to);
            return std::future::pending().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// With the API server blackholed (connections open, nothing answered), a leader with a 1 s
/// grace period and client-go's default renew deadline of 10 s stops within grace + 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_api_server_does_not_hold_up_the_stop() {
    let sim = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let proxy = Blackhole::start(sim.addr()).await;
    let nats = NatsServer::start().await.unwrap();
    let port = free_port();
    let election = "[leader_election]\nenabled = true\nnamespace = \"default\"\nlease_duration = \"15s\"\nrenew_deadline = \"10s\"\nretry_period = \"2s\"\n";
    let config = config(&sim, &proxy.url(), &nats, port, election);
    let mut process = Process::spawn_env(&config, &[], &[("POD_NAME", "kube2nats-0")]);
    tokio::task::block_in_place(|| process.line_with(&["acquired the Lease"]));
    ready(port).await;

    proxy.cut();
    // The watch and the next renewal now hang on the proxy.
    tokio::time::sleep(Duration::from_millis(500)).await;
    process.terminate();
    let (code, took) = process.wait_exit(Duration::from_secs(20));
    println!("stopped {took:?} after SIGTERM with the API server blackholed");
    assert_eq!(code, Some(0), "a stop by SIGTERM\n{}", process.rest());
    assert!(
        took <= STOP_BOUND,
        "stopped {took:?} after SIGTERM with the API server blackholed; promised: grace period + 2 s = {STOP_BOUND:?}"
    );
}
