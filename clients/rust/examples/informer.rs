//! An informer of one resource of the core group, read from kube2nats' mirror with
//! `kube2nats_client::watcher` and kept in a kube-runtime `reflector` store.
//!
//! ```text
//! cargo run -p kube2nats-client --example informer -- NATS_URL BUCKET RESOURCE
//! # e.g. nats://127.0.0.1:4222 kube-objects pods
//! ```
//!
//! It prints `synced N objects` once the store holds the initial objects, then one line per
//! change, `ADDED|MODIFIED|DELETED namespace/name resourceVersion` (after a reconnect, the
//! differences the fresh start showed), and on SIGTERM the store as sorted JSON lines
//! `{"namespace","name","resourceVersion"}`, exiting 0. Any version of the resource, all
//! namespaces; the objects are `DynamicObject`s, so any resource will do.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher::Event;
use kube2nats_client::{watcher_with, Config};
use tokio::signal::unix::{signal, SignalKind};

/// `(namespace, name)` → resourceVersion.
type Store = BTreeMap<(String, String), String>;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, bucket, resource] = args.as_slice() else {
        eprintln!("usage: informer NATS_URL BUCKET RESOURCE");
        std::process::exit(2);
    };
    if let Err(e) = run(url, bucket, resource).await {
        eprintln!("informer: {e}");
        std::process::exit(1);
    }
}

async fn run(url: &str, bucket: &str, plural: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut term = signal(SignalKind::terminate())?;
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(url)
        .await?;
    let resource = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: String::new(),
        plural: plural.into(),
    };
    let config = Config::default().bucket(bucket).any_version();
    let mut events = watcher_with::<DynamicObject>(client, config, resource).boxed();
    let mut store = Store::new();
    // The objects of a start, until its InitDone.
    let mut relist: Option<Store> = None;
    let mut synced = false;
    loop {
        let event = tokio::select! {
            _ = term.recv() => break,
            event = events.next() => event,
        };
        match event {
            None => break,
            Some(Err(e)) => eprintln!("watch: {e}"),
            Some(Ok(Event::Init)) => relist = Some(Store::new()),
            Some(Ok(Event::InitApply(object))) => {
                let (id, rv) = identity(&object);
                relist.get_or_insert_default().insert(id, rv);
            }
            Some(Ok(Event::InitDone)) => {
                let fresh = relist.take().unwrap_or_default();
                if synced {
                    print_difference(&store, &fresh);
                } else {
                    println!("synced {} objects", fresh.len());
                    synced = true;
                }
                store = fresh;
            }
            Some(Ok(Event::Apply(object))) => {
                let (id, rv) = identity(&object);
                let verb = if store.contains_key(&id) {
                    "MODIFIED"
                } else {
                    "ADDED"
                };
                println!("{verb} {}/{} {rv}", id.0, id.1);
                store.insert(id, rv);
            }
            Some(Ok(Event::Delete(object))) => {
                let (id, rv) = identity(&object);
                println!("DELETED {}/{} {rv}", id.0, id.1);
                store.remove(&id);
            }
        }
    }
    for ((namespace, name), rv) in &store {
        println!(
            "{}",
            serde_json::json!({"namespace": namespace, "name": name, "resourceVersion": rv})
        );
    }
    Ok(())
}

fn identity(object: &DynamicObject) -> ((String, String), String) {
    let m = &object.metadata;
    (
        (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        ),
        m.resource_version.clone().unwrap_or_default(),
    )
}

fn print_difference(old: &Store, new: &Store) {
    for ((namespace, name), rv) in old {
        if !new.contains_key(&(namespace.clone(), name.clone())) {
            println!("DELETED {namespace}/{name} {rv}");
        }
    }
    for (id, rv) in new {
        match old.get(id) {
            None => println!("ADDED {}/{} {rv}", id.0, id.1),
            Some(before) if before != rv => println!("MODIFIED {}/{} {rv}", id.0, id.1),
            _ => {}
        }
    }
}
