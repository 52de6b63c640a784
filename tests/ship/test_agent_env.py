"""The agent chart against the real agent: the environment a rendered pod gets starts a
`troupe-agent` that becomes ready and leaves within the grace period on SIGTERM, and every
TROUPE_* variable the chart can set is one the agent reads (`troupe-agent --help` lists it)."""

import os
import re
import signal
import subprocess
import time

from support import (CHARTS, binaries, env_of, free_port, http_get, load_values, objects,
                     processes, render, values_files, wait_until)

AGENT = CHARTS / "troupe-agent"
# Set by Kubernetes or the image, not flags of the agent.
NOT_FLAGS = {"POD_IP", "POD_NAME", "POD_NAMESPACE", "RUST_LOG"}


def pod_environment(container, pod_ip, secrets):
    """What the kubelet would give the container: downward API, Secret keys, $(VAR) expanded."""
    field = {"status.podIP": pod_ip, "spec.nodeName": "ship-test-node",
             "metadata.name": "agent-0", "metadata.namespace": "troupe"}
    env = {}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], entry["value"])
        elif "fieldRef" in entry["valueFrom"]:
            env[entry["name"]] = field[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = secrets[ref["key"]]
    return env


def test_every_variable_the_chart_sets_is_read_by_the_agent():
    _, agent = binaries()
    documented = set(re.findall(r"env:\s+(\w+)", subprocess.run(
        [str(agent), "--help"], capture_output=True, text=True, timeout=30, check=True).stdout))
    set_by_chart = set()
    for path in [None, *values_files(AGENT)]:
        values = load_values(path) if path else {}
        for obj in objects(render(AGENT, values)):
            if obj["kind"] == "Deployment":
                for container in obj["spec"]["template"]["spec"]["containers"]:
                    set_by_chart |= set(env_of(container))
    unread = sorted(set_by_chart - NOT_FLAGS - documented)
    assert not unread, f"the chart sets variables troupe-agent does not read: {unread}"


def test_a_pod_environment_from_the_chart_runs_the_agent_ready_and_sigterm_leaves_in_grace():
    _, agent = binaries()
    cluster, management = free_port(), free_port()
    values = load_values(AGENT / "ci" / "gossip.yaml")
    values["membership"]["gossip"]["seeds"] = [f"troupe://troupe@127.0.0.1:{cluster}"]
    values["ports"] = {"cluster": cluster, "management": management}
    values["controlPlane"] = {"url": ""}
    values["shutdown"] = {"preStopSleepSeconds": 1, "drainDelayMs": 300, "leaveTimeoutMs": 2000,
                          "flushTimeoutMs": 1000}
    deployment = next(o for o in objects(render(AGENT, values)) if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = pod_environment(container, "127.0.0.1",
                          {"cluster-secret": "a cluster secret from the chart's Secret"})
    assert env["TROUPE_ADVERTISED_HOST"] == "127.0.0.1"
    with processes() as procs:
        process = procs.start("agent", [str(agent)],
                              env={"PATH": os.environ["PATH"], **env})
        base = f"http://127.0.0.1:{management}"
        probe = container["readinessProbe"]["httpGet"]["path"]
        try:
            wait_until("readiness as the chart probes it",
                       lambda: http_get(base + probe)[0] == 200 or process.poll() is not None,
                       timeout=60)
        finally:
            assert process.poll() is None, procs.log("agent")
        assert http_get(base + container["livenessProbe"]["httpGet"]["path"])[0] == 200
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=pod["terminationGracePeriodSeconds"])
        took = time.monotonic() - started
        assert code == 0, procs.log("agent")
        assert took < pod["terminationGracePeriodSeconds"], took


def test_the_chart_s_report_spool_keeps_what_a_stop_could_not_deliver(tmp_path):
    """The spool settings a rendered pod gets, with the volume's mount path mapped to a temporary
    directory: the agent holds the directory's lock while it runs, and a SIGTERM while the
    control plane is away leaves the undelivered reports there for the next start."""
    _, agent = binaries()
    cluster, management, away = free_port(), free_port(), free_port()
    spool = tmp_path / "spool"
    values = load_values(AGENT / "ci" / "gossip.yaml")
    values["membership"]["gossip"]["seeds"] = [f"troupe://troupe@127.0.0.1:{cluster}"]
    values["ports"] = {"cluster": cluster, "management": management}
    # Nothing listens there: every report fails, and the stop spools them.
    values["controlPlane"] = {"url": f"http://127.0.0.1:{away}", "reportIntervalMs": 100,
                              "spool": {"mountPath": str(spool)}}
    values["shutdown"] = {"preStopSleepSeconds": 1, "drainDelayMs": 300, "leaveTimeoutMs": 2000,
                          "flushTimeoutMs": 1000}
    deployment = next(o for o in objects(render(AGENT, values)) if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == [str(spool)]
    spool.mkdir()  # the kubelet's emptyDir
    env = pod_environment(container, "127.0.0.1",
                          {"cluster-secret": "a cluster secret from the chart's Secret",
                           "ingest-token": "an ingest token"})
    with processes() as procs:
        process = procs.start("agent", [str(agent)], env={"PATH": os.environ["PATH"], **env})
        base = f"http://127.0.0.1:{management}"
        try:
            wait_until("readiness as the chart probes it",
                       lambda: http_get(base + "/_troupe/health/ready")[0] == 200
                       or process.poll() is not None, timeout=60)
        finally:
            assert process.poll() is None, procs.log("agent")
        assert (spool / "troupe-agent.lock").read_text().strip() == str(process.pid)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=pod["terminationGracePeriodSeconds"])
        assert code == 0, procs.log("agent")
    (spooled,) = spool.glob("troupe@127.0.0.1%3A*.jsonl")
    lines = spooled.read_text().splitlines()
    assert lines[0] == '{"troupe_report_spool":1}', lines[:2]
    assert len(lines) > 1, "batches after the header"
