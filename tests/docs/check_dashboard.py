#!/usr/bin/env python3
"""examples/grafana-dashboard.json is a valid dashboard over the daemon's real metrics: it
parses, every query is valid PromQL (promtool check rules on a rules file made of them), and
every buzz_backfill_* series it reads is one server/src/http/metrics.c exposes, scoped by the job and
instance template variables.
Usage: check_dashboard.py SOURCE_DIR PROMTOOL"""
import json, os, re, subprocess, sys, tempfile

src, promtool = sys.argv[1], sys.argv[2]
with open(os.path.join(src, "examples/grafana-dashboard.json")) as f:
    dash = json.load(f)
with open(os.path.join(src, "server/src/http/metrics.c")) as f:
    metrics_c = f.read()

exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
fail = []
if not exprs:
    fail.append("the dashboard has no queries")
for e in exprs:
    for name in re.findall(r"buzz_backfill_[a-z_]+", e):
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        # metrics.c names each metric once, without the prefix, as a string literal
        if '"%s"' % base[len("buzz_backfill_"):] not in metrics_c:
            fail.append("%s: not a metric of server/src/http/metrics.c" % name)
# issue 19: job and instance template variables, and every series every panel reads is scoped by
# both (a multi-daemon or multi-database Prometheus otherwise mixes them in every panel)
variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
for var in ("job", "instance"):
    v = variables.get(var)
    if v is None or v.get("type") != "query":
        fail.append("no %s template variable (type query)" % var)
    elif not re.search(r"label_values\(buzz_backfill_build_info\b.*,\s*%s\)" % var,
                       json.dumps(v.get("query"))):
        fail.append("the %s variable does not list label_values(buzz_backfill_build_info, %s)"
                    % (var, var))
for e in exprs:
    for m in re.finditer(r"(buzz_backfill_[a-z_]+)(\{[^}]*\})?", e):
        labels = m.group(2) or ""
        if 'job=~"$job"' not in labels or 'instance=~"$instance"' not in labels:
            fail.append("%s: %s is not scoped by $job and $instance" % (e, m.group(1)))
ids = [p["id"] for p in dash["panels"]]
if len(ids) != len(set(ids)):
    fail.append("panel ids repeat")

with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as rules:
    rules.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        rules.write("      - record: dashboard:query_%d\n        expr: %s\n" % (i, json.dumps(e)))
r = subprocess.run([promtool, "check", "rules", rules.name], capture_output=True, text=True)
os.unlink(rules.name)
if r.returncode != 0:
    fail.append("promtool check rules on the queries: " + (r.stdout + r.stderr).strip())
for f_ in fail:
    print(f_)
print("%d queries checked" % len(exprs))
sys.exit(1 if fail else 0)
