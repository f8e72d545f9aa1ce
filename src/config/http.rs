//! `[http]`: the listener of `/metrics`, `/healthz` and `/readyz` and its connection cap; the
//! section's raw form, defaults, check and typed value together.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use super::checker::Checker;

/// `http.listen`: all interfaces, so the kubelet and Prometheus can reach the pod.
pub(crate) const DEFAULT_HTTP_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 9090));
/// `http.max_connections`: the kubelet's probes and a few Prometheus scrapers need a handful; the
/// rest of the cap is room for clients that come and go.
pub(crate) const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 64;

#[derive(Debug, Clone)]
pub(crate) struct HttpConfig {
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub(crate) listen: SocketAddr,
    /// Most connections open at once; at the cap the idle one open longest is closed for a new
    /// one. Lowered at start to keep file descriptors free for the watches and NATS.
    pub(crate) max_connections: usize,
}

/// `[http]`
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawHttp {
    /// Socket address of `/metrics`, `/healthz`, `/readyz`. Default [`DEFAULT_HTTP_LISTEN`].
    pub(crate) listen: String,
    /// 1 or more. Default [`DEFAULT_HTTP_MAX_CONNECTIONS`].
    pub(crate) max_connections: usize,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            listen: DEFAULT_HTTP_LISTEN.to_string(),
            max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
        }
    }
}

pub(super) fn check_http(c: &mut Checker, http: &RawHttp) -> Option<HttpConfig> {
    let listen = match http.listen.trim().parse() {
        Ok(a) => Some(a),
        Err(e) => c.fail(
            "http.listen",
            format!(
                "invalid socket address {:?}: {e} (expected ip:port, e.g. 0.0.0.0:9090)",
                http.listen
            ),
        ),
    };
    let max_connections = c.range("http.max_connections", http.max_connections, 1, None);
    Some(HttpConfig {
        listen: listen?,
        max_connections: max_connections?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;

    #[test]
    fn max_connections() {
        assert_eq!(load_str(MINIMAL).unwrap().http.max_connections, 64);
        let c = load_str(&format!("[http]\nmax_connections = 8\n{MINIMAL}")).unwrap();
        assert_eq!(c.http.max_connections, 8);
        assert_error(
            "[http]\nmax_connections = 0",
            "http.max_connections: 0 is out of range",
        );
    }
}
