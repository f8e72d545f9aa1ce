//! Realistic pod objects, serialized once and stamped with a uid and resourceVersion per event.
//!
//! Each pod is ~3.5 KB of JSON in the order kube-apiserver writes it: labels, annotations,
//! ownerReferences, two containers with env, ports and resources, and a status with
//! conditions and containerStatuses. The text is split at the uid and the resourceVersion once, so
//! producing an event costs a few `memcpy`s, never a serialization.

/// A pod's JSON cut around its two changing fields: `head` + uid + `mid` + resourceVersion + `tail`.
pub struct PodTemplate {
    head: Vec<u8>,
    mid: Vec<u8>,
    tail: Vec<u8>,
    pub name: String,
    pub namespace: String,
    /// A PartialObjectMetadata: list items keep their type fields.
    partial: bool,
}

const UID_MARK: &str = "@@UID@@";
const RV_MARK: &str = "@@RV@@";

/// Namespaces the generated pods are spread over.
pub const NAMESPACES: [&str; 8] = [
    "default",
    "payments",
    "checkout",
    "search",
    "frontend",
    "monitoring",
    "ingress-nginx",
    "batch-jobs",
];

/// A deterministic 64-bit mix (splitmix64), so runs are repeatable without a random crate.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A lower-case canonical UUID (v4 layout) for `seed`.
pub fn uuid(seed: u64) -> String {
    let a = mix(seed);
    let b = mix(seed ^ 0xdead_beef_cafe_f00d);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

fn alnum(seed: u64, len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = mix(seed);
    (0..len)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

impl PodTemplate {
    /// The pod in slot `slot` (stable name, namespace and owner across events).
    pub fn new(slot: u64) -> PodTemplate {
        PodTemplate::shaped(slot, 0, false)
    }

    /// The pod of `slot` with `padding` bytes of data outside its metadata (a large ConfigMap or
    /// Secret stands in this way), or (`partial`) the PartialObjectMetadata the API server sends
    /// for it to a metadata-only request.
    pub fn shaped(slot: u64, padding: usize, partial: bool) -> PodTemplate {
        let namespace = NAMESPACES[(slot % NAMESPACES.len() as u64) as usize];
        let app = ["web", "api", "worker", "cache", "gateway"][(slot % 5) as usize];
        let rs_hash = alnum(slot / 40, 10);
        let name = format!("{app}-{rs_hash}-{}", alnum(slot, 5));
        let owner_uid = uuid(slot / 40 + 1_000_000_000);
        let ip = format!(
            "10.{}.{}.{}",
            (slot >> 16) & 0xff,
            (slot >> 8) & 0xff,
            slot & 0xff
        );
        let text = format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","generateName":"{app}-{rs_hash}-","namespace":"{namespace}","uid":"{UID_MARK}","resourceVersion":"{RV_MARK}","creationTimestamp":"2026-11-20T08:14:31Z","labels":{{"app.kubernetes.io/name":"{app}","app.kubernetes.io/instance":"{app}-prod","app.kubernetes.io/version":"1.27.3","pod-template-hash":"{rs_hash}","tier":"backend"}},"annotations":{{"prometheus.io/scrape":"true","prometheus.io/port":"9102"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"{app}-{rs_hash}","uid":"{owner_uid}","controller":true,"blockOwnerDeletion":true}}]}},"spec":{{"volumes":[{{"name":"config","configMap":{{"name":"{app}-config","defaultMode":420}}}}],"containers":[{{"name":"{app}","image":"registry.example.com/shop/{app}:1.27.3","ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}},{{"name":"metrics","containerPort":9102,"protocol":"TCP"}}],"env":[{{"name":"LOG_LEVEL","value":"info"}},{{"name":"DATABASE_URL","value":"postgres://{app}@db.{namespace}.svc:5432/{app}"}},{{"name":"POD_NAME","valueFrom":{{"fieldRef":{{"apiVersion":"v1","fieldPath":"metadata.name"}}}}}},{{"name":"GOMAXPROCS","valueFrom":{{"resourceFieldRef":{{"containerName":"{app}","resource":"limits.cpu","divisor":"0"}}}}}}],"resources":{{"limits":{{"cpu":"2","memory":"1Gi"}},"requests":{{"cpu":"250m","memory":"512Mi"}}}},"volumeMounts":[{{"name":"config","readOnly":true,"mountPath":"/etc/{app}"}}],"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}},{{"name":"envoy","image":"registry.example.com/mesh/envoy:1.31.2","ports":[{{"name":"envoy-admin","containerPort":15000,"protocol":"TCP"}}],"resources":{{"limits":{{"cpu":"500m","memory":"256Mi"}},"requests":{{"cpu":"50m","memory":"64Mi"}}}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"{app}","serviceAccount":"{app}","nodeName":"worker-{}","securityContext":{{"runAsNonRoot":true,"fsGroup":2000}},"schedulerName":"default-scheduler","priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"}},"status":{{"phase":"Running","conditions":[{{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T08:14:31Z"}},{{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T08:14:40Z"}},{{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T08:14:40Z"}},{{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T08:14:31Z"}}],"hostIP":"192.168.10.{}","podIP":"{ip}","startTime":"2026-11-20T08:14:31Z","containerStatuses":[{{"name":"envoy","state":{{"running":{{"startedAt":"2026-11-20T08:14:34Z"}}}},"lastState":{{}},"ready":true,"restartCount":0,"image":"registry.example.com/mesh/envoy:1.31.2","imageID":"registry.example.com/mesh/envoy@sha256:{}","containerID":"containerd://{}","started":true}},{{"name":"{app}","state":{{"running":{{"startedAt":"2026-11-20T08:14:33Z"}}}},"lastState":{{}},"ready":true,"restartCount":0,"image":"registry.example.com/shop/{app}:1.27.3","imageID":"registry.example.com/shop/{app}@sha256:{}","containerID":"containerd://{}","started":true}}],"qosClass":"Burstable"}}}}"#,
            slot % 50,
            slot % 50 + 10,
            hex64(slot ^ 1),
            hex64(slot ^ 2),
            hex64(slot ^ 3),
            hex64(slot ^ 4),
        );
        let text = match (padding, partial) {
            (_, true) => {
                let start = text.find(r#""metadata":"#).expect("template has metadata");
                let end = text.find(r#","spec":"#).expect("template has a spec");
                format!(
                    r#"{{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",{}}}"#,
                    &text[start..end]
                )
            }
            (0, false) => text,
            (n, false) => format!(
                r#"{},"data":{{"blob":"{}"}}}}"#,
                &text[..text.len() - 1],
                "x".repeat(n)
            ),
        };
        let (head, rest) = text
            .split_once(UID_MARK)
            .expect("template holds the uid mark");
        let (mid, tail) = rest
            .split_once(RV_MARK)
            .expect("template holds the rv mark");
        PodTemplate {
            head: head.as_bytes().to_vec(),
            mid: mid.as_bytes().to_vec(),
            tail: tail.as_bytes().to_vec(),
            name,
            namespace: namespace.to_owned(),
            partial,
        }
    }

    /// Appends the object with this uid and resourceVersion.
    pub fn write(&self, uid: &str, rv: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(uid.as_bytes());
        out.extend_from_slice(&self.mid);
        out.extend_from_slice(itoa(rv).as_bytes());
        out.extend_from_slice(&self.tail);
    }

    /// Appends the object as a list item: the API server omits `kind` and `apiVersion` there.
    pub fn write_list_item(&self, uid: &str, rv: u64, out: &mut Vec<u8>) {
        const TYPE_FIELDS: &[u8] = br#""kind":"Pod","apiVersion":"v1","#;
        let start = out.len();
        self.write(uid, rv, out);
        if self.partial {
            return;
        }
        // `{"kind":"Pod","apiVersion":"v1","metadata"…` → `{"metadata"…`
        out.drain(start + 1..start + 1 + TYPE_FIELDS.len());
    }

    /// The serialized size with a 36-character uid and an 8-digit resourceVersion.
    pub fn approx_len(&self) -> usize {
        self.head.len() + 36 + self.mid.len() + 8 + self.tail.len()
    }
}

fn hex64(seed: u64) -> String {
    format!(
        "{:016x}{:016x}{:016x}{:016x}",
        mix(seed),
        mix(seed + 1),
        mix(seed + 2),
        mix(seed + 3)
    )
}

fn itoa(n: u64) -> String {
    n.to_string()
}
