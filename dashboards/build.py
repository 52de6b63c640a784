#!/usr/bin/env python3
"""Writes the Grafana dashboards in this folder (troupe-*.json) from the definitions below.

    python3 dashboards/build.py          rewrite the JSON files
    python3 dashboards/build.py --check  fail when a JSON file differs from what this makes

Edit the definitions here, not the JSON (scripts/test runs --check). Every query uses only
metric names that the server and the agents emit: tests/tests/dashboard_metrics.rs scrapes a
real server and real agents and fails on any name a panel or an alert queries that is not
there. Every dashboard has a `datasource` variable (no data source UID is hard-coded) and a
stable UID.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Agents are selected by scrape job and instance; the server by its own job.
AGENT = 'job=~"$job", instance=~"$instance"'
SERVER = 'job=~"$server_job"'


def variable(name, label, query, multi=True):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,
        "includeAll": multi,
        "multi": multi,
        "allValue": ".*" if multi else None,
        "current": {},
        "sort": 1,
        "hide": 0,
    }


DATASOURCE_VARIABLE = {
    "name": "datasource",
    "label": "Data source",
    "type": "datasource",
    "query": "prometheus",
    "current": {},
    "hide": 0,
    "refresh": 1,
}
AGENT_VARIABLES = [
    variable("job", "Agents (job)", "label_values(troupe_agent_members, job)"),
    variable("instance", "Agent", 'label_values(troupe_agent_members{job=~"$job"}, instance)'),
]
SERVER_VARIABLES = [
    variable("server_job", "Control plane (job)", "label_values(troupe_build_info, job)"),
]


def target(expr, legend, ref):
    return {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "range": True,
    }


def panel(kind, title, description, queries, unit="short", width=12, height=8, **options):
    """One panel; `queries` is a list of (expr, legend)."""
    out = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(queries)],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "gridPos": {"w": width, "h": height},
        "options": {},
    }
    if kind == "timeseries":
        out["fieldConfig"]["defaults"]["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "stacking": {"mode": options.get("stack", "none")},
        }
        out["options"] = {"legend": {"displayMode": "table", "placement": "bottom",
                                     "calcs": ["lastNotNull", "max"]},
                          "tooltip": {"mode": "multi"}}
    elif kind == "stat":
        out["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value",
                          "graphMode": "area"}
        thresholds = options.get("thresholds")
        if thresholds:
            out["fieldConfig"]["defaults"]["thresholds"] = {
                "mode": "absolute",
                "steps": [{"color": c, "value": v} for v, c in thresholds],
            }
    return out


def layout(panels):
    """Places panels left to right, wrapping at Grafana's 24 columns; assigns ids."""
    x = y = row_height = 0
    for number, p in enumerate(panels, start=1):
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if x + w > 24:
            x, y, row_height = 0, y + row_height, 0
        p["gridPos"] = {"x": x, "y": y, "w": w, "h": h}
        p["id"] = number
        x += w
        row_height = max(row_height, h)
    return panels


def dashboard(uid, title, description, variables, panels):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["troupe"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "links": [{"type": "dashboards", "tags": ["troupe"], "asDropdown": True,
                   "title": "Troupe", "includeVars": True, "keepTime": True}],
        "templating": {"list": [DATASOURCE_VARIABLE, *variables]},
        "panels": layout(panels),
    }


RATE = "$__rate_interval"

CLUSTER = dashboard(
    "troupe-cluster",
    "Troupe / Cluster",
    "Cluster membership as each node agent sees it: members by status, unreachable members, "
    "leader changes, agent health.",
    AGENT_VARIABLES,
    [
        panel("stat", "Members up", "Up members in the fullest view among the selected agents.",
              [(f'max(troupe_agent_members{{{AGENT}, status="up"}})', "up")], width=6,
              height=4),
        panel("stat", "Unreachable", "Members some node finds unreachable (worst view). "
              "Above 0 for longer than down-after means downing is not happening.",
              [(f"max(troupe_agent_unreachable_members{{{AGENT}}})", "unreachable")],
              width=6, height=4, thresholds=[(None, "green"), (1, "red")]),
        panel("stat", "Leader changes", "Leader changes in the dashboard's time range (the "
              "node that saw the most).",
              [(f"max(increase(troupe_agent_leader_changes_total{{{AGENT}}}[$__range]))",
                "changes")], width=6, height=4),
        panel("stat", "Agents not ready", "Agents whose readiness probe fails (starting, "
              "draining, stopped or fenced).",
              [(f'count(troupe_agent_health{{{AGENT}, state="ready"}} == 0) or vector(0)',
                "not ready")], width=6, height=4, thresholds=[(None, "green"), (1, "orange")]),
        panel("timeseries", "Members by status", "Each status's count in the fullest view.",
              [(f"max by (status) (troupe_agent_members{{{AGENT}}})", "{{status}}")]),
        panel("timeseries", "Unreachable members, per observing node",
              "How many members each node finds unreachable.",
              [(f"troupe_agent_unreachable_members{{{AGENT}}}", "{{instance}}")]),
        panel("timeseries", "Leader changes", "Leader changes per node and interval.",
              [(f"sum by (instance) (increase(troupe_agent_leader_changes_total{{{AGENT}}}[{RATE}]))",
                "{{instance}}")]),
        panel("timeseries", "Agent health", "Agents in each health state (the probes' view: "
              "fenced agents answer 503 fatal on liveness).",
              [(f"sum by (state) (troupe_agent_health{{{AGENT}}})", "{{state}}")],
              stack="normal"),
    ],
)

SINGLETON = 'singleton=~"$singleton"'
SINGLETONS = dashboard(
    "troupe-singletons",
    "Troupe / Singletons",
    "Cluster singletons: which node hosts each one, hand-overs and how long they take, held "
    "and dead-lettered messages.",
    [*AGENT_VARIABLES,
     variable("singleton", "Singleton",
              'label_values(troupe_agent_singleton_hosting{job=~"$job"}, singleton)')],
    [
        panel("stat", "Hosts per singleton", "Nodes running each singleton's instance: 1 is "
              "right, 0 means nobody hosts (messages are held, then dead-lettered), 2 means "
              "two instances.",
              [(f"sum by (singleton) (troupe_agent_singleton_hosting{{{AGENT}, {SINGLETON}}})",
                "{{singleton}}")], width=8, height=5,
              thresholds=[(None, "red"), (1, "green"), (2, "red")]),
        panel("timeseries", "Host", "The node hosting each singleton.",
              [(f"max by (singleton, instance) (troupe_agent_singleton_hosting{{{AGENT}, {SINGLETON}}}) > 0",
                "{{singleton}} on {{instance}}")], width=16, height=5),
        panel("timeseries", "Hand-overs by outcome", "Hand-over rounds finished per interval: "
              "completed (every peer acknowledged) or timed out (hosted without proof that "
              "nobody else does).",
              [(f"sum by (singleton, outcome) (increase(troupe_agent_singleton_hand_overs_total{{{AGENT}, {SINGLETON}}}[{RATE}]))",
                "{{singleton}} {{outcome}}")]),
        panel("timeseries", "Hand-over duration", "From asking the peers to step down to "
              "hosting (p50 and p99 over the interval).",
              [(f"histogram_quantile(0.5, sum by (singleton, le) (rate(troupe_agent_singleton_hand_over_duration_seconds_bucket{{{AGENT}, {SINGLETON}}}[{RATE}])))",
                "{{singleton}} p50"),
               (f"histogram_quantile(0.99, sum by (singleton, le) (rate(troupe_agent_singleton_hand_over_duration_seconds_bucket{{{AGENT}, {SINGLETON}}}[{RATE}])))",
                "{{singleton}} p99")], unit="s"),
        panel("timeseries", "Held messages", "Times messages started waiting for an instance, "
              "and held messages delivered to the new instance, per second.",
              [(f"sum by (singleton) (rate(troupe_agent_singleton_holds_total{{{AGENT}, {SINGLETON}}}[{RATE}]))",
                "{{singleton}} holds"),
               (f"sum by (singleton) (rate(troupe_agent_singleton_messages_flushed_total{{{AGENT}, {SINGLETON}}}[{RATE}]))",
                "{{singleton}} flushed")], unit="ops"),
        panel("timeseries", "Dead-lettered singleton messages", "By cause: the hold buffer "
              "full, held too long, a manager that does not host, no manager on the host.",
              [(f"sum by (singleton, cause) (rate(troupe_agent_singleton_dead_letters_total{{{AGENT}, {SINGLETON}}}[{RATE}]))",
                "{{singleton}} {{cause}}")], unit="ops"),
    ],
)

ROUTER = 'router=~"$router"'
ROUTERS = dashboard(
    "troupe-routers",
    "Troupe / Routers and mailboxes",
    "Cluster routers and watched mailboxes: depth per router and per node.",
    [*AGENT_VARIABLES,
     variable("router", "Router",
              'label_values(troupe_agent_router_mailbox_depth{job=~"$job"}, router)')],
    [
        panel("timeseries", "Depth per router", "Messages waiting in each router's routees, "
              "summed over the cluster.",
              [(f"sum by (router) (troupe_agent_router_mailbox_depth{{{AGENT}, {ROUTER}}})",
                "{{router}}")]),
        panel("timeseries", "Depth per router and node", "Each node's routees of each router: "
              "a smallest-mailbox router keeps these close.",
              [(f"troupe_agent_router_mailbox_depth{{{AGENT}, {ROUTER}}}",
                "{{router}} on {{instance}}")]),
        panel("timeseries", "Watched mailboxes", "Depth of each watched actor path, per node.",
              [(f"troupe_agent_mailbox_depth{{{AGENT}}}", "{{path}} on {{instance}}")]),
        panel("timeseries", "Routed to nobody", "Messages a router dead-lettered because it "
              "had no routees, per second.",
              [(f'sum by (instance) (rate(troupe_agent_dead_letters_total{{{AGENT}, reason="no_routees"}}[{RATE}]))',
                "{{instance}}")], unit="ops"),
    ],
)

DEAD_LETTERS = dashboard(
    "troupe-dead-letters",
    "Troupe / Dead letters",
    "Messages that could not be delivered, by reason and node, and what the control plane "
    "stored.",
    [*AGENT_VARIABLES, *SERVER_VARIABLES],
    [
        panel("stat", "Dead letters per second", "Across the selected agents.",
              [(f"sum(rate(troupe_agent_dead_letters_total{{{AGENT}}}[{RATE}]))", "rate")],
              unit="ops", width=8, height=4),
        panel("stat", "Dead letters in range", "Across the selected agents, in the time range.",
              [(f"sum(increase(troupe_agent_dead_letters_total{{{AGENT}}}[$__range]))",
                "total")], width=8, height=4),
        panel("stat", "Stored by the control plane", "Dead letters the control plane stored "
              "per second.",
              [(f'sum(rate(troupe_ingest_items_total{{{SERVER}, kind="dead_letter"}}[{RATE}]))',
                "stored")], unit="ops", width=8, height=4),
        panel("timeseries", "By reason", "Dead letters per second by reason.",
              [(f"sum by (reason) (rate(troupe_agent_dead_letters_total{{{AGENT}}}[{RATE}]))",
                "{{reason}}")], unit="ops", stack="normal"),
        panel("timeseries", "By node", "Dead letters per second on each node.",
              [(f"sum by (instance) (rate(troupe_agent_dead_letters_total{{{AGENT}}}[{RATE}]))",
                "{{instance}}")], unit="ops"),
    ],
)


def quantile(q, metric):
    return (f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{SERVER}}}[{RATE}])))")


CONTROL_PLANE = dashboard(
    "troupe-control-plane",
    "Troupe / Control plane",
    "The control-plane server: ingest rate and outcomes, batch and store latency, agent lag "
    "and silence, API latency, live-stream clients, CPU and memory.",
    SERVER_VARIABLES,
    [
        panel("stat", "Version", "Server versions running (troupe_build_info).",
              [(f"count by (version) (troupe_build_info{{{SERVER}}})", "{{version}}")],
              width=6, height=4),
        panel("stat", "Ingest, items per second", "Items stored per second, all kinds.",
              [(f"sum(rate(troupe_ingest_items_total{{{SERVER}}}[{RATE}]))", "items/s")],
              unit="ops", width=6, height=4),
        panel("stat", "Failed or rejected batches", "Ingest requests refused or failed by the "
              "store, per second.",
              [(f'sum(rate(troupe_ingest_batches_total{{{SERVER}, outcome=~"failed|rejected"}}[{RATE}])) or vector(0)',
                "failed")], unit="ops", width=6, height=4,
              thresholds=[(None, "green"), (0.001, "red")]),
        panel("stat", "Live streams", "Open server-sent event streams.",
              [(f"sum(troupe_event_stream_clients{{{SERVER}}})", "streams")], width=6,
              height=4),
        panel("timeseries", "Ingest rate by kind", "Items stored per second.",
              [(f"sum by (kind) (rate(troupe_ingest_items_total{{{SERVER}}}[{RATE}]))",
                "{{kind}}")], unit="ops", stack="normal"),
        panel("timeseries", "Ingest batches by outcome", "Ingest requests per second: stored, "
              "duplicate (a retry of a stored batch), rejected, failed.",
              [(f"sum by (outcome) (rate(troupe_ingest_batches_total{{{SERVER}}}[{RATE}]))",
                "{{outcome}}"),
               (f"sum(rate(troupe_ingest_duplicates_dropped_total{{{SERVER}}}[{RATE}]))",
                "duplicates dropped")], unit="reqps"),
        panel("timeseries", "Batch latency", "Ingest request latency, first body byte to "
              "answer.",
              [(quantile(0.5, "troupe_ingest_batch_duration_seconds"), "p50"),
               (quantile(0.99, "troupe_ingest_batch_duration_seconds"), "p99")], unit="s"),
        panel("timeseries", "Store latency", "Time to write one batch (one transaction).",
              [(quantile(0.5, "troupe_store_write_duration_seconds"), "p50"),
               (quantile(0.99, "troupe_store_write_duration_seconds"), "p99")], unit="s"),
        panel("timeseries", "Agent lag", "Receive time minus send time of each agent's latest "
              "batch.",
              [(f"max by (cluster, node) (troupe_agent_lag_seconds{{{SERVER}}})",
                "{{cluster}} {{node}}")], unit="s"),
        panel("timeseries", "Since each agent's last report", "Seconds since the latest batch "
              "of each agent arrived (heartbeats come every 2 s; the series goes away after "
              "the server's --agent-series-ttl-secs).",
              [(f"time() - max by (cluster, node) (troupe_agent_last_report_timestamp_seconds{{{SERVER}}})",
                "{{cluster}} {{node}}")], unit="s"),
        panel("timeseries", "API latency by route", "p99 of HTTP request durations per route "
              "template (ingest, API, dashboard, stream).",
              [(f"histogram_quantile(0.99, sum by (route, le) (rate(troupe_http_server_request_duration_seconds_bucket{{{SERVER}}}[{RATE}])))",
                "{{route}} p99")], unit="s"),
        panel("timeseries", "API requests by status", "HTTP requests per second by status code.",
              [(f"sum by (status) (rate(troupe_http_server_request_duration_seconds_count{{{SERVER}}}[{RATE}]))",
                "{{status}}")], unit="reqps", stack="normal"),
        panel("timeseries", "Server CPU", "CPU seconds per second of each server process.",
              [(f"rate(process_cpu_seconds_total{{{SERVER}}}[{RATE}])", "{{instance}}")],
              unit="percentunit"),
        panel("timeseries", "Server memory", "Resident memory of each server process.",
              [(f"process_resident_memory_bytes{{{SERVER}}}", "{{instance}}")], unit="bytes"),
    ],
)

REPORTERS = dashboard(
    "troupe-agent-reporters",
    "Troupe / Agent reporters",
    "Each agent's reporter: what waits in its buffer, what it ships, what it had to drop.",
    AGENT_VARIABLES,
    [
        panel("timeseries", "Buffer fill", "Items waiting in each reporter's buffer, as a "
              "fraction of its capacity (at 1 it drops the oldest).",
              [(f"sum by (job, instance) (troupe_agent_reporter_buffer_items{{{AGENT}}}) / "
                f"max by (job, instance) (troupe_agent_reporter_buffer_capacity_items{{{AGENT}}})",
                "{{instance}}")], unit="percentunit"),
        panel("timeseries", "Buffer items by kind", "Events and depth samples waiting.",
              [(f"sum by (kind) (troupe_agent_reporter_buffer_items{{{AGENT}}})", "{{kind}}")],
              stack="normal"),
        panel("timeseries", "Dropped items", "Items dropped because a buffer was full, per "
              "second and kind (the control plane never hears of them).",
              [(f"sum by (kind) (rate(troupe_agent_reporter_dropped_total{{{AGENT}}}[{RATE}]))",
                "{{kind}}")], unit="ops"),
        panel("timeseries", "Batches", "Report batches acknowledged and failed attempts (each "
              "retried), per second.",
              [(f"sum by (instance) (rate(troupe_agent_reporter_batches_shipped_total{{{AGENT}}}[{RATE}]))",
                "{{instance}} shipped"),
               (f"sum by (instance) (rate(troupe_agent_reporter_batches_failed_total{{{AGENT}}}[{RATE}]))",
                "{{instance}} failed")], unit="reqps"),
        panel("timeseries", "Events handed to the reporter", "Per second and node.",
              [(f"sum by (instance) (rate(troupe_agent_reporter_events_total{{{AGENT}}}[{RATE}]))",
                "{{instance}}")], unit="ops", width=24),
    ],
)

DASHBOARDS = [CLUSTER, SINGLETONS, ROUTERS, DEAD_LETTERS, CONTROL_PLANE, REPORTERS]


def render(d):
    return json.dumps(d, indent=2, sort_keys=False) + "\n"


def main(argv):
    check = "--check" in argv
    stale = []
    for d in DASHBOARDS:
        path = HERE / f"{d['uid']}.json"
        text = render(d)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    expected = {f"{d['uid']}.json" for d in DASHBOARDS}
    extra = sorted(p.name for p in HERE.glob("*.json") if p.name not in expected)
    if check and (stale or extra):
        for name in stale:
            print(f"dashboards/{name} differs from what dashboards/build.py makes; run "
                  "python3 dashboards/build.py", file=sys.stderr)
        for name in extra:
            print(f"dashboards/{name} is not made by dashboards/build.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
