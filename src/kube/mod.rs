//! Access to the Kubernetes API: credentials, the HTTP client, discovery, and decoding of list and
//! watch responses. Everything here is about talking to the API server; what a list or a watch
//! *means* for kube2nats lives in [`crate::watcher`].

pub(crate) mod client;
pub(crate) mod credentials;
pub(crate) mod decode;
pub(crate) mod discovery;
pub(crate) mod error;
pub(crate) mod exec;
pub(crate) mod framing;
pub(crate) mod kubeconfig;
pub(crate) mod list;
pub(crate) mod metadata;
pub(crate) mod status;
pub(crate) mod stream;
#[cfg(test)]
pub(crate) mod testing;

pub(crate) use client::ApiClient;
pub(crate) use error::ApiError;
