//! The NATS connection: servers, authentication, TLS, reconnecting forever.
//!
//! kube2nats starts even when NATS is down: the client connects in the background, keeps
//! reconnecting with backoff, and reports its state through `kube2nats_nats_connected`, which
//! readiness follows.

use std::time::Duration;

use async_nats::{jetstream, ConnectOptions, Event, ServerAddr};
use prometheus::IntGauge;

use super::outbox::Nats;
use crate::config::{Discard, NatsAuth, NatsConfig, NatsMode, Retention, Storage, StreamConfig};

/// The longest pause between two reconnection attempts.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);
/// Window of unacknowledged JetStream publishes of the whole connection; each watch keeps its own,
/// smaller window (`max_ack_inflight`), so this only has to exceed their sum.
const CONNECTION_ACK_WINDOW: usize = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("invalid NATS server address {addr:?}: {source}")]
    Address {
        addr: String,
        source: std::io::Error,
    },
    #[error("reading NATS {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("connecting to NATS: {0}")]
    Connect(#[from] async_nats::ConnectError),
}

/// Connects (in the background, retrying forever) and returns the publishing handle for the
/// configured mode.
pub(crate) async fn connect(cfg: &NatsConfig, connected: IntGauge) -> Result<Nats, ConnectError> {
    let (servers, url_credentials) = split_credentials(&cfg.servers)?;
    let mut options = ConnectOptions::new()
        .name(&cfg.name)
        .connection_timeout(cfg.connect_timeout)
        .retry_on_initial_connect()
        .client_capacity(cfg.queue_capacity)
        .max_reconnects(None)
        .reconnect_delay_callback(|attempts| {
            let exp = Duration::from_millis(100).saturating_mul(1u32 << attempts.min(10));
            exp.min(MAX_RECONNECT_DELAY)
        })
        .event_callback(move |event| {
            let connected = connected.clone();
            async move { on_event(&event, &connected) }
        });
    options = match &cfg.auth {
        NatsAuth::None => match url_credentials {
            Some(UrlCredentials::Token(token)) => options.token(token),
            Some(UrlCredentials::UserPassword { user, password }) => {
                options.user_and_password(user, password)
            }
            None => options,
        },
        NatsAuth::Token(token) => options.token(token.clone()),
        NatsAuth::UserPassword { user, password } => {
            options.user_and_password(user.clone(), password.clone())
        }
        NatsAuth::NKeySeedFile(path) => {
            let seed = std::fs::read_to_string(path).map_err(|source| ConnectError::Read {
                what: "NKey seed file",
                path: path.clone(),
                source,
            })?;
            options.nkey(seed.trim().to_owned())
        }
        NatsAuth::CredentialsFile(path) => {
            options
                .credentials_file(path)
                .await
                .map_err(|source| ConnectError::Read {
                    what: "credentials file",
                    path: path.clone(),
                    source,
                })?
        }
    };
    if let Some(tls) = &cfg.tls {
        options = options.require_tls(true);
        if let Some(ca) = &tls.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &tls.client_cert {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
    }
    let client = options.connect(servers).await?;
    Ok(match &cfg.mode {
        NatsMode::Core => Nats::Core(client),
        NatsMode::JetStream(js) => {
            let context = jetstream::ContextBuilder::new()
                .api_prefix(cfg.jetstream_api_prefix())
                .timeout(js.ack_timeout)
                .max_ack_inflight(CONNECTION_ACK_WINDOW)
                .build(client.clone());
            Nats::JetStream {
                client,
                context: Box::new(context),
            }
        }
    })
}

/// Credentials written into a server URL (`nats://user:password@host`, `nats://token@host`).
enum UrlCredentials {
    Token(String),
    UserPassword { user: String, password: String },
}

/// Parses the server URLs, taking out the credentials written into them, which are then passed
/// to the client as options instead: the client logs its server addresses (with their
/// passwords) at debug level. The first URL holding credentials gives them, as one set of
/// options applies to every server.
fn split_credentials(
    servers: &[String],
) -> Result<(Vec<ServerAddr>, Option<UrlCredentials>), ConnectError> {
    let mut credentials = None;
    let mut addrs = Vec::with_capacity(servers.len());
    for server in servers {
        let address_error = |source| ConnectError::Address {
            addr: crate::redact::url(server),
            source,
        };
        let mut url = server
            .parse::<ServerAddr>()
            .map_err(address_error)?
            .into_inner();
        let (user, password) = (url.username().to_owned(), url.password().map(str::to_owned));
        if !user.is_empty() || password.is_some() {
            credentials.get_or_insert(match password {
                Some(password) => UrlCredentials::UserPassword { user, password },
                None => UrlCredentials::Token(user),
            });
            let _ = url.set_username("");
            let _ = url.set_password(None);
        }
        addrs.push(ServerAddr::from_url(url).map_err(address_error)?);
    }
    Ok((addrs, credentials))
}

fn on_event(event: &Event, connected: &IntGauge) {
    match event {
        Event::Connected => {
            connected.set(1);
            tracing::info!("connected to NATS");
        }
        Event::Disconnected => {
            connected.set(0);
            tracing::warn!("disconnected from NATS; reconnecting");
        }
        // Draining is how kube2nats itself closes the connection at shutdown.
        Event::Draining => tracing::info!("draining the NATS connection"),
        Event::Closed => {
            connected.set(0);
            tracing::info!("NATS connection closed");
        }
        other => tracing::warn!(event = %other, "NATS connection event"),
    }
}

/// A limit as JetStream spells it: -1 for unlimited.
fn limit(value: Option<u64>) -> i64 {
    value.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// Creates the configured stream, or checks that the existing one captures its subjects. Retries
/// until NATS answers, so it may run while NATS is still down.
pub(crate) async fn ensure_stream(
    context: &jetstream::Context,
    stream: &StreamConfig,
) -> Result<(), jetstream::context::CreateStreamError> {
    let config = jetstream::stream::Config {
        name: stream.name.clone(),
        subjects: stream.subjects.clone(),
        retention: match stream.retention {
            Retention::Limits => jetstream::stream::RetentionPolicy::Limits,
            Retention::Interest => jetstream::stream::RetentionPolicy::Interest,
            Retention::WorkQueue => jetstream::stream::RetentionPolicy::WorkQueue,
        },
        storage: match stream.storage {
            Storage::File => jetstream::stream::StorageType::File,
            Storage::Memory => jetstream::stream::StorageType::Memory,
        },
        duplicate_window: stream.duplicate_window,
        max_age: stream.max_age,
        max_bytes: limit(stream.max_bytes),
        max_messages_per_subject: limit(stream.max_msgs_per_subject),
        num_replicas: stream.replicas,
        discard: match stream.discard {
            Discard::Old => jetstream::stream::DiscardPolicy::Old,
            Discard::New => jetstream::stream::DiscardPolicy::New,
        },
        ..Default::default()
    };
    let info = context.get_or_create_stream(config).await?;
    let existing = &info.cached_info().config;
    let missing: Vec<&String> = stream
        .subjects
        .iter()
        .filter(|s| !existing.subjects.contains(s))
        .collect();
    if missing.is_empty() {
        tracing::info!(stream = %stream.name, "JetStream stream ready");
    } else {
        tracing::warn!(stream = %stream.name, ?missing, "existing JetStream stream does not capture all configured subjects; kube2nats does not change existing streams");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Credentials leave the URLs (which the client logs) and become options; the first URL
    /// holding them wins; a URL without them is unchanged.
    #[test]
    fn credentials_are_taken_out_of_server_urls() {
        let servers = [
            "nats://kube:s3cr3t@a:4222".to_owned(),
            "tls://tok3n@b:4223".to_owned(),
            "nats://c:4224".to_owned(),
        ];
        let (addrs, credentials) = split_credentials(&servers).unwrap();
        let shown = format!("{addrs:?}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("tok3n") && !shown.contains("kube"),
            "{shown}"
        );
        assert_eq!(addrs.len(), 3);
        assert!(matches!(
            credentials,
            Some(UrlCredentials::UserPassword { user, password }) if user == "kube" && password == "s3cr3t"
        ));
        let (_, token) = split_credentials(&servers[1..]).unwrap();
        assert!(matches!(token, Some(UrlCredentials::Token(t)) if t == "tok3n"));
        let (_, none) = split_credentials(&servers[2..]).unwrap();
        assert!(none.is_none());
    }
}
