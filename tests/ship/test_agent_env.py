"""The agent chart against the real agent: the environment a rendered pod gets starts a
`troupe-agent` that becomes ready and leaves within the grace period on SIGTERM."""

import os
import re
import signal
import time

from support import (CHARTS, binaries, free_port, http_get, load_values, objects, processes,
                     render, wait_until)

AGENT = CHARTS / "troupe-agent"


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
