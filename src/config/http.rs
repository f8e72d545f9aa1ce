//! `[http]`: the listener of `/metrics`, `/healthz` and `/readyz` and its connection cap.

use super::checker::Checker;
use super::raw::RawHttp;
use super::values::HttpConfig;

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
