"""Renders and lints deploy/helm/kube2nats with Helm's own engine (helm-python-sdk bundles the
Helm v4 library), for scripts/check-deploy.

Writes the rendered variants to OUT/helm-*.yaml (check-deploy then validates them with
kubernetes-validate and checkov like the kustomize output) and each rendered ConfigMap's TOML to
OUT/helm-*.toml (checked with kube2nats --check-config). Checks here: `helm lint --strict`, every
watch of the rendered configuration has its RBAC rule in the rendered Role/ClusterRole, with
leader election the Lease's rules, downward-API identity, durable state's instance per release, PodDisruptionBudget and anti-affinity
and the configuration's rollout (a checksum annotation, or `reloadConfig`)
agree with the configuration, values that kube2nats cannot honour are refused at render time, and
the chart's copy of the alerts is deploy/monitoring/prometheusrule.yaml.

Usage: check-helm.py OUT
"""
import pathlib
import re
import sys
import tomllib

import yaml
from helm_python import Chart, lint

CHART = pathlib.Path("deploy/helm/kube2nats")
NAMESPACE = "kube2nats"

VARIANTS = {
    # The defaults: a Role in the release namespace.
    "helm-namespaced": {},
    # Every namespace, the monitoring objects, a resource named with its version.
    "helm-cluster": {
        "rbac": {"scope": "cluster"},
        "podMonitor": {"enabled": True},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "image": {"digest": "sha256:" + "0" * 64},
        "config": {
            "watches": [
                {"name": "pods", "resource": "pods"},
                {"name": "deployments", "resource": "deployments.v1.apps", "payload": "object"},
                {"name": "nodes", "resource": "nodes"},
                {"name": "cms", "resource": "configmaps", "namespace_selector": "team=payments", "payload": "metadata"},
            ]
        },
    },
}

VARIANTS["helm-replicas"] = {
    # Three replicas, one publisher: leader election, a PodDisruptionBudget, spread over nodes;
    # a changed configuration reloaded by the pods rather than rolling them.
    "replicas": 3,
    "leaderElection": {"enabled": True},
    "reloadConfig": True,
}

REFUSED = {
    "several replicas without leader election": ({"replicas": 2}, "leaderElection.enabled"),
    "an unknown anti-affinity": ({"replicas": 2, "leaderElection": {"enabled": True}, "podAntiAffinity": "sometimes"}, "podAntiAffinity"),
    "all namespaces with namespaced RBAC": (
        {"config": {"watches": [{"name": "pods", "resource": "pods", "namespaces": []}]}},
        "set rbac.scope=cluster",
    ),
    "an unknown RBAC scope": ({"rbac": {"scope": "everything"}}, "rbac.scope"),
    "a namespace selector with namespaced RBAC": (
        {"config": {"watches": [{"name": "cms", "resource": "configmaps", "namespace_selector": "team=a"}]}},
        "set rbac.scope=cluster",
    ),
}


def fail(message):
    sys.exit(f"check-helm: {message}")


def render(values):
    chart = Chart.load(CHART)
    out = chart.render(values, name="kube2nats", namespace=NAMESPACE, is_install=True)
    return {path: text for path, text in out.items() if not path.endswith("NOTES.txt") and text.strip()}


def rule_for(resource):
    """(group, plural) of a watch's resource in kubectl spelling."""
    parts = resource.split(".")
    rest = parts[1:]
    if rest and re.fullmatch(r"v[0-9]+((alpha|beta)[0-9]+)?", rest[0]):
        rest = rest[1:]
    return ".".join(rest), parts[0]


def check_rbac(name, docs, config):
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    if not roles:
        fail(f"{name}: no Role or ClusterRole rendered")
    for watch in config["watches"]:
        group, plural = rule_for(watch["resource"])
        namespaces = watch.get("namespaces") or [None]
        for ns in namespaces:
            granted = [
                r
                for role in roles
                if role["kind"] == "ClusterRole" or role["metadata"].get("namespace") == ns
                for r in role["rules"]
                if group in r["apiGroups"] and plural in r["resources"] and {"list", "watch"} <= set(r["verbs"])
            ]
            if not granted:
                fail(f"{name}: watch {watch['name']} ({watch['resource']}) in {ns or 'every namespace'} has no RBAC rule")
        selecting = watch.get("namespace_selector") and not any(
            "" in r["apiGroups"] and "namespaces" in r["resources"] and {"list", "watch"} <= set(r["verbs"])
            for role in roles
            if role["kind"] == "ClusterRole"
            for r in role["rules"]
        )
        if selecting:
            fail(f"{name}: watch {watch['name']} has a namespace_selector but no ClusterRole rule on namespaces")


def check_hardening(name, docs):
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    sc = container["securityContext"]
    expected = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
    }
    for key, value in expected.items():
        if sc.get(key) != value:
            fail(f"{name}: container securityContext.{key} is {sc.get(key)!r}, not {value!r}")
    if sc["capabilities"]["drop"] != ["ALL"] or pod["securityContext"]["seccompProfile"]["type"] != "RuntimeDefault":
        fail(f"{name}: capabilities or seccomp weaker than deploy/base")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        if container[probe]["httpGet"]["path"] != path:
            fail(f"{name}: {probe} does not probe {path}")


def check_leader_election(name, docs, config):
    """With leader election: the configuration names the Lease, the pod knows its name and
    namespace, the Role allows exactly what the elector does on that Lease, and with several
    replicas a PodDisruptionBudget and anti-affinity select the Deployment's pods."""
    election = config.get("leader_election", {})
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    replicas = deployment["spec"]["replicas"]
    if not election.get("enabled"):
        if replicas > 1:
            fail(f"{name}: {replicas} replicas without leader election")
        return
    lease = election["lease_name"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in pod["spec"]["containers"][0].get("env", [])}
    for var, field in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        if env.get(var) != field:
            fail(f"{name}: {var} is not the downward API's {field}")
    rules = [
        r
        for d in docs
        if d["kind"] == "Role" and d["metadata"]["namespace"] == NAMESPACE
        for r in d["rules"]
        if "coordination.k8s.io" in r["apiGroups"] and "leases" in r["resources"]
    ]
    named = [r for r in rules if r.get("resourceNames") == [lease]]
    if not named or not {"get", "update"} <= set(named[0]["verbs"]):
        fail(f"{name}: no rule for get and update on the Lease {lease}")
    if not any("create" in r["verbs"] and not r.get("resourceNames") for r in rules):
        fail(f"{name}: no rule for create on leases (it cannot carry resourceNames)")
    if any(set(r["verbs"]) - {"get", "update", "create"} for r in rules) or any(
        set(r["verbs"]) - {"create"} and not r.get("resourceNames") for r in rules
    ):
        fail(f"{name}: the Lease rules grant more than get/update on the Lease and create")
    if replicas > 1:
        labels = pod["metadata"]["labels"]
        pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
        if not pdbs or not pdbs[0]["spec"]["selector"]["matchLabels"].items() <= labels.items():
            fail(f"{name}: no PodDisruptionBudget selecting the pods")
        anti = pod["spec"].get("affinity", {}).get("podAntiAffinity", {})
        terms = [t["podAffinityTerm"] for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
        terms += anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
        if not any(t["labelSelector"]["matchLabels"].items() <= labels.items() for t in terms):
            fail(f"{name}: no pod anti-affinity spreading the replicas")


def check_config_rollout(name, docs, values):
    """A changed configuration rolls the pods (the checksum annotation) unless `reloadConfig`
    leaves it to kube2nats' reload; the ConfigMap is mounted as a directory either way (a subPath
    mount would never see an update)."""
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    rolls = "checksum/config" in pod["metadata"].get("annotations", {})
    if rolls == bool(values.get("reloadConfig")):
        fail(f"{name}: checksum/config annotation {'present' if rolls else 'missing'} with reloadConfig={values.get('reloadConfig', False)}")
    mounts = [m for c in pod["spec"]["containers"] for m in c.get("volumeMounts", []) if m["name"] == "config"]
    if not mounts or any("subPath" in m for m in mounts):
        fail(f"{name}: the configuration must be mounted as a directory, without subPath, to be reloaded")


def check_state_owner(name, docs, config):
    """Durable state's instance is the release's own (namespace and full name), so two releases
    sharing a state bucket never share state."""
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    expected = f"{NAMESPACE}_{deployment['metadata']['name']}"
    instance = config.get("state", {}).get("instance")
    if instance != expected:
        fail(f"{name}: state.instance is {instance!r}, not the release's {expected!r}")


def main(out):
    out = pathlib.Path(out)
    report = lint(CHART, strict=True, namespace=NAMESPACE)
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2] + report.get("errors", [])
    if problems:
        fail(f"helm lint --strict: {problems}")
    print(f"helm lint --strict: clean ({report.get('total_charts_linted')} chart)", file=sys.stderr)

    for name, values in VARIANTS.items():
        rendered = render(values)
        text = "\n---\n".join(rendered[k] for k in sorted(rendered))
        (out / f"{name}.yaml").write_text(text)
        docs = [d for d in yaml.safe_load_all(text) if d]
        config_map = next(d for d in docs if d["kind"] == "ConfigMap")
        toml_text = config_map["data"]["kube2nats.toml"]
        (out / f"{name}.toml").write_text(toml_text)
        config = tomllib.loads(toml_text)
        check_rbac(name, docs, config)
        check_hardening(name, docs)
        check_leader_election(name, docs, config)
        check_state_owner(name, docs, config)
        check_config_rollout(name, docs, values)
        kinds = ",".join(d["kind"] for d in docs)
        print(f"{name}: {len(docs)} objects ({kinds})", file=sys.stderr)

    for what, (values, needle) in REFUSED.items():
        try:
            render(values)
        except Exception as e:  # the SDK raises HelmRenderError with the template's message
            if needle not in str(e):
                fail(f"{what}: refused, but the message does not say {needle!r}: {e}")
            continue
        fail(f"{what}: rendered, but should be refused")
    print(f"refused as expected: {', '.join(REFUSED)}", file=sys.stderr)

    copy = (CHART / "files/prometheusrule.yaml").read_text()
    if copy != pathlib.Path("deploy/monitoring/prometheusrule.yaml").read_text():
        fail("deploy/helm/kube2nats/files/prometheusrule.yaml differs from deploy/monitoring/prometheusrule.yaml: copy it over")


if __name__ == "__main__":
    main(sys.argv[1])
