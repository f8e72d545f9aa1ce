//! Whose state a key is: the cluster and the kube2nats instance that wrote it. Every key of the
//! bucket starts with `{cluster}.{instance}.`, so two deployments sharing a bucket (two sidecars
//! in two namespaces, two clusters with the default bucket) never read, overwrite or remove each
//! other's state (see docs/durable-state.md).
//!
//! - The cluster is the `kube-system` Namespace's uid — what kubectl-style tools use as a cluster
//!   id, fixed for the cluster's life — or `state.cluster_id` when configured (then the API server
//!   is not asked). Reading it needs `get` on `namespaces/kube-system`; without that permission
//!   kube2nats stops with an error naming the permission and the key.
//! - The instance is `state.instance` when configured; else, with leader election, the Lease's
//!   namespace and name (`{namespace}_{name}`, dots as `_`); else the pod's namespace
//!   (`POD_NAMESPACE`, or the in-cluster service account's namespace file); else `_`.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::is_key_token as is_token;
use crate::config::Config;
use crate::kube::client::ApiClient;
use crate::kube::error::ApiError;
use crate::telemetry::logging::human;
use tokio_util::sync::CancellationToken;

/// The Namespace whose uid names the cluster.
const CLUSTER_ID_PATH: &str = "/api/v1/namespaces/kube-system";

/// The owner of a set of keys; its [`prefix`](Self::prefix) starts every key it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) cluster: String,
    pub(crate) instance: String,
}

impl Owner {
    /// `{cluster}.{instance}`: two tokens of the key, neither holding a dot.
    pub(crate) fn prefix(&self) -> String {
        format!("{}.{}", self.cluster, self.instance)
    }
}

/// Why the owner could not be found.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OwnerError {
    #[error("state: cannot read the cluster id (GET {CLUSTER_ID_PATH}: {0}); grant `get` on the `namespaces` resource named `kube-system` (a ClusterRole rule with resourceNames: [kube-system]) or set state.cluster_id")]
    ClusterId(ApiError),
    #[error("state: the kube-system Namespace has no usable uid ({0:?}); set state.cluster_id")]
    BadUid(String),
}

/// The instance part of the owner, from the configuration, the Lease (namespace, name) when
/// leader election is on, and the environment (`env` reads a variable, `read` a file).
pub(crate) fn instance(
    config: &Config,
    lease: Option<(&str, &str)>,
    env: impl Fn(&str) -> Option<String>,
    read: impl Fn(&str) -> Option<String>,
) -> String {
    if let Some(instance) = &config.state.instance {
        return instance.clone();
    }
    if let Some((namespace, name)) = lease {
        return format!("{namespace}_{}", name.replace('.', "_"));
    }
    crate::leader::pod_namespace(config, env, read).unwrap_or_else(|_| "_".to_owned())
}

/// The cluster id: `state.cluster_id`, else the `kube-system` Namespace's uid, retrying while
/// the API server does not answer. `None` if shutdown came first.
pub(crate) async fn cluster_id(
    configured: Option<&str>,
    api: &ApiClient,
    shutdown: &CancellationToken,
) -> Result<Option<String>, OwnerError> {
    if let Some(id) = configured {
        return Ok(Some(id.to_owned()));
    }
    let mut backoff = Backoff::new(crate::backoff::NATS_SETUP_RETRY);
    loop {
        let answer = tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            answer = api.get(CLUSTER_ID_PATH) => answer,
        };
        let error = match answer {
            Ok(body) => return uid_of(&body).map(Some),
            Err(e @ (ApiError::Forbidden { .. } | ApiError::NotFound { .. })) => {
                return Err(OwnerError::ClusterId(e))
            }
            Err(e) => e,
        };
        let delay: Duration = backoff.next_delay();
        tracing::warn!(error = %error, retry_in = human(delay), "cannot read the cluster id (the kube-system Namespace's uid) yet; retrying");
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// The uid of a Namespace, checked to be one key token (`[A-Za-z0-9_-]+`).
fn uid_of(body: &[u8]) -> Result<String, OwnerError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| OwnerError::BadUid(format!("not JSON: {e}")))?;
    let uid = value["metadata"]["uid"].as_str().unwrap_or_default();
    if is_token(uid) {
        Ok(uid.to_owned())
    } else {
        Err(OwnerError::BadUid(uid.chars().take(64).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_uid_is_the_cluster_id() {
        let body = br#"{"metadata":{"name":"kube-system","uid":"4f1c-9a"}}"#;
        assert_eq!(uid_of(body).unwrap(), "4f1c-9a");
        assert!(uid_of(br#"{"metadata":{"uid":"a.b"}}"#).is_err());
        assert!(uid_of(br#"{"metadata":{}}"#).is_err());
        assert!(uid_of(b"<html>").is_err());
    }

    #[test]
    fn instance_is_configured_then_lease_then_pod_namespace() {
        let mut config = crate::config::testing::load_str(crate::config::testing::MINIMAL).unwrap();
        let env = |k: &str| (k == "POD_NAMESPACE").then(|| "team-a".to_owned());
        let none = |_: &str| None;
        assert_eq!(instance(&config, None, none, none), "_");
        assert_eq!(instance(&config, None, env, none), "team-a");
        assert_eq!(
            instance(&config, Some(("ops", "k2n.prod")), env, none),
            "ops_k2n_prod"
        );
        config.state.instance = Some("east".into());
        assert_eq!(instance(&config, Some(("ops", "k2n")), env, none), "east");
    }
}
