"""The Containerfile: the runtime stage built from host-built binaries on a Debian base made with
debootstrap, then the server and two agents run with podman (host network), as a user runs them.

No registry is reachable here, so the build stage (which pulls the Rust image) is skipped
(`--build-arg BINARIES=prebuilt`) and the base comes from `scripts/base-image` (cached under
/var/tmp, keyed by its inputs). Podman runs with Debian's runc, cgroupfs and no default
ulimits (crun fails on these machines' hybrid cgroup layout), on a storage of its own under
/var/tmp so that the imported base is reused and nothing touches other images.
"""

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from support import ROOT, binaries, free_port, http_get, wait_until

STORAGE = Path(os.environ.get("TROUPE_PODMAN_STORAGE", "/var/tmp/troupe-podman"))
CONTAINERS_CONF = """\
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
"""


class Podman:
    def __init__(self, conf):
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.base = ["podman", "--root", str(STORAGE / "storage"), "--runroot",
                     str(STORAGE / "run"), "--storage-driver", "overlay"]

    def __call__(self, *args, timeout=120, check=True):
        result = subprocess.run([*self.base, *args], capture_output=True, text=True,
                                timeout=timeout, env=self.env, stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (Debian package podman; scripts/test installs it)")
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    run = Podman(conf)
    info = run("info", "--format", "json", check=False, timeout=60)
    if info.returncode != 0:
        pytest.skip(f"podman cannot run here: {info.stderr.strip()[-500:]}")
    return run


@pytest.fixture(scope="module")
def base_image(podman):
    made = subprocess.run([str(ROOT / "scripts" / "base-image")], capture_output=True,
                          text=True, timeout=1200)
    assert made.returncode == 0, made.stderr
    tarball = Path(made.stdout.strip().splitlines()[-1])
    tag = f"localhost/troupe-base:{tarball.stem.removeprefix('troupe-base-')}"
    if podman("image", "exists", tag, check=False).returncode != 0:
        podman("import", str(tarball), tag, timeout=300)
    # Bases of earlier inputs (scripts/base-image removed their tarballs) are not needed.
    listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", "localhost/troupe-base").stdout
    for old in set(listed.split()) - {tag}:
        podman("rmi", "--force", old, check=False)
    return tag


@pytest.fixture(scope="module")
def images(podman, base_image, tmp_path_factory):
    """troupe-server and troupe-agent images built from this checkout's binaries."""
    server_bin, agent_bin = binaries()
    context = tmp_path_factory.mktemp("context")
    for binary in (server_bin, agent_bin):
        shutil.copy2(binary, context / binary.name)
    run_id = uuid.uuid4().hex[:8]
    built = {}
    try:
        for target in ("server", "agent"):
            tag = f"localhost/troupe-{target}:test-{run_id}"
            podman("build", "--pull=never", "--network", "host", "--target", target,
                   "--build-arg", f"BASE_IMAGE={base_image}", "--build-arg", "BINARIES=prebuilt",
                   "-f", str(ROOT / "Containerfile"), "-t", tag, str(context), timeout=600)
            built[target] = tag
        yield built
    finally:
        for tag in built.values():
            podman("rmi", "--force", tag, check=False)
        # The stages' intermediate images (the storage is this test's own; the base stays).
        podman("image", "prune", "--force", check=False)


def image_config(podman, tag):
    return json.loads(podman("image", "inspect", tag).stdout)[0]["Config"]


def test_images_run_as_a_non_root_user_with_an_exec_entrypoint_and_documented_ports(podman, images):
    server, agent = image_config(podman, images["server"]), image_config(podman, images["agent"])
    assert server["User"] == agent["User"] == "10001:10001"
    assert server["Entrypoint"] == ["/usr/local/bin/troupe-server"]
    assert agent["Entrypoint"] == ["/usr/local/bin/troupe-agent"]
    assert set(server["ExposedPorts"]) == {"8080/tcp"}
    assert set(agent["ExposedPorts"]) == {"2552/tcp", "8558/tcp"}
    # The entrypoint takes the arguments itself (exec form): `--help` reaches the binary.
    help_text = podman("run", "--rm", "--network", "none", images["agent"], "--help").stdout
    assert "--advertised-host" in help_text


def host_uid(podman, container):
    pid = podman("inspect", "--format", "{{.State.Pid}}", container).stdout.strip()
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1])


def exit_code(podman, container):
    return int(podman("inspect", "--format", "{{.State.ExitCode}}", container).stdout.strip())


def test_the_server_and_two_agents_run_in_containers_and_the_agents_join_and_report(podman, images):
    run_id = uuid.uuid4().hex[:8]
    api, token, system = free_port(), "podman-test-ingest-token", "ship-podman"
    cluster = [free_port(), free_port()]
    management = [free_port(), free_port()]
    names = {"server": f"troupe-server-{run_id}",
             "agents": [f"troupe-agent-{i}-{run_id}" for i in range(2)]}
    containers = [names["server"], *names["agents"]]
    base = f"http://127.0.0.1:{api}"
    try:
        podman("run", "--detach", "--name", names["server"], "--network", "host",
               "--env", f"TROUPE_LISTEN=127.0.0.1:{api}", "--env", f"TROUPE_INGEST_TOKEN={token}",
               images["server"])
        seed = f"troupe://{system}@127.0.0.1:{cluster[0]}"
        for name, port, mgmt in zip(names["agents"], cluster, management):
            podman("run", "--detach", "--name", name, "--network", "host",
                   "--env", "TROUPE_CLUSTER_SECRET=podman test cluster secret",
                   "--env", f"TROUPE_INGEST_TOKEN={token}", "--env", "NODE_NAME=podman-host",
                   "--env", "TROUPE_MEMBERSHIP=gossip", "--env", "TROUPE_SINGLETON_LEASE=none",
                   "--env", "TROUPE_LEAVE_TIMEOUT_MS=10000", "--env", "TROUPE_FLUSH_TIMEOUT_MS=5000",
                   images["agent"], "--system", system, "--bind", f"127.0.0.1:{port}",
                   "--seed", seed, "--management-bind", f"127.0.0.1:{mgmt}",
                   "--control-plane", base, "--report-interval-ms", "200", "--demo")

        def logs():
            return "\n".join(f"--- {c}\n{podman('logs', c, check=False).stderr[-2000:]}"
                             for c in containers)

        def members():
            status, body = http_get(f"{base}/api/v1/clusters/{system}/members")
            return json.loads(body)["members"] if status == 200 else []

        try:
            # The server serves its API and its probes.
            wait_until("the server's /livez", lambda: http_get(f"{base}/livez")[0] == 200, 60)
            wait_until("the server's /readyz", lambda: http_get(f"{base}/readyz")[0] == 200, 30)
            # Both agents are ready members, and the control plane heard it from them.
            for mgmt in management:
                wait_until(f"agent readiness on {mgmt}",
                           lambda: http_get(f"http://127.0.0.1:{mgmt}/_troupe/health/ready")[0] == 200,
                           60)
            up = wait_until("two members up in the control plane's API",
                            lambda: (m := [x for x in members() if x["status"] == "up"]) and
                            len(m) == 2 and m, 60)
            assert {int(m["node"].rsplit(":", 1)[-1]) for m in up} == set(cluster), up
            status, metrics = http_get(f"{base}/metrics")
            assert status == 200 and "troupe_ingest_items_total" in metrics
            status, agent_metrics = http_get(f"http://127.0.0.1:{management[1]}/metrics")
            assert status == 200 and 'troupe_agent_members{status="up"} 2' in agent_metrics
        except AssertionError as e:
            raise AssertionError(f"{e}\n{logs()}") from None

        # Every process runs as the image's user, not root.
        for container in containers:
            assert host_uid(podman, container) == 10001, container

        # SIGTERM (podman stop) leaves the cluster gracefully: exit 0, the member gone.
        podman("stop", "--time", "30", names["agents"][1], timeout=60)
        assert exit_code(podman, names["agents"][1]) == 0, logs()
        wait_until("the stopped agent gone from the members that are up",
                   lambda: len([m for m in members() if m["status"] == "up"]) == 1, 30)
        for container in (names["agents"][0], names["server"]):
            podman("stop", "--time", "30", container, timeout=60)
            assert exit_code(podman, container) == 0, logs()
    finally:
        for container in containers:
            podman("rm", "--force", "--time", "5", container, check=False, timeout=60)
