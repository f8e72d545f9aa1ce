//! An informer of one Kubernetes resource, read from kube2nats' object mirror (a NATS KV bucket).
//!
//! ```text
//! kube2nats-informer NATS_URL BUCKET KEY_FILTER    e.g. nats://127.0.0.1:4222 kube-objects 'core.v1.pods.>'
//! ```
//!
//! It builds a local cache of the objects under KEY_FILTER from the bucket's current values,
//! prints `synced N objects` once they are all in, then one line per change (`ADDED|MODIFIED|
//! DELETED namespace/name resourceVersion`). A KV delete, a purge and a marker the server places
//! when a delete's TTL runs out (header `Nats-Marker-Reason`) are all deletions. After a
//! reconnect it watches the bucket afresh and prints the difference to its cache: a delete marker
//! whose TTL ran out while it was away would otherwise hide a deletion. On SIGTERM it prints its
//! cache as sorted JSON lines `{"namespace","name","resourceVersion"}` and exits 0.
//!
//! The watch is the one a KV client makes (an ordered push consumer on the bucket's stream,
//! delivering the last message of each key, then every new one), written out here because
//! `async_nats::jetstream::kv::Watch` does not say when an empty initial state is complete: the
//! consumer's `num_pending` at creation does. The key contract is in docs/subscribers.md.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::push::OrderedConfig, consumer::DeliverPolicy};
use futures_util::StreamExt;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// `(namespace, name, resourceVersion)` of a cached object.
type Cached = (String, String, String);
/// The cache: KV key -> the object's identity and version.
type Cache = BTreeMap<String, Cached>;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, bucket, filter] = args.as_slice() else {
        eprintln!("usage: kube2nats-informer NATS_URL BUCKET KEY_FILTER");
        std::process::exit(2);
    };
    if let Err(e) = run(url, bucket, filter).await {
        eprintln!("informer: {e}");
        std::process::exit(1);
    }
}

async fn run(url: &str, bucket: &str, filter: &str) -> Result<(), async_nats::Error> {
    let mut term = signal(SignalKind::terminate())?;
    // Counts reconnections: a change tells the watch loop to start afresh.
    let (reconnected_tx, mut reconnected) = watch::channel(0u64);
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .event_callback(move |event| {
            let tx = reconnected_tx.clone();
            async move {
                if matches!(event, async_nats::Event::Connected) {
                    tx.send_modify(|n| *n += 1);
                }
            }
        })
        .connect(url)
        .await?;
    let js = jetstream::new(client);
    let prefix = format!("$KV.{bucket}.");
    let mut cache = Cache::new();
    let mut synced = false;
    loop {
        reconnected.borrow_and_update();
        let (mut messages, fresh) = match initial(&js, bucket, &prefix, filter).await {
            Ok(started) => started,
            Err(e) => {
                // JetStream not ready yet after a restart, a timeout: try again.
                eprintln!("watch: {e}");
                tokio::select! {
                    _ = term.recv() => break,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
        };
        if synced {
            print_difference(&cache, &fresh);
        } else {
            println!("synced {} objects", fresh.len());
            synced = true;
        }
        cache = fresh;
        loop {
            tokio::select! {
                _ = term.recv() => {
                    dump(&cache);
                    return Ok(());
                }
                _ = reconnected.changed() => break,
                next = messages.next() => match next {
                    Some(Ok(msg)) => follow(&mut cache, &prefix, &msg),
                    Some(Err(e)) => { eprintln!("watch: {e}"); break; }
                    None => break,
                },
            }
        }
    }
    dump(&cache);
    Ok(())
}

/// The messages of a fresh watch, past its initial values, and the state those values make.
async fn initial(
    js: &jetstream::Context,
    bucket: &str,
    prefix: &str,
    filter: &str,
) -> Result<(jetstream::consumer::push::Ordered, Cache), async_nats::Error> {
    let stream = js.get_stream(format!("KV_{bucket}")).await?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            deliver_subject: js.client().new_inbox(),
            filter_subject: format!("{prefix}{filter}"),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..Default::default()
        })
        .await?;
    let mut pending = consumer.cached_info().num_pending;
    let mut messages = consumer.messages().await?;
    let mut state = Cache::new();
    while pending > 0 {
        // A bound per message: a watch begun as NATS goes away must not hang.
        let msg = match tokio::time::timeout(Duration::from_secs(5), messages.next()).await {
            Ok(Some(msg)) => msg?,
            Ok(None) => return Err("the watch ended during its initial values".into()),
            Err(_) => return Err("no initial value within 5s".into()),
        };
        pending = msg.info()?.pending;
        apply(&mut state, prefix, &msg);
    }
    Ok((messages, state))
}

/// Applies one message of the watch to `cache`, printing the change.
fn follow(cache: &mut Cache, prefix: &str, msg: &jetstream::Message) {
    let key = msg.subject.strip_prefix(prefix).unwrap_or(&msg.subject);
    let before = cache.get(key).cloned();
    apply(cache, prefix, msg);
    match (before, cache.get(key)) {
        (Some((ns, name, rv)), None) => println!("DELETED {ns}/{name} {rv}"),
        (None, Some((ns, name, rv))) => println!("ADDED {ns}/{name} {rv}"),
        (Some(old), Some(new)) if &old != new => {
            println!("MODIFIED {}/{} {}", new.0, new.1, new.2)
        }
        _ => {}
    }
}

fn apply(cache: &mut Cache, prefix: &str, msg: &jetstream::Message) {
    let key = msg.subject.strip_prefix(prefix).unwrap_or(&msg.subject);
    if is_deletion(msg) {
        cache.remove(key);
    } else if let Some((ns, name)) = object_id(key) {
        cache.insert(key.to_owned(), (ns, name, resource_version(&msg.payload)));
    }
}

/// A KV delete or purge (header `KV-Operation`), or a marker the server placed
/// (`Nats-Marker-Reason`). A value-less message can only be a marker, since every object is a
/// JSON document.
fn is_deletion(msg: &jetstream::Message) -> bool {
    let header = |name: &str| msg.headers.as_ref().and_then(|h| h.get(name));
    matches!(
        header("KV-Operation").map(|v| v.as_str()),
        Some("DEL" | "PURGE")
    ) || header("Nats-Marker-Reason").is_some()
        || msg.payload.is_empty()
}

/// The object's `metadata.resourceVersion`, or `""` if the value is not a JSON object.
fn resource_version(value: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(value)
        .ok()
        .and_then(|v| v["metadata"]["resourceVersion"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `(namespace, name)` from a key's last two tokens; namespace `""` for a cluster-scoped object
/// (the token `_`).
fn object_id(key: &str) -> Option<(String, String)> {
    let mut tokens = key.rsplit('.');
    let name = tokens.next()?;
    let namespace = tokens.next()?;
    let namespace = if namespace == "_" {
        String::new()
    } else {
        unescape_token(namespace)
    };
    Some((namespace, unescape_token(name)))
}

/// The inverse of the key contract's escaping: `_` is `.`, `=XX` a byte, `=` alone `""`.
fn unescape_token(token: &str) -> String {
    if token == "=" {
        return String::new();
    }
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'_', _) => {
                out.push(b'.');
                i += 1;
            }
            (b'=', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn print_difference(old: &Cache, new: &Cache) {
    for (key, (ns, name, rv)) in old {
        if !new.contains_key(key) {
            println!("DELETED {ns}/{name} {rv}");
        }
    }
    for (key, object) in new {
        match old.get(key) {
            None => println!("ADDED {}/{} {}", object.0, object.1, object.2),
            Some(before) if before != object => {
                println!("MODIFIED {}/{} {}", object.0, object.1, object.2)
            }
            _ => {}
        }
    }
}

/// The cache as sorted JSON lines.
fn dump(cache: &Cache) {
    let mut objects: Vec<&Cached> = cache.values().collect();
    objects.sort();
    for (namespace, name, rv) in objects {
        println!(
            "{}",
            serde_json::json!({"namespace": namespace, "name": name, "resourceVersion": rv})
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_unescape_as_the_contract_examples_say() {
        for (token, text) in [
            ("nginx", "nginx"),
            ("kube-root-ca_crt", "kube-root-ca.crt"),
            ("system=3Anode=3Aw1", "system:node:w1"),
            ("my=5Fname", "my_name"),
            ("=C3=A9", "é"),
            ("=", ""),
        ] {
            assert_eq!(unescape_token(token), text, "{token}");
        }
        assert_eq!(
            object_id("rbac_authorization_k8s_io.v1.clusterroles._.system=3Acontroller=3Afoo_bar"),
            Some((String::new(), "system:controller:foo.bar".to_owned()))
        );
        assert_eq!(
            object_id("east.core.v1.pods.shop.web-0"),
            Some(("shop".to_owned(), "web-0".to_owned()))
        );
    }
}
