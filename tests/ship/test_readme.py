"""The README's "Deploy on Kubernetes" commands, carried out offline exactly as written: every
`helm` command rendered with the Helm SDK from a copy of the charts, every Secret it refers to
created by a `kubectl create secret` line with that key, every image it runs built by a
`podman build` line from a target the Containerfile has, and the port-forward aimed at a
Service port the charts render."""

import re
import shlex
import shutil

import helm_python as helm
import pytest

from support import ROOT, objects

SECTION = "## Deploy on Kubernetes"


def commands():
    text = (ROOT / "README.md").read_text()
    assert SECTION in text
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert blocks
    out = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(shlex.split(line))
    return out


def options(argv, flags_with_value):
    """(positional arguments, [(flag, value)]) of a command line."""
    positional, flags = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-"):
            if "=" in arg and arg.split("=", 1)[0] in flags_with_value:
                flags.append(tuple(arg.split("=", 1)))
            elif arg in flags_with_value:
                flags.append((arg, argv[i + 1]))
                i += 1
            else:
                flags.append((arg, None))
        else:
            positional.append(arg)
        i += 1
    return positional, flags


@pytest.fixture(scope="module")
def carried_out(tmp_path_factory):
    """Carries the commands out in a copy of the repository's charts; what they produced."""
    root = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "charts", root / "charts", symlinks=True)
    shutil.copytree(ROOT / "dashboards", root / "dashboards")
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", (ROOT / "Containerfile").read_text(), re.M))
    state = {"images": set(), "pushed": set(), "secrets": {}, "releases": {}, "forwards": []}
    for argv in commands():
        tool, rest = argv[0], argv[1:]
        if tool == "podman":
            positional, flags = options(rest, {"--target", "-t", "--tag", "-f", "--build-arg"})
            if positional[0] == "build":
                target = dict(flags)["--target"]
                assert target in stages, f"Containerfile has no stage {target}: {argv}"
                assert positional[1:] == ["."], argv
                state["images"].add(dict(flags).get("-t") or dict(flags)["--tag"])
            elif positional[0] == "push":
                assert positional[1] in state["images"], f"pushes an image never built: {argv}"
                state["pushed"].add(positional[1])
            else:
                pytest.fail(f"a podman command the test does not know: {argv}")
        elif tool == "kubectl":
            positional, flags = options(rest, {"--namespace", "-n", "--from-literal"})
            namespace = dict(flags).get("--namespace") or dict(flags).get("-n") or "default"
            if positional[:2] == ["create", "namespace"]:
                continue
            if positional[:3] == ["create", "secret", "generic"]:
                keys = {value.split("=", 1)[0] for flag, value in flags if flag == "--from-literal"}
                state["secrets"][(namespace, positional[3])] = keys
            elif positional[0] == "port-forward":
                kind, name = positional[1].split("/")
                state["forwards"].append((namespace, kind, name, int(positional[2])))
            else:
                pytest.fail(f"a kubectl command the test does not know: {argv}")
        elif tool == "helm":
            positional, flags = options(rest, {"--namespace", "-n", "--set", "-f", "--values"})
            if positional[:2] == ["dependency", "update"]:
                helm.dependency_update(str(root / positional[2]))
            elif positional[0] == "install":
                name, chart = positional[1], positional[2]
                namespace = dict(flags).get("--namespace") or dict(flags).get("-n") or "default"
                values = {}
                for flag, value in flags:
                    if flag == "--set":
                        merge(values, helm.parse_set_string(value))
                    elif flag in ("-f", "--values"):
                        merge(values, helm.values_from_yaml((root / value).read_text()))
                    elif flag not in ("--namespace", "-n"):
                        pytest.fail(f"a helm flag the test does not know: {flag} in {argv}")
                with helm.Chart.load(str(root / chart)) as loaded:
                    manifests = loaded.render(values, name=name, namespace=namespace,
                                              is_install=True)
                state["releases"][name] = (namespace, objects(manifests))
            else:
                pytest.fail(f"a helm command the test does not know: {argv}")
        else:
            pytest.fail(f"a command the test does not know: {argv}")
    return state


def merge(into, values):
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


def pods(objs):
    return [o["spec"]["template"]["spec"] for o in objs if o["kind"] == "Deployment"]


def test_the_readme_installs_the_server_the_agents_and_the_example_application(carried_out):
    assert set(carried_out["releases"]) == {"troupe-server", "troupe-agent", "shop"}


def test_every_secret_the_releases_read_is_created_with_its_key(carried_out):
    refs = 0
    for namespace, objs in carried_out["releases"].values():
        for pod in pods(objs):
            for container in pod["containers"]:
                for env in container.get("env", []):
                    ref = env.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        refs += 1
                        keys = carried_out["secrets"].get((namespace, ref["name"]))
                        assert keys is not None, f"Secret {ref['name']} in {namespace} is never created"
                        assert ref["key"] in keys, f"Secret {ref['name']} lacks key {ref['key']}"
    assert refs >= 6


def test_every_image_the_charts_run_is_built_and_pushed(carried_out):
    for name in ("troupe-server", "troupe-agent"):
        _, objs = carried_out["releases"][name]
        for pod in pods(objs):
            for container in pod["containers"]:
                assert container["image"] in carried_out["pushed"], container["image"]


def test_the_port_forward_reaches_the_servers_service_and_the_dashboards_ship(carried_out):
    ((namespace, kind, name, port),) = carried_out["forwards"]
    assert kind == "svc"
    release_namespace, objs = carried_out["releases"]["troupe-server"]
    assert namespace == release_namespace
    services = [o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == name]
    assert services and port in [p["port"] for p in services[0]["spec"]["ports"]]
    dashboards = [o for o in objs if o["kind"] == "ConfigMap"
                  and o["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert len(dashboards) == 6
    assert [o for o in objs if o["kind"] == "PrometheusRule"]


def test_the_agents_report_to_the_server_the_readme_installs(carried_out):
    server_namespace, server_objs = carried_out["releases"]["troupe-server"]
    service = next(o for o in server_objs if o["kind"] == "Service")
    port = service["spec"]["ports"][0]["port"]
    for release in ("troupe-agent", "shop"):
        namespace, objs = carried_out["releases"][release]
        assert namespace == server_namespace
        for pod in pods(objs):
            env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env", [])}
            assert env["TROUPE_CONTROL_PLANE_URL"] == f"http://{service['metadata']['name']}:{port}"
