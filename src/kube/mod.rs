//! Access to the Kubernetes API: credentials, the HTTP client, discovery, and decoding of list and
//! watch responses. Everything here is about talking to the API server; what a list or a watch
//! *means* for kube2nats lives in [`crate::watcher`].

pub mod client;
pub mod credentials;
pub mod decode;
pub mod discovery;
pub mod error;
pub mod exec;
pub mod framing;
pub mod kubeconfig;
pub mod list;
pub mod metadata;
pub mod status;
pub mod stream;

pub use client::ApiClient;
pub use error::ApiError;
