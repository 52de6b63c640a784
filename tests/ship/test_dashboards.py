"""Grafana dashboards and Prometheus alert rules: well-formed, tested, and querying only what a
real server and real agents emit."""

import json
import re
import subprocess
import sys
import time
import urllib.parse

import pytest
import yaml

from support import (DASHBOARDS, ROOT, RULE_TESTS, RULES, alert_queries, binaries,
                     dashboard_queries, free_port, grafana_to_promql, http_get, metric_names,
                     processes, promtool_check_expressions, sample_names, wait_until)

BOARDS = sorted(DASHBOARDS.glob("*.json"))


def test_the_dashboards_are_what_build_py_makes():
    result = subprocess.run([sys.executable, str(DASHBOARDS / "build.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_dashboards_cover_what_operators_ask_for():
    titles = {json.loads(p.read_text())["title"] for p in BOARDS}
    assert titles == {
        "Troupe / Cluster", "Troupe / Singletons", "Troupe / Routers and mailboxes",
        "Troupe / Dead letters", "Troupe / Control plane", "Troupe / Agent reporters",
    }


def test_dashboards_have_stable_uids_and_a_datasource_variable_and_no_hard_coded_uid():
    uids = set()
    for path in BOARDS:
        board = json.loads(path.read_text())
        assert re.fullmatch(r"troupe-[a-z-]+", board["uid"]) and board["uid"] == path.stem
        assert board["uid"] not in uids
        uids.add(board["uid"])
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), path.name

        def walk(node, where):
            if isinstance(node, dict):
                if "datasource" in node:
                    assert node["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (
                        path.name, where, node["datasource"])
                if where and "uid" in node:
                    assert node["uid"] == "${datasource}", (path.name, where, node["uid"])
                for key, value in node.items():
                    walk(value, f"{where}.{key}")
            elif isinstance(node, list):
                for item in node:
                    walk(item, where)

        walk(board, "")


def test_promql_names_are_read_from_expressions():
    expr = ('histogram_quantile(0.99, sum by (singleton, le) (rate(a_bucket{job=~"x", le!="1"}[5m]))) '
            '/ on (job) group_left (version) b_info or vector(0) and count without (instance) '
            '(c_total offset 5m) > bool 1 unless {__name__="d_total"}')
    assert metric_names(expr) == {"a_bucket", "b_info", "c_total", "d_total"}
    assert metric_names('sum(increase(x_total[$__range]))'.replace("$__range", "1h")) == {"x_total"}


def test_every_alert_rule_passes_promtool_check():
    result = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_passes_its_promtool_unit_tests():
    result = subprocess.run(["promtool", "test", "rules", str(RULE_TESTS)], capture_output=True,
                            text=True, timeout=120, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not():
    alerts = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"]
              for rule in group["rules"]}
    fired, quiet = set(), set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert alerts == fired, f"alerts without a firing test: {alerts - fired}"
    missing_quiet = alerts - quiet - {"TroupeSingletonTwoHosts"}
    assert not missing_quiet, f"alerts without a case where they stay quiet: {missing_quiet}"


def test_every_dashboard_and_alert_expression_parses_in_promtool(tmp_path):
    queries = dashboard_queries() + alert_queries()
    assert len(queries) > 40
    result = promtool_check_expressions(queries, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------- live

def prometheus_config(tmp, server_port, agent_ports):
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": "troupe-server",
             "static_configs": [{"targets": [f"127.0.0.1:{server_port}"]}]},
            {"job_name": "troupe-agents",
             "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in agent_ports]}]},
        ],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def query(base, expr):
    status, body = http_get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}",
                            timeout=5)
    assert status == 200, (expr, status, body)
    return json.loads(body)["data"]["result"]


def test_dashboards_and_alerts_query_only_what_a_real_server_and_agents_emit(tmp_path):
    """Starts the control plane and two agents running the demo workload, scrapes them, and
    fails on any metric name a panel or an alert queries that is not emitted; then a real
    Prometheus scrapes them and every panel's query must return data."""
    server_bin, agent_bin = binaries()
    api, cluster_ports = free_port(), [free_port(), free_port()]
    management = [free_port(), free_port()]
    token = "ship-test-ingest-token"
    queries = dashboard_queries() + alert_queries()
    wanted = {}
    for where, expr in queries:
        for name in metric_names(grafana_to_promql(expr)):
            wanted.setdefault(name, []).append(where)

    with processes() as procs:
        procs.start("server", [str(server_bin), "--listen", f"127.0.0.1:{api}",
                               "--sqlite-path", str(tmp_path / "cp.sqlite"),
                               "--ingest-token", token])
        seed = f"troupe://ship@127.0.0.1:{cluster_ports[0]}"
        for i, (port, mgmt) in enumerate(zip(cluster_ports, management)):
            procs.start(f"agent-{i}", [
                str(agent_bin), "--system", "ship", "--bind", f"127.0.0.1:{port}",
                "--seed", seed, "--secret", "ship test secret, long enough",
                "--management-bind", f"127.0.0.1:{mgmt}", "--demo",
                "--control-plane", f"http://127.0.0.1:{api}", "--ingest-token", token,
                "--report-interval-ms", "200",
            ])

        def emitted():
            names = set()
            for port in [api, *management]:
                status, body = http_get(f"http://127.0.0.1:{port}/metrics")
                if status != 200:
                    return None
                names |= sample_names(body)
            return names

        def all_emitted():
            names = emitted()
            return names if names is not None and not set(wanted) - names else None

        try:
            wait_until("every queried metric name on the server's and agents' /metrics",
                       all_emitted, timeout=60)
        except AssertionError:
            names = emitted() or set()
            missing = {n: wanted[n] for n in sorted(set(wanted) - names)}
            pytest.fail("queried but not emitted by a real server and agents:\n" + "\n".join(
                f"  {name}: {', '.join(where)}" for name, where in missing.items())
                + "\n" + procs.log("agent-0")[-3000:])

        # A real Prometheus scrapes them; every panel query returns data.
        prom = free_port()
        config = prometheus_config(tmp_path, api, management)
        procs.start("prometheus", ["prometheus", f"--config.file={config}",
                                   f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{prom}"])
        base = f"http://127.0.0.1:{prom}"
        wait_until("Prometheus ready", lambda: http_get(f"{base}/-/ready")[0] == 200, timeout=30)
        live = {"$__rate_interval": "10s", "$__range": "1m", "$__interval": "2s"}
        panels = [(w, e) for w, e in dashboard_queries() if "panel" in w]

        def empty_panels():
            return [(w, e) for w, e in panels if not query(base, grafana_to_promql(e, live))]

        deadline = time.monotonic() + 60
        empty = empty_panels()
        while empty and time.monotonic() < deadline:
            time.sleep(2)
            empty = empty_panels()
        assert not empty, "panels with no data from a live cluster:\n" + "\n".join(
            f"  {w}: {e}" for w, e in empty)

        # Prometheus evaluates every alert rule without error.
        status, body = http_get(f"{base}/api/v1/rules")
        groups = json.loads(body)["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) == len(alert_queries())
        bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] not in ("ok", "unknown")]
        assert not bad, bad
