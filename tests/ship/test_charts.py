"""The Helm charts: lint, render, validate strictly, and seed 003's properties on the objects."""

import math
import re
import shutil
import subprocess
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from support import (CHARTS, KUBE_VERSIONS, RULES, env_of, load_values, objects, one, render,
                     strip, values_files)

AGENT = CHARTS / "troupe-agent"
SERVER = CHARTS / "troupe-server"
EXAMPLE = CHARTS / "examples" / "shop"
CHART_VALUES = [(chart, None) for chart in (AGENT, SERVER)] + [
    (chart, path) for chart in (AGENT, SERVER) for path in values_files(chart)
]
IDS = [f"{c.name}-{p.stem if p else 'defaults'}" for c, p in CHART_VALUES]
# Custom resources kubernetes-validate has no schema for: checked by the tests below instead.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}


def rendered(chart, path):
    values = load_values(path) if path else {}
    return values, objects(render(chart, values))


@pytest.fixture(scope="module")
def example_chart(tmp_path_factory):
    """The example application chart with its file:// dependency fetched, in a copy."""
    copy = tmp_path_factory.mktemp("charts") / "charts"
    shutil.copytree(CHARTS, copy, symlinks=True)
    helm.dependency_update(str(copy / "examples" / "shop"))
    return copy / "examples" / "shop"


def test_each_chart_has_at_least_three_test_values_files():
    for chart in (AGENT, SERVER):
        assert len(values_files(chart)) >= 3, chart


def test_chart_versions_agree_with_the_version_templates():
    for chart in (AGENT, SERVER):
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        helpers = (chart / "templates" / "_helpers.tpl").read_text()
        m = re.search(r'define "[a-z-]+\.version" -}}\s*(\S+)\s*{{-', helpers)
        assert m, f"{chart.name}: no version template"
        assert m.group(1) == meta["version"] == meta["appVersion"], chart.name


@pytest.mark.parametrize("chart,path", CHART_VALUES, ids=IDS)
def test_lint_is_clean(chart, path):
    report = helm.lint(str(chart), load_values(path) if path else None, strict=True,
                       kube_version=f"v{KUBE_VERSIONS[0]}")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert not problems, problems


@pytest.mark.parametrize("chart,path", CHART_VALUES, ids=IDS)
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_every_rendered_object_validates_strictly(chart, path, kube):
    _, objs = rendered(chart, path)
    assert objs
    for obj in objs:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(strip(obj), kube, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{obj['__template']} {obj['kind']}/{obj['metadata']['name']} against "
                        f"Kubernetes {kube}: {'.'.join(map(str, e.path))}: {e.message}")


@pytest.mark.parametrize("chart,path", CHART_VALUES, ids=IDS)
def test_rendered_manifests_pass_yamllint(chart, path, tmp_path):
    values = load_values(path) if path else {}
    out = tmp_path / "rendered.yaml"
    out.write_text("".join(
        f"---\n# Source: {template}\n{text.strip()}\n"
        for template, text in sorted(render(chart, values).items())
        if text.strip() and not template.endswith("NOTES.txt")
    ))
    # Helm's toYaml writes block sequences unindented, so both styles occur; the dashboard
    # ConfigMaps carry JSON whose PromQL lines are long.
    config = ("{extends: default, rules: {line-length: disable, document-start: disable, "
              "indentation: {indent-sequences: whatever}, comments: {min-spaces-from-content: 1}}}")
    result = subprocess.run(["yamllint", "-f", "parsable", "-d", config, str(out)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_sources_pass_yamllint():
    files = [str(p) for chart in (AGENT, SERVER, EXAMPLE)
             for p in [chart / "Chart.yaml", chart / "values.yaml", *values_files(chart)]
             if p.exists()]
    result = subprocess.run(["yamllint", "-f", "parsable", "-d",
                             "{extends: default, rules: {line-length: {max: 100}, document-start: disable}}",
                             *files], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_values_outside_the_schema_are_refused_with_the_offending_key():
    for chart, bad, says in [
        (AGENT, {"membership": {"provider": "zookeeper"}}, "membership.provider"),
        (AGENT, {"singletonLease": {"backend": "redis"}}, "singletonLease.backend"),
        (AGENT, {"resources": {"cpu": "lots"}}, "resources.cpu"),
        (AGENT, {"shutdwon": {}}, "shutdwon"),
        (AGENT, {"controlPlane": {"spool": {"maxBytes": 1024}}}, "controlPlane.spool.maxBytes"),
        (AGENT, {"controlPlane": {"spool": {"mountPath": "spool"}}}, "controlPlane.spool.mountPath"),
        (AGENT, {"controlPlane": {"spool": {"size": "1Gi"}}}, "size"),
        (SERVER, {"secret": {"ingestTokenKey": ""}}, "secret.ingestTokenKey"),
        (SERVER, {"replicas": 0}, "replicas"),
        (SERVER, {"server": {"agentSilenceMs": 2999}}, "server.agentSilenceMs"),
        (SERVER, {"server": {"agentSilenceMs": 86400001}}, "server.agentSilenceMs"),
    ]:
        with pytest.raises(helm.HelmError) as refused:
            render(chart, bad)
        message = str(refused.value)
        assert says.split(".")[-1] in message, message


# ---------------------------------------------------------------------------- seed 003

def agent_pod(objs):
    deployment = one(objs, "Deployment")
    return deployment, deployment["spec"]["template"]["spec"]


def host_container(pod):
    containers = [c for c in pod["containers"] if "TROUPE_SYSTEM" in env_of(c)]
    assert len(containers) == 1, pod["containers"]
    return containers[0]


def effective(values, *keys, default=None):
    """A value from a values file, or the chart default."""
    node = values
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            node = None
            break
        node = node[key]
    if node is not None:
        return node
    node = yaml.safe_load((AGENT / "values.yaml").read_text())
    for key in keys:
        node = node[key]
    return node if node is not None else default


def check_host_pod(pod, values, objs):
    """Every property seed 003 asks of a host pod, for the values it was rendered with."""
    container = host_container(pod)
    mgmt = effective(values, "ports", "management")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"cluster": effective(values, "ports", "cluster"), "management": mgmt}

    # Probes: the startup probe is not optional, and its numbers are the seed's.
    startup = container["startupProbe"]
    assert startup["httpGet"] == {"path": "/_troupe/health", "port": "management"}
    assert (startup["failureThreshold"], startup["periodSeconds"]) == (30, 2)
    assert container["livenessProbe"]["httpGet"]["path"] == "/_troupe/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/_troupe/health/ready"

    # Shutdown: a preStop sleep, and a grace period above preStop + drain + leave + flush.
    pre_stop = effective(values, "shutdown", "preStopSleepSeconds")
    assert container["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", str(pre_stop)]}}
    env = env_of(container)
    drain, leave, flush = (int(env[k]["value"]) for k in
                           ("TROUPE_DRAIN_DELAY_MS", "TROUPE_LEAVE_TIMEOUT_MS", "TROUPE_FLUSH_TIMEOUT_MS"))
    assert (drain, leave, flush) == tuple(effective(values, "shutdown", k) for k in
                                          ("drainDelayMs", "leaveTimeoutMs", "flushTimeoutMs"))
    needed = pre_stop + math.ceil((drain + leave + flush) / 1000)
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > needed, (grace, needed)
    explicit = effective(values, "shutdown", "terminationGracePeriodSeconds")
    margin = effective(values, "shutdown", "graceMarginSeconds")
    assert grace == (explicit if explicit is not None else needed + margin)

    # Downward API: NODE_NAME and POD_IP, and the advertised address from POD_IP.
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_IP") < names.index("TROUPE_ADVERTISED_HOST")
    assert env["TROUPE_ADVERTISED_HOST"]["value"] == "$(POD_IP)"
    assert env["TROUPE_MANAGEMENT_BIND"]["value"] == f"0.0.0.0:{mgmt}"

    # Requests equal limits.
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]
    assert resources["requests"]["cpu"] == str(effective(values, "resources", "cpu"))

    # Secrets only by reference.
    for name in ("TROUPE_CLUSTER_SECRET", "TROUPE_INGEST_TOKEN", "TROUPE_COORDINATION_TOKEN",
                 "TROUPE_SINGLETON_LEASE_DATABASE_URL"):
        if name in env:
            assert "value" not in env[name] and "secretKeyRef" in env[name]["valueFrom"], name

    # Membership and singleton lease as chosen.
    provider = effective(values, "membership", "provider")
    assert env["TROUPE_MEMBERSHIP"]["value"] == provider
    backend = effective(values, "singletonLease", "backend") or {
        "gossip": "none", "kubernetes": "kubernetes", "etcd": "etcd"}[provider]
    assert env["TROUPE_SINGLETON_LEASE"]["value"] == backend
    if "kubernetes" in (provider, backend):
        assert env["TROUPE_KUBE_NAMESPACE"]["value"] == "$(POD_NAMESPACE)"
    else:
        assert not [k for k in env if k.startswith("TROUPE_KUBE_")]
    if provider == "etcd" or backend == "etcd":
        assert env["TROUPE_ETCD_ENDPOINTS"]["value"] == ",".join(
            effective(values, "membership", "etcd", "endpoints"))
    if provider == "gossip":
        assert env["TROUPE_SEEDS"]["value"] == ",".join(
            effective(values, "membership", "gossip", "seeds"))
    else:
        assert "TROUPE_SEEDS" not in env
    if backend == "postgres":
        assert "TROUPE_SINGLETON_LEASE_DATABASE_URL" in env
    if backend == "control-plane":
        assert "TROUPE_COORDINATION_TOKEN" in env

    # RBAC: the pod's service account may do what Lease membership does, in its namespace.
    account = pod["serviceAccountName"]
    one(objs, "ServiceAccount", account)
    role = one(objs, "Role")
    rules = [r for r in role["rules"] if "coordination.k8s.io" in r["apiGroups"]]
    assert rules and set(rules[0]["resources"]) == {"leases"}
    assert set(rules[0]["verbs"]) >= {"get", "list", "watch", "create", "update", "delete"}
    binding = one(objs, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert {"kind": "ServiceAccount", "name": account, "namespace": "troupe"} in binding["subjects"]


AGENT_CASES = [None] + [p for p in values_files(AGENT)
                        if effective(load_values(p), "deployment", "enabled")]


@pytest.mark.parametrize("path", AGENT_CASES, ids=[p.stem if p else "defaults" for p in AGENT_CASES])
def test_agent_deployment_has_what_seed_003_asks(path):
    values, objs = rendered(AGENT, path)
    deployment, pod = agent_pod(objs)
    check_host_pod(pod, values, objs)
    labels = deployment["metadata"]["labels"]
    for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"):
        assert key in labels, key
    autoscaled = effective(values, "autoscaling", "enabled")
    hpas = [o for o in objs if o["kind"] == "HorizontalPodAutoscaler"]
    if autoscaled:
        assert "replicas" not in deployment["spec"]
        assert hpas[0]["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    else:
        assert not hpas and deployment["spec"]["replicas"] == effective(values, "deployment", "replicas")
    one(objs, "PodDisruptionBudget")


def test_the_default_grace_period_is_the_documented_sum():
    _, objs = rendered(AGENT, None)
    _, pod = agent_pod(objs)
    # 10 s preStop + ceil((5000 + 10000 + 10000) ms) + 5 s margin (docs/operations.md).
    assert pod["terminationGracePeriodSeconds"] == 40


def test_the_agent_chart_without_a_deployment_renders_only_rbac():
    _, objs = rendered(AGENT, AGENT / "ci" / "sidecar-rbac-only.yaml")
    assert sorted(o["kind"] for o in objs) == ["Role", "RoleBinding", "ServiceAccount"]
    assert one(objs, "ServiceAccount")["metadata"]["name"] == "shop-hosts"


def test_the_example_application_pod_is_a_troupe_host(example_chart):
    values = {}
    objs = objects(render(example_chart, {}, name="shop", namespace="troupe"))
    deployment = one(objs, "Deployment")
    assert deployment["metadata"]["name"] == "shop-shop"
    pod = deployment["spec"]["template"]["spec"]
    assert host_container(pod)["image"] == "registry.example.com/shop:1.0.0"
    check_host_pod(pod, values, objs)
    for obj in objs:
        kubernetes_validate.validate(strip(obj), KUBE_VERSIONS[0], strict=True)


@pytest.mark.parametrize("bad,says", [
    ({"membership": {"provider": "kubernetes", "gossip": {"seeds": ["troupe://troupe@a:2552"]}}},
     "membership.gossip.seeds is set but membership.provider is kubernetes"),
    ({"membership": {"provider": "gossip"}}, "membership.gossip.seeds is empty"),
    ({"membership": {"provider": "etcd"}}, "etcd needs membership.etcd.endpoints"),
    ({"singletonLease": {"backend": "etcd"}}, "etcd needs membership.etcd.endpoints"),
    ({"singletonLease": {"backend": "control-plane"}, "controlPlane": {"url": ""}},
     "controlPlane.url is empty"),
    ({"membership": {"ttlMs": 7500}}, "membership.ttlMs must be a whole number of seconds"),
    ({"membership": {"provider": "etcd", "ttlMs": 1000, "etcd": {"endpoints": ["http://e:2379"]}}},
     "at least 2000 for etcd"),
    ({"membership": {"ttlMs": 6000, "renewMs": 2500}}, "at most a third of membership.ttlMs"),
    ({"shutdown": {"terminationGracePeriodSeconds": 30}},
     "shutdown.terminationGracePeriodSeconds is 30 but must be above"),
    ({"controlPlane": {"tls": {"ca": {"secretName": "tls"}}}},
     'controlPlane.tls.ca is set but controlPlane.url is "http://troupe-server:8080"'),
    ({"controlPlane": {"url": "", "tls": {"ca": {"configMapName": "bundle"}}}},
     'controlPlane.tls.ca is set but controlPlane.url is ""'),
    ({"controlPlane": {"url": "https://cp:8443",
                       "tls": {"ca": {"secretName": "tls", "configMapName": "bundle"}}}},
     "controlPlane.tls.ca.secretName (tls) and controlPlane.tls.ca.configMapName (bundle) are both set"),
])
def test_contradictory_agent_values_are_refused_saying_what_is_allowed(bad, says):
    with pytest.raises(helm.HelmError) as refused:
        render(AGENT, bad)
    assert says in str(refused.value), str(refused.value)


def named(items, name):
    return [item for item in items if item["name"] == name]


def control_plane_ca(pod):
    """(the CA variable, the container's CA mounts, the pod's CA volumes) of an agent pod."""
    container = host_container(pod)
    return (env_of(container).get("TROUPE_CONTROL_PLANE_CA"),
            named(container.get("volumeMounts", []), "control-plane-ca"),
            named(pod.get("volumes", []), "control-plane-ca"))


@pytest.mark.parametrize("source, expected", [
    ({"secretName": "troupe-server-tls"}, {"secret": {
        "secretName": "troupe-server-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}),
    ({"configMapName": "trust-bundle", "key": "bundle.pem"}, {"configMap": {
        "name": "trust-bundle", "items": [{"key": "bundle.pem", "path": "ca.crt"}]}}),
])
def test_a_control_plane_ca_is_mounted_and_passed_as_the_agent_flag(source, expected):
    values = {"controlPlane": {"url": "https://troupe-server:8443", "tls": {"ca": source}}}
    objs = objects(render(AGENT, values))
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    variable, mounts, volumes = control_plane_ca(pod)
    assert mounts == [{"name": "control-plane-ca", "mountPath": "/etc/troupe/control-plane-ca",
                       "readOnly": True}]
    assert volumes == [{"name": "control-plane-ca", **expected}]
    assert variable == {"name": "TROUPE_CONTROL_PLANE_CA",
                        "value": "/etc/troupe/control-plane-ca/ca.crt"}
    env = env_of(host_container(pod))
    assert env["TROUPE_CONTROL_PLANE_URL"]["value"] == "https://troupe-server:8443"
    for obj in objs:
        if obj["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(strip(obj), KUBE_VERSIONS[0], strict=True)
    # The variable is the agent's own (its clap argument for --control-plane-ca).
    config = (Path(__file__).resolve().parents[2] / "node-agent" / "src" / "config.rs").read_text()
    assert 'env = "TROUPE_CONTROL_PLANE_CA"' in config


@pytest.mark.parametrize("values", [{}, {"controlPlane": {"url": "https://troupe-server:8443"}}],
                         ids=["http", "https-public-roots"])
def test_without_a_control_plane_ca_nothing_is_mounted(values):
    _, pod = agent_pod(objects(render(AGENT, values)))
    assert control_plane_ca(pod) == (None, [], [])


def test_the_application_pod_gets_the_ca_through_the_host_templates(example_chart):
    values = {"troupe-agent": {"controlPlane": {
        "url": "https://troupe-server:8443", "tls": {"ca": {"secretName": "troupe-server-tls"}}}}}
    objs = objects(render(example_chart, values, name="shop", namespace="troupe"))
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    variable, mounts, volumes = control_plane_ca(pod)
    assert variable["value"] == "/etc/troupe/control-plane-ca/ca.crt"
    assert [m["name"] for m in mounts] == [v["name"] for v in volumes] == ["control-plane-ca"]
    # Next to the report spool, both through the same templates.
    container = host_container(pod)
    assert [m["name"] for m in container["volumeMounts"]] == [v["name"] for v in pod["volumes"]] \
        == ["control-plane-ca", "report-spool"]


def report_spool(pod):
    """(the spool variables, the container's spool mounts, the pod's spool volumes)."""
    container = host_container(pod)
    env = env_of(container)
    variables = {k: env[k]["value"] for k in ("TROUPE_REPORT_SPOOL_DIR",
                                              "TROUPE_REPORT_SPOOL_MAX_BYTES") if k in env}
    return (variables, named(container.get("volumeMounts", []), "report-spool"),
            named(pod.get("volumes", []), "report-spool"))


def validate_strictly(objs):
    for obj in objs:
        if obj["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(strip(obj), KUBE_VERSIONS[0], strict=True)


@pytest.mark.parametrize("spool, expected_volume, expected_env", [
    # The default: an emptyDir per pod, room for the file and its rewrite (2 x 16 MiB + 1 MiB).
    ({}, {"emptyDir": {"sizeLimit": "33Mi"}},
     {"TROUPE_REPORT_SPOOL_DIR": "/var/spool/troupe-agent",
      "TROUPE_REPORT_SPOOL_MAX_BYTES": "16777216"}),
    # A size that is not a whole number of MiB is rounded up.
    ({"maxBytes": 65536, "mountPath": "/spool"}, {"emptyDir": {"sizeLimit": "2Mi"}},
     {"TROUPE_REPORT_SPOOL_DIR": "/spool", "TROUPE_REPORT_SPOOL_MAX_BYTES": "65536"}),
    ({"volume": {"emptyDir": {"medium": "Memory", "sizeLimit": "40Mi"}}},
     {"emptyDir": {"medium": "Memory", "sizeLimit": "40Mi"}},
     {"TROUPE_REPORT_SPOOL_DIR": "/var/spool/troupe-agent",
      "TROUPE_REPORT_SPOOL_MAX_BYTES": "16777216"}),
], ids=["default-emptydir", "small", "own-volume"])
def test_the_report_spool_is_a_volume_mounted_and_passed_as_the_agent_flags(
        spool, expected_volume, expected_env):
    objs = objects(render(AGENT, {"controlPlane": {"spool": spool}}))
    _, pod = agent_pod(objs)
    variables, mounts, volumes = report_spool(pod)
    assert variables == expected_env
    assert mounts == [{"name": "report-spool", "mountPath": expected_env["TROUPE_REPORT_SPOOL_DIR"]}]
    assert volumes == [{"name": "report-spool", **expected_volume}]
    # Writable under the chart's read-only root filesystem: only because it is a volume.
    assert host_container(pod)["securityContext"]["readOnlyRootFilesystem"] is True
    validate_strictly(objs)
    # The variables are the agent's own (its clap arguments).
    config = (Path(__file__).resolve().parents[2] / "node-agent" / "src" / "config.rs").read_text()
    for name in expected_env:
        assert f'env = "{name}"' in config, name


@pytest.mark.parametrize("values", [
    {"controlPlane": {"spool": {"enabled": False}}},
    # No control plane, nothing to spool (the agent refuses a spool without one).
    {"controlPlane": {"url": ""}},
], ids=["disabled", "no-control-plane"])
def test_without_a_report_spool_nothing_is_mounted(values):
    _, pod = agent_pod(objects(render(AGENT, values)))
    assert report_spool(pod) == ({}, [], [])
    assert "volumes" not in pod and "volumeMounts" not in host_container(pod)


def test_a_spool_claim_is_refused_for_a_deployment_of_several_pods_and_taken_for_one():
    claim = {"controlPlane": {"spool": {"volume": {"persistentVolumeClaim": {"claimName": "spool"}}}}}
    for more, says in [({}, "runs 3 replicas"),
                       ({"autoscaling": {"enabled": True}}, "runs autoscaled replicas")]:
        with pytest.raises(helm.HelmError) as refused:
            render(AGENT, {**claim, **more})
        message = str(refused.value)
        for part in ("controlPlane.spool.volume is a persistentVolumeClaim", says,
                     "one agent holds at a time", "leave controlPlane.spool.volume empty"):
            assert part in message, message
    objs = objects(render(AGENT, {**claim, "deployment": {"replicas": 1}}))
    _, pod = agent_pod(objs)
    assert report_spool(pod)[2] == [{"name": "report-spool",
                                     "persistentVolumeClaim": {"claimName": "spool"}}]
    validate_strictly(objs)


def test_the_application_pod_gets_the_report_spool_through_the_host_templates(example_chart):
    objs = objects(render(example_chart, {}, name="shop", namespace="troupe"))
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    variables, mounts, volumes = report_spool(pod)
    assert variables["TROUPE_REPORT_SPOOL_DIR"] == mounts[0]["mountPath"]
    assert [v["name"] for v in volumes] == ["report-spool"]


# ---------------------------------------------------------------------------- server

SERVER_CASES = [None, *values_files(SERVER)]


@pytest.mark.parametrize("path", SERVER_CASES, ids=[p.stem if p else "defaults" for p in SERVER_CASES])
def test_server_chart_objects(path):
    values, objs = rendered(SERVER, path)
    deployment = one(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = env_of(container)
    # The database URL and every token come from Secrets.
    for name in ("DATABASE_URL", "TROUPE_INGEST_TOKEN", "TROUPE_ADMIN_TOKEN",
                 "TROUPE_COORDINATION_TOKEN", "TROUPE_VIEWER_TOKEN"):
        if name in env:
            assert "value" not in env[name] and "secretKeyRef" in env[name]["valueFrom"], name
    assert "secretKeyRef" in env["DATABASE_URL"]["valueFrom"]
    # The server listens on 0.0.0.0: it refuses to start without a read credential.
    assert "TROUPE_VIEWER_TOKEN" in env or "TROUPE_TRUSTED_PROXY_HEADER" in env, env
    if "TROUPE_TRUSTED_PROXY_HEADER" in env:
        assert env["TROUPE_TRUSTED_PROXY_CIDRS"]["value"], "a proxy header without its sources"
    assert not [o for o in objs if o["kind"] == "Secret"], "the chart never writes secrets"
    # Probes on the server's endpoints.
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] == "/livez"
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    one(objs, "Service")
    pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert bool(pdbs) == (values.get("podDisruptionBudget", {}).get("enabled", True))
    # Dashboards: one ConfigMap per dashboard file, labelled for Grafana's sidecar, verbatim.
    maps = [o for o in objs if o["kind"] == "ConfigMap"]
    if values.get("dashboards", {}).get("enabled", True):
        boards = sorted(Path(SERVER / "dashboards").glob("*.json"))
        assert len(maps) == len(boards) >= 6
        for board, cm in zip(boards, sorted(maps, key=lambda m: m["metadata"]["name"])):
            assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
            assert cm["data"] == {board.name: board.read_text().rstrip("\n")}
    else:
        assert not maps
    rules = [o for o in objs if o["kind"] == "PrometheusRule"]
    if values.get("prometheusRule", {}).get("enabled"):
        assert rules[0]["spec"] == yaml.safe_load(RULES.read_text())
    else:
        assert not rules
    monitors = [o for o in objs if o["kind"] == "ServiceMonitor"]
    if values.get("serviceMonitor", {}).get("enabled"):
        endpoint = monitors[0]["spec"]["endpoints"][0]
        assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
        assert monitors[0]["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    else:
        assert not monitors


def test_the_prometheus_rule_object_holds_rules_promtool_accepts(tmp_path):
    _, objs = rendered(SERVER, SERVER / "ci" / "operator.yaml")
    rule = one(objs, "PrometheusRule")
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values, says", [
    ({"secret": {"viewerTokenKey": ""}}, "needs a read credential"),
    ({"server": {"trustedProxy": {"header": "X-Auth-Request-User"}}},
     "server.trustedProxy.header needs server.trustedProxy.cidrs"),
])
def test_a_server_without_a_read_credential_is_refused_at_render_time(values, says):
    with pytest.raises(Exception) as refused:
        render(SERVER, values)
    assert says in str(refused.value)


def test_the_viewer_token_and_the_proxy_header_reach_the_server_as_its_flags_variables():
    _, objs = rendered(SERVER, None)
    env = env_of(one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0])
    assert env["TROUPE_VIEWER_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "viewer-token"
    objs = objects(render(SERVER, {"secret": {"viewerTokenKey": ""}, "server": {
        "trustedProxy": {"header": "X-Auth-Request-User", "cidrs": ["10.0.0.0/8", "fd00::/8"]}}}))
    env = env_of(one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0])
    assert "TROUPE_VIEWER_TOKEN" not in env
    assert env["TROUPE_TRUSTED_PROXY_HEADER"]["value"] == "X-Auth-Request-User"
    assert env["TROUPE_TRUSTED_PROXY_CIDRS"]["value"] == "10.0.0.0/8,fd00::/8"
    # The variables are the server's own (its clap arguments, which --help lists).
    help_text = (Path(__file__).resolve().parents[2] / "server" / "src" / "config.rs").read_text()
    for name in ("TROUPE_VIEWER_TOKEN", "TROUPE_TRUSTED_PROXY_HEADER", "TROUPE_TRUSTED_PROXY_CIDRS"):
        assert f'env = "{name}"' in help_text, name


@pytest.mark.parametrize("values, expected", [
    ({}, "15000"),
    ({"server": {"agentSilenceMs": 30000}}, "30000"),
    ({"server": {"agentSilenceMs": 3000}}, "3000"),
    ({"server": {"agentSilenceMs": 86400000}}, "86400000"),
])
def test_the_agent_silence_reaches_the_server_as_its_flags_variable(values, expected):
    objs = objects(render(SERVER, values))
    env = env_of(one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0])
    assert env["TROUPE_AGENT_SILENCE_MS"]["value"] == expected
    # The variable is the server's own, and the chart's range is the server's.
    config = (Path(__file__).resolve().parents[2] / "server" / "src" / "config.rs").read_text()
    assert 'env = "TROUPE_AGENT_SILENCE_MS"' in config
    assert "3_000..=86_400_000" in config
