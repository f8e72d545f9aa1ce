//! A fixed amount of decode work for instruction counting: `decode_line` on the bench's pod
//! `MODIFIED` line, `decode_object_meta` on its object, `decode_line` on small and `DELETED`
//! lines (so a change to the scan is seen not to slow those), each a given number of times. criterion's timings move with a shared machine; callgrind's instruction counts do
//! not, so two versions of the scan compare exactly:
//!
//! ```sh
//! cargo build --profile profiling --example decode_callgrind
//! valgrind --tool=callgrind target/profiling/examples/decode_callgrind decode_line 10000
//! ```

use bytes::Bytes;
use kube2nats::facade::{decode_line, decode_object_meta, WatchLine};

#[path = "loadtest/pods.rs"]
#[allow(dead_code)]
mod pods;

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_else(|| "decode_line".into());
    let times: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let mut line = br#"{"type":"MODIFIED","object":"#.to_vec();
    pods::PodTemplate::new(7).write(&pods::uuid(7), 48_213_377, &mut line);
    line.push(b'}');
    let line = Bytes::from(line);
    let object = line.slice(br#"{"type":"MODIFIED","object":"#.len()..line.len() - 1);
    let other_line = |name: &str| -> Bytes {
        match name {
            "lease_line" => Bytes::from_static(LEASE_LINE.as_bytes()),
            "configmap_line" => Bytes::from_static(CONFIGMAP_LINE.as_bytes()),
            // What the API server sends when the pod above is deleted: its last state, with the
            // deletion fields in its metadata.
            _ => {
                let deleted = String::from_utf8_lossy(&line)
                    .replacen(r#""type":"MODIFIED""#, r#""type":"DELETED""#, 1)
                    .replacen(
                        r#""creationTimestamp""#,
                        r#""deletionTimestamp":"2026-11-25T09:12:44Z","deletionGracePeriodSeconds":0,"creationTimestamp""#,
                        1,
                    );
                Bytes::from(deleted)
            }
        }
    };
    let small = other_line(&what);
    for _ in 0..times {
        match what.as_str() {
            "decode_line" => {
                let decoded = decode_line(std::hint::black_box(&line));
                assert!(matches!(decoded, Ok(WatchLine::Change(_))));
            }
            "lease_line" | "configmap_line" | "deleted_line" => {
                let decoded = decode_line(std::hint::black_box(&small));
                assert!(matches!(decoded, Ok(WatchLine::Change(_))));
            }
            "decode_object_meta" => {
                let decoded = decode_object_meta(std::hint::black_box(&object));
                assert!(decoded.is_ok());
            }
            other => panic!(
                "unknown workload {other:?}: decode_line, decode_object_meta, lease_line, \
                 configmap_line or deleted_line"
            ),
        }
    }
}

/// A leader-election renewal, the most frequent small line on a real cluster.
const LEASE_LINE: &str = r#"{"type":"MODIFIED","object":{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"kube-controller-manager","namespace":"kube-system","uid":"3c5b2f7e-8d1a-4e62-9f0b-6a7d2c4e1b90","resourceVersion":"48213377","creationTimestamp":"2026-11-01T06:00:12Z"},"spec":{"holderIdentity":"control-plane-1_6f1d2a9c-4b3e-4f8a-a1c2-7e5d9b0f3a61","leaseDurationSeconds":15,"acquireTime":"2026-11-24T22:41:05.118204Z","renewTime":"2026-11-25T09:12:44.902117Z","leaseTransitions":7}}}"#;

/// A small ConfigMap with labels and a few keys of data.
const CONFIGMAP_LINE: &str = r#"{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"web-config","namespace":"payments","uid":"9f4e1c2a-7b3d-4a5e-8c6f-0d1e2f3a4b5c","resourceVersion":"48213378","creationTimestamp":"2026-11-20T08:14:31Z","labels":{"app.kubernetes.io/name":"web","app.kubernetes.io/instance":"web-prod"}},"data":{"LOG_LEVEL":"info","LISTEN":":8080","cache.yaml":"size: 512Mi\nttl: 30s\n","feature-flags":"checkout-v2=true,search-v3=false"}}}"#;
