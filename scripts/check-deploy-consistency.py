"""Cross-checks of kube2nats' manifests that no schema or policy scanner makes: that the RBAC rules
grant exactly what the shipped configuration watches, and that the Deployment, its probes, the
Prometheus annotations, the PodMonitor and the Dockerfile agree with that configuration.

Usage: check-deploy-consistency.py RENDERED_BASE RENDERED_CLUSTER_WIDE SIDECAR PODMONITOR DOCKERFILE [RENDERED_REPLICAS]
Run by scripts/check-deploy (with the venv that has PyYAML). Prints one line per problem and
exits 1 if there is any.
"""

import re
import sys
import tomllib

import yaml

READ_VERBS = {"get", "list", "watch"}
# Leader election's Lease: get and update it (by name), create it (cannot be restricted by name).
LEASE_GROUP, LEASE_RESOURCE = "coordination.k8s.io", "leases"
LEASE_VERBS = {"get", "create", "update"}
UID = 65532
PORT_NAME = "metrics"

problems = []


def problem(where, message):
    problems.append(f"{where}: {message}")


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def parse_duration_secs(text):
    """humantime subset used in the shipped files: 10s, 2m, 800ms."""
    total = 0.0
    for number, unit in re.findall(r"(\d+)\s*(ms|s|m|h)", text):
        total += int(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


def group_and_plural(resource):
    """`pods` -> ("", "pods"); `deployments.apps` -> ("apps", "deployments");
    `widgets.v1.example.com` -> ("example.com", "widgets")."""
    plural, _, rest = resource.partition(".")
    if re.match(r"v\d+((alpha|beta)\d+)?(\.|$)", rest):
        rest = rest.partition(".")[2]
    return rest, plural


def grants(rules, group, plural, verb):
    for rule in rules:
        if (
            group in rule.get("apiGroups", [])
            and plural in rule.get("resources", [])
            and verb in rule.get("verbs", [])
        ):
            return True
    return False


def is_lease_rule(rule):
    return rule.get("apiGroups") == [LEASE_GROUP] and rule.get("resources") == [LEASE_RESOURCE]


def is_cluster_id_rule(rule):
    return (rule.get("apiGroups") == [""] and rule.get("resources") == ["namespaces"]
            and rule.get("resourceNames") == ["kube-system"] and rule.get("verbs") == ["get"])


def check_rules_minimal(where, rules):
    for i, rule in enumerate(rules):
        for field in ("apiGroups", "resources", "verbs"):
            if "*" in rule.get(field, []):
                problem(where, f"rules[{i}].{field} has a wildcard")
        if is_lease_rule(rule):
            extra = set(rule.get("verbs", [])) - LEASE_VERBS
            if extra:
                problem(where, f"rules[{i}] grants more than get/create/update on leases: {sorted(extra)}")
            named = set(rule.get("verbs", [])) - {"create"}
            if named and not rule.get("resourceNames"):
                problem(where, f"rules[{i}] grants {sorted(named)} on every Lease: restrict it with resourceNames")
            continue
        extra = set(rule.get("verbs", [])) - READ_VERBS
        if extra:
            problem(where, f"rules[{i}] grants more than get/list/watch: {sorted(extra)}")


def bound_roles(docs, binding_kind, role_kind, sa_name, sa_namespace):
    """The rules of every `role_kind` bound to the service account by a `binding_kind`."""
    rules = []
    for b in find(docs, binding_kind):
        b_ns = b["metadata"].get("namespace")
        for s in b.get("subjects", []):
            if s["kind"] == "ServiceAccount" and s["name"] == sa_name and s.get("namespace", b_ns) == sa_namespace:
                ref = b["roleRef"]
                if ref["kind"] != role_kind:
                    continue
                for role in find(docs, role_kind, ref["name"]):
                    if role_kind == "Role" and role["metadata"].get("namespace") != b_ns:
                        continue
                    rules.append((b_ns, role.get("rules", [])))
    return rules


def container_named(deployment, name):
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    problem(deployment["metadata"]["name"], f"no container named {name}")
    return None


def check_pod(where, deployment, container_name, config_map):
    """The kube2nats container of `deployment` against the configuration in `config_map`."""
    pod = deployment["spec"]["template"]["spec"]
    c = container_named(deployment, container_name)
    if c is None:
        return None
    config = tomllib.loads(config_map["data"]["kube2nats.toml"])

    # The configuration file is the mounted ConfigMap.
    args = c.get("args", [])
    if "--config" not in args:
        problem(where, "kube2nats runs without --config")
        return config
    config_path = args[args.index("--config") + 1]
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounted = [
        name for name, path in mounts.items()
        if config_path == f"{path.rstrip('/')}/kube2nats.toml"
        and volumes.get(name, {}).get("configMap", {}).get("name") == config_map["metadata"]["name"]
    ]
    if not mounted:
        problem(where, f"--config {config_path} is not the ConfigMap {config_map['metadata']['name']} mounted")

    # Probes, port, annotations against http.listen.
    listen = config.get("http", {}).get("listen", "0.0.0.0:9090")
    host, _, port = listen.rpartition(":")
    if host in ("127.0.0.1", "localhost", "[::1]"):
        problem(where, f"http.listen {listen} is loopback: the kubelet cannot probe it")
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    if ports.get(PORT_NAME) != int(port):
        problem(where, f"container port {PORT_NAME!r} is {ports.get(PORT_NAME)}, http.listen says {port}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        got = c.get(probe, {}).get("httpGet", {})
        if got.get("path") != path or got.get("port") not in (PORT_NAME, int(port)):
            problem(where, f"{probe} should GET {path} on port {PORT_NAME}, is {got}")
    annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
    if annotations.get("prometheus.io/scrape") != "true" or annotations.get("prometheus.io/port") != port:
        problem(where, f"prometheus.io annotations do not point at port {port}")

    # SIGTERM handling fits in the pod's grace period.
    grace = parse_duration_secs(config.get("shutdown", {}).get("grace_period", "10s"))
    if pod.get("terminationGracePeriodSeconds", 30) <= grace:
        problem(where, f"terminationGracePeriodSeconds must exceed shutdown.grace_period ({grace}s)")

    # The hardening the image is built for.
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    merged = {**psc, **csc}
    expect = {"runAsNonRoot": True, "runAsUser": UID, "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
    for key, value in expect.items():
        if merged.get(key) != value:
            problem(where, f"securityContext.{key} should be {value}, is {merged.get(key)}")
    if csc.get("capabilities", {}).get("drop") != ["ALL"]:
        problem(where, "capabilities.drop should be [ALL]")
    if merged.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        problem(where, "seccompProfile should be RuntimeDefault")
    if pod.get("automountServiceAccountToken") is not True:
        problem(where, "automountServiceAccountToken must be true: kube2nats authenticates with the token")
    res = c.get("resources", {})
    if not res.get("requests") or not res.get("limits", {}).get("memory"):
        problem(where, "resource requests and a memory limit are required")
    return config


def check_rbac(where, docs, deployment, config, cluster_wide):
    """Every watch is granted get/list/watch on its resource where it watches, by the bindings of
    the Deployment's service account, and nothing more."""
    sa = deployment["spec"]["template"]["spec"].get("serviceAccountName", "default")
    ns = deployment["metadata"]["namespace"]
    if not find(docs, "ServiceAccount", sa):
        problem(where, f"no ServiceAccount {sa}")
    roles = bound_roles(docs, "RoleBinding", "Role", sa, ns)
    cluster_roles = bound_roles(docs, "ClusterRoleBinding", "ClusterRole", sa, ns)
    # Durable state reads the cluster id (docs/durable-state.md): one ClusterRole allowing only
    # `get` on the kube-system Namespace, in every variant, unless state.cluster_id is set.
    cluster_id = [r for r in cluster_roles if all(is_cluster_id_rule(rule) for rule in r[1])]
    cluster_roles = [r for r in cluster_roles if r not in cluster_id]
    state = config.get("state", {})
    if state.get("enabled", True) and not state.get("cluster_id") and not cluster_id:
        problem(where, "no ClusterRole grants get on namespaces/kube-system (the cluster id of durable state)")
    if cluster_wide and roles:
        problem(where, "the cluster-wide variant still has a Role")
    if not cluster_wide and cluster_roles:
        problem(where, "the namespaced variant has a ClusterRole")
    for _, rules in roles + cluster_roles:
        check_rules_minimal(where, rules)
    for w in config.get("watches", []):
        group, plural = group_and_plural(w["resource"])
        namespaces = w.get("namespaces", [])
        for verb in sorted(READ_VERBS):
            if not namespaces:
                ok = any(grants(r, group, plural, verb) for _, r in cluster_roles)
                scope = "all namespaces (a ClusterRole)"
            else:
                # A ClusterRoleBinding grants in every namespace, a RoleBinding in its own.
                ok = any(grants(r, group, plural, verb) for _, r in cluster_roles) or all(
                    any(b_ns == n and grants(r, group, plural, verb) for b_ns, r in roles) for n in namespaces
                )
                scope = f"namespaces {namespaces}"
            if not ok:
                problem(where, f"watch {w['name']!r}: {verb} on {plural}.{group or 'core'} in {scope} is not granted")
        if not cluster_wide and namespaces != [ns]:
            problem(where, f"watch {w['name']!r} watches {namespaces}, the Role is in {ns!r}")
        # A namespace selector follows the namespaces' labels: list and watch on namespaces.
        for verb in ("list", "watch") if w.get("namespace_selector") else ():
            if not any(grants(r, "", "namespaces", verb) for _, r in cluster_roles):
                problem(where, f"watch {w['name']!r} has a namespace_selector: {verb} on namespaces is not granted by a ClusterRole")


def election_enabled(config, container):
    """leader_election.enabled, from the file or its KUBE2NATS__ environment override."""
    for e in container.get("env", []):
        if e["name"] == "KUBE2NATS__LEADER_ELECTION__ENABLED":
            return e.get("value", "").strip().lower() == "true"
    return bool(config.get("leader_election", {}).get("enabled", False))


def check_replicas(where, docs, deployment, container_name, config):
    """More than one replica needs leader election (else every change is published by each), and
    leader election needs the pod's name and namespace, its Lease's RBAC, a PDB and spreading."""
    c = container_named(deployment, container_name)
    replicas = deployment["spec"].get("replicas", 1)
    enabled = election_enabled(config, c)
    if replicas > 1 and not enabled:
        problem(where, f"{replicas} replicas without leader election: each publishes every change")
    if not enabled:
        return
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c.get("env", [])}
    for name, field in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        if env.get(name) != field:
            problem(where, f"leader election needs {name} from the downward API ({field})")
    election = config.get("leader_election", {})
    lease = election.get("lease_name", "kube2nats")
    ns = election.get("namespace") or deployment["metadata"]["namespace"]
    sa = deployment["spec"]["template"]["spec"].get("serviceAccountName", "default")
    rules = [r for b_ns, rs in bound_roles(docs, "RoleBinding", "Role", sa, ns) if b_ns == ns for r in rs]
    for verb in sorted(LEASE_VERBS):
        ok = any(
            is_lease_rule(r) and verb in r.get("verbs", [])
            and (verb == "create" or lease in r.get("resourceNames", [lease]))
            for r in rules
        )
        if not ok:
            problem(where, f"leader election: {verb} on the Lease {lease!r} in {ns!r} is not granted")
    if len(deployment["spec"]["template"]["spec"]["containers"]) > 1:
        return  # a sidecar: the application's pod, its disruption budget and spreading are the application's
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    pdbs = [
        p for p in find(docs, "PodDisruptionBudget")
        if all(labels.get(k) == v for k, v in p["spec"].get("selector", {}).get("matchLabels", {"": None}).items())
    ]
    if not pdbs:
        problem(where, "replicas without a PodDisruptionBudget: a drain may evict them all at once")
    elif not any(p["spec"].get("minAvailable", 0) >= 1 or p["spec"].get("maxUnavailable") == 1 for p in pdbs):
        problem(where, "the PodDisruptionBudget must keep one replica available")
    anti = deployment["spec"]["template"]["spec"].get("affinity", {}).get("podAntiAffinity", {})
    terms = [t.get("podAffinityTerm", t) for t in
             anti.get("preferredDuringSchedulingIgnoredDuringExecution", []) + anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])]
    if not any(t.get("topologyKey") == "kubernetes.io/hostname"
               and all(labels.get(k) == v for k, v in t.get("labelSelector", {}).get("matchLabels", {"": None}).items())
               for t in terms):
        problem(where, "replicas without pod anti-affinity over kubernetes.io/hostname: one node loss takes them all")


def check_skips(where, docs):
    for d in docs:
        for key, value in d["metadata"].get("annotations", {}).items():
            if key.startswith("checkov.io/skip"):
                check, _, reason = value.partition("=")
                if not re.fullmatch(r"CKV2?_K8S_\d+", check) or len(reason.split()) < 4:
                    problem(where, f"{key}: a skip needs a check id and a real reason: {value!r}")


def kube2nats_deployment(docs):
    for d in find(docs, "Deployment"):
        for c in d["spec"]["template"]["spec"]["containers"]:
            if c["image"].startswith("ghcr.io/kube2nats/kube2nats"):
                return d, c["name"]
    return None, None


def config_map_of(docs, deployment, container_name):
    c = container_named(deployment, container_name)
    volumes = deployment["spec"]["template"]["spec"].get("volumes", [])
    for m in c.get("volumeMounts", []):
        for v in volumes:
            if v["name"] == m["name"] and "configMap" in v:
                found = find(docs, "ConfigMap", v["configMap"]["name"])
                if found:
                    return found[0]
    problem(deployment["metadata"]["name"], "no ConfigMap with kube2nats.toml is mounted")
    return None


def check_variant(where, docs, cluster_wide):
    deployment, container = kube2nats_deployment(docs)
    if deployment is None:
        problem(where, "no kube2nats Deployment")
        return None
    config_map = config_map_of(docs, deployment, container)
    if config_map is None:
        return None
    config = check_pod(where, deployment, container, config_map)
    check_rbac(where, docs, deployment, config, cluster_wide)
    check_replicas(where, docs, deployment, container, config)
    check_skips(where, docs)
    return deployment


def check_podmonitor(path, deployment):
    for pm in find(load_all(path), "PodMonitor"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        selector = pm["spec"]["selector"].get("matchLabels", {})
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            problem(path, f"selector {selector} does not match the pod labels {labels}")
        if pm["metadata"].get("namespace") != deployment["metadata"]["namespace"]:
            problem(path, "not in the Deployment's namespace")
        for ep in pm["spec"].get("podMetricsEndpoints", []):
            if ep.get("port") != PORT_NAME or ep.get("path", "/metrics") != "/metrics":
                problem(path, f"endpoint {ep} should scrape port {PORT_NAME} at /metrics")


def check_dockerfile(path):
    text = open(path).read()
    if not re.search(rf"^USER {UID}:{UID}$", text, re.M):
        problem(path, f"the final stage should run as USER {UID}:{UID}, as the manifests do")
    if not re.search(r"^EXPOSE 9090$", text, re.M):
        problem(path, "EXPOSE 9090 (http.listen) is missing")


def main(base, cluster_wide, sidecar, podmonitor, dockerfile, replicas=None):
    deployment = check_variant("deploy/ (namespaced)", load_all(base), cluster_wide=False)
    if replicas is not None:
        check_variant("deploy/overlays/replicas", load_all(replicas), cluster_wide=False)
    check_variant("deploy/overlays/cluster-wide", load_all(cluster_wide), cluster_wide=True)
    check_variant("sidecar", load_all(sidecar), cluster_wide=False)
    if deployment is not None:
        check_podmonitor(podmonitor, deployment)
    check_dockerfile(dockerfile)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
