//! A loopback TCP proxy a test can close: one client's connection to a server (a subscriber's to
//! NATS, say) cut off while everything else keeps talking to the server directly.
//!
//! [`Gate::close`] drops every connection through the gate and refuses new ones (accepted, then
//! dropped at once, as a firewall's reset looks to a client); [`Gate::open`] lets them through
//! again. The client sees a disconnection and reconnects on its own once the gate is open.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A proxy from a free loopback port to `upstream`. Dropping it stops it.
pub struct Gate {
    addr: SocketAddr,
    /// `true` while open; every connection's task watches it.
    open: Arc<watch::Sender<bool>>,
    accept: JoinHandle<()>,
}

impl Gate {
    /// Starts an open gate in front of `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Gate> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let open = Arc::new(watch::Sender::new(true));
        let accept = tokio::spawn(accept_loop(listener, upstream, open.clone()));
        Ok(Gate { addr, open, accept })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every connection through the gate, and every new one until [`Gate::open`].
    pub fn close(&self) {
        self.open.send_replace(false);
    }

    /// Lets connections through again.
    pub fn open(&self) {
        self.open.send_replace(true);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.close();
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, open: Arc<watch::Sender<bool>>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if !*open.borrow() {
            drop(client);
            continue;
        }
        let mut gate = open.subscribe();
        tokio::spawn(async move {
            let Ok(mut server) = TcpStream::connect(upstream).await else {
                return;
            };
            let mut client = client;
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = gate.wait_for(|open| !*open) => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(addr: SocketAddr) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await?;
        Ok(buf.to_vec())
    }

    #[tokio::test]
    async fn passes_while_open_and_cuts_while_closed() {
        let gate = Gate::start(echo_server().await).await.expect("gate");
        assert_eq!(round_trip(gate.addr()).await.expect("open"), b"ping");
        let mut held = TcpStream::connect(gate.addr()).await.expect("connects");
        held.write_all(b"ping").await.expect("writes");
        let mut buf = [0u8; 4];
        held.read_exact(&mut buf).await.expect("echo");
        gate.close();
        // The held connection is dropped: its next read ends.
        let n = held.read(&mut buf).await.unwrap_or(0);
        assert_eq!(n, 0);
        assert!(round_trip(gate.addr()).await.is_err());
        gate.open();
        assert_eq!(round_trip(gate.addr()).await.expect("open again"), b"ping");
    }
}
