"""Shared pieces of the shipping tests: chart rendering, PromQL names, real processes."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "charts"
DASHBOARDS = ROOT / "dashboards"
RULES = DASHBOARDS / "alerts" / "troupe.rules.yaml"
RULE_TESTS = DASHBOARDS / "alerts" / "troupe.rules.test.yaml"
# The Kubernetes versions every rendered object is validated against (strict schemas): the
# oldest still widely run when this was written, and the newest the pinned
# kubernetes-validate knows.
KUBE_VERSIONS = ["1.34.0", "1.37.0"]


# ---------------------------------------------------------------------------- charts

def render(chart, values=None, name="troupe", namespace="troupe"):
    """Renders `chart` (a directory) offline with the Helm SDK; returns {template: text}."""
    import helm_python as helm

    with helm.Chart.load(str(chart)) as loaded:
        return loaded.render(values or {}, name=name, namespace=namespace, is_install=True)


def objects(manifests):
    """The Kubernetes objects of rendered manifests (NOTES.txt and empty documents left out)."""
    out = []
    for template, text in sorted(manifests.items()):
        if template.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("__template", template)
                out.append(doc)
    return out


def strip(obj):
    return {k: v for k, v in obj.items() if k != "__template"}


def values_files(chart):
    """The chart's test values files (Helm's `ci/` convention)."""
    return sorted((Path(chart) / "ci").glob("*.yaml"))


def load_values(path):
    return yaml.safe_load(Path(path).read_text()) or {}


def one(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


# ---------------------------------------------------------------------------- PromQL

KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "inf", "nan", "atan2",
}
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
TOKEN = re.compile(
    r'\s+|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`'
    r"|[A-Za-z_:][A-Za-z0-9_:]*|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[a-zA-Z]*"
    r"|=~|!~|!=|==|>=|<=|[-+*/%^(){}\[\],=<>@]"
)

# Grafana's built-in and dashboard variables, replaced by values PromQL accepts.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "30s",
    "$__range": "1h",
}


def grafana_to_promql(expr, intervals=None):
    for variable, value in (intervals or GRAFANA_VARIABLES).items():
        expr = expr.replace(variable, value)
    # Dashboard variables only stand in regex matchers (=~"$job"): any value matches.
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)


def tokens(expr):
    pos = 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read PromQL at {expr[pos:]!r} in {expr!r}")
        pos = m.end()
        if not m.group().isspace():
            yield m.group()


def metric_names(expr):
    """The metric names a PromQL expression selects (functions, keywords, labels left out)."""
    toks = list(tokens(expr))
    names = set()
    braces = brackets = 0
    skip_list = False
    depth_list = 0
    for i, tok in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if tok == "{":
            braces += 1
        elif tok == "}":
            braces -= 1
        elif tok == "[":
            brackets += 1
        elif tok == "]":
            brackets -= 1
        elif skip_list:
            if tok == "(":
                depth_list += 1
            elif tok == ")":
                depth_list -= 1
                if depth_list == 0:
                    skip_list = False
        elif braces:
            if tok == "__name__" and toks[i + 1] == "=":
                names.add(toks[i + 2].strip("\"'`"))
        elif brackets:
            pass
        elif tok in LABEL_LISTS:
            if nxt == "(":
                skip_list = True
        elif re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", tok) and tok.lower() not in KEYWORDS:
            # A function or an aggregation (`sum by (x) (...)`) is no metric.
            if nxt != "(" and nxt not in ("by", "without"):
                names.add(tok)
    return names


def dashboard_queries():
    """(where, PromQL) for every panel target and query variable of every dashboard."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for variable in board["templating"]["list"]:
            if variable["type"] != "query":
                continue
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            m = re.fullmatch(r"label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\)", query)
            assert m, f"{path.name} variable {variable['name']}: not label_values(selector, label): {query}"
            out.append((f"{path.name} variable {variable['name']}", m.group(1)))
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append((f"{path.name} panel {panel['title']!r} {target['refId']}", target["expr"]))
    return out


def alert_queries():
    rules = yaml.safe_load(RULES.read_text())
    return [
        (f"alert {rule['alert']}", rule["expr"])
        for group in rules["groups"]
        for rule in group["rules"]
    ]


def promtool_check_expressions(queries, tmp):
    """Runs `promtool check rules` on a rule file holding each query as a recording rule."""
    rules = {"groups": [{"name": "parse", "rules": [
        {"record": f"troupe:parse_check:{i}", "expr": grafana_to_promql(expr)}
        for i, (_, expr) in enumerate(queries)
    ]}]}
    path = Path(tmp) / "expressions.rules.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)


# ---------------------------------------------------------------------------- processes

def binaries():
    """troupe-server and troupe-agent, built (incrementally) first; their paths as cargo says."""
    built = subprocess.run(
        ["cargo", "build", "--quiet", "--message-format=json", "-p", "troupe-server",
         "-p", "troupe-agent", "--bin", "troupe-server", "--bin", "troupe-agent"],
        cwd=ROOT, check=True, timeout=1200, capture_output=True, text=True,
    )
    paths = {}
    for line in built.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message.get("executable"):
            paths[message["target"]["name"]] = Path(message["executable"])
    return paths["troupe-server"], paths["troupe-agent"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2.0, headers=None):
    """(status, body text); status 0 when nothing answers."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout):
        return 0, ""


def wait_until(what, check, timeout, interval=0.25):
    """Polls `check` until it returns something truthy; fails naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class Processes:
    """Processes started by a test; all of them are stopped (TERM, then KILL) at the end."""

    def __init__(self, logs):
        self.logs = Path(logs)
        self.running = []

    def start(self, name, argv, env=None):
        log = open(self.logs / f"{name}.log", "w")
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                   start_new_session=True)
        self.running.append((name, process, log))
        return process

    def log(self, name):
        path = self.logs / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def stop_all(self):
        for _, process, _ in self.running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process, log in self.running:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
            log.close()


@contextmanager
def processes():
    logs = tempfile.mkdtemp(prefix="troupe-ship-")
    started = Processes(logs)
    try:
        yield started
    finally:
        started.stop_all()
        shutil.rmtree(logs, ignore_errors=True)


def sample_names(exposition):
    """The sample names of a Prometheus or OpenMetrics text exposition."""
    names = set()
    for line in exposition.splitlines():
        if not line or line.startswith("#"):
            continue
        names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names
