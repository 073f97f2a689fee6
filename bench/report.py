"""`bench report`: one self-contained HTML page that answers "elastic or Horovod?" for the hardware
the stored runs ran on (inline CSS and figures, no script, no network).

Sections, in order: Verdict (every sentence computed from the store), Throughput and scaling,
Communication, Where the time goes, Startup and rendezvous, Elasticity, Rank map, Environment,
Failed and unstable runs, Methodology. Runs are compared only under equal conditions (CONDITIONS);
where the environments of compared runs differ, the page says how.
"""

from __future__ import annotations

import base64
import html
import io
import math
import time
from pathlib import Path

from bench.backends import BASELINE
from bench.errors import StoreError, UsageError
from bench.frame import CONDITIONS, with_efficiency

PRIMARY = ("elastic", "horovod")  # the question the page answers; other backends are reference points
SIGNIFICANCE = 0.05
ENV_KEYS = ("hostname", "cpu_model", "cpu_count", "platform", "python", "torch", "torch_cuda_build",
            "cuda_devices", "nccl_version", "packages.torchvision", "packages.horovod", "git.commit",
            "git.dirty", "bench")

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>elastic or Horovod? bench report</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:74rem;color:#222;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2.2rem}
h3{font-size:1.02rem;margin-bottom:.3rem}
table{border-collapse:collapse;font-size:.86rem;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:.22rem .45rem;text-align:right;vertical-align:top}th{background:#f4f4f4}
td.l,th.l{text-align:left}.bad{color:#b00020}.warn{color:#a15c00;font-weight:600}.diff{background:#fff3cd}
img{max-width:100%;height:auto;display:block;margin:.6rem 0}pre{background:#f8f8f8;padding:.5rem;overflow-x:auto;font-size:.78rem;max-width:60rem}
.note{color:#555;font-size:.9rem}.verdict li{margin:.3rem 0}.rec{background:#eef6ee;border-left:4px solid #2e7d32;padding:.5rem 1rem}
nav a{margin-right:.8rem;font-size:.9rem}
</style></head><body>
<h1>PyTorch Distributed Elastic or Horovod?</h1>
<p class="note">Store {{ store }}: {{ n_runs }} runs ({{ n_ok }} ok){% if where %}, filtered by {{ where }}{% endif %}.
Hardware: {{ hardware }}. Written {{ written }}.</p>
<nav><a href="#verdict">Verdict</a><a href="#throughput">Throughput</a><a href="#comm">Communication</a>
<a href="#time">Where the time goes</a><a href="#startup">Startup</a><a href="#elasticity">Elasticity</a>
<a href="#ranks">Rank map</a><a href="#env">Environment</a><a href="#failed">Failed and unstable</a>
<a href="#method">Methodology</a></nav>

<h2 id="verdict">Verdict</h2>
{% if verdicts %}<ul class="verdict">{% for v in verdicts %}<li>{{ v }}</li>{% endfor %}</ul>
{% else %}<p>{{ no_verdict }}</p>{% endif %}
{% for line in fairness %}<p class="warn">{{ line }}</p>{% endfor %}
<p>{{ elasticity_summary }}</p>
{% for line in elasticity_lines %}<p>{{ line }}</p>{% endfor %}
<div class="rec"><strong>Recommendation from this data.</strong>{% for r in recommendation %} {{ r }}{% endfor %}</div>

<h2 id="throughput">Throughput and scaling</h2>
{% for table in tables %}
<h3>{{ table.title }}</h3>
<table><tr><th class="l">backend</th><th>world</th><th>samples/s</th><th>95% CI</th><th>sd/mean</th>
<th>efficiency</th><th>vs plain loop</th><th>step ms</th><th>straggler ratio</th><th>peak RSS MiB</th><th class="l">run</th></tr>
{% for r in table.rows %}<tr><td class="l">{{ r.backend }}</td><td>{{ r.world_size }}</td>
<td{% if r.unstable %} class="warn"{% endif %}>{{ r.thr }}{% if r.unstable %} (unstable){% endif %}</td>
<td>{{ r.ci }}</td><td>{{ r.rel }}</td><td>{{ r.eff }}</td><td>{{ r.eff_plain }}</td><td>{{ r.step }}</td>
<td>{{ r.straggler }}</td><td>{{ r.rss }}</td><td class="l">{{ r.run_id }}</td></tr>
{% endfor %}</table>
{% if table.figure %}<img alt="throughput and scaling efficiency of {{ table.title }}" src="data:image/png;base64,{{ table.figure }}">{% endif %}
{% else %}<p>No successful training run in this selection.</p>{% endfor %}

<h2 id="comm">Communication</h2>
{% if comm_rows %}<table><tr><th class="l">backend</th><th>ranks</th><th class="l">dtype</th><th class="l">op</th>
<th>avg busbw GB/s</th><th>peak busbw GB/s</th><th>peak / limit</th><th class="l">model</th><th>a (us)</th>
<th>1/b (GB/s)</th><th>R&sup2;</th><th class="l">run</th></tr>
{% for r in comm_rows %}<tr><td class="l">{{ r.backend }}</td><td>{{ r.world_size }}</td><td class="l">{{ r.dtype }}</td>
<td class="l">{{ r.op }}</td><td>{{ r.avg }}</td><td>{{ r.peak }}</td><td>{{ r.frac }}</td><td class="l">{{ r.model }}</td>
<td>{{ r.alpha }}</td><td>{{ r.bw }}</td><td>{{ r.r2 }}</td><td class="l">{{ r.run_id }}</td></tr>{% endfor %}</table>
{% for f in comm_figures %}<img alt="allreduce busbw vs message size" src="data:image/png;base64,{{ f }}">{% endfor %}
{% else %}<p>No communication sweep in this selection (<code>bench allreduce</code>, or a <code>bench sweep</code>
without <code>--no-comm</code>, records one).</p>{% endif %}

<h2 id="time">Where the time goes</h2>
{% if exposed %}<table><tr><th class="l">workload</th><th class="l">backend</th><th>world</th><th>step ms</th>
<th>plain loop step ms</th><th>exposed communication ms</th><th>share of the step</th></tr>
{% for r in exposed %}<tr><td class="l">{{ r.workload }}</td><td class="l">{{ r.backend }}</td><td>{{ r.world_size }}</td>
<td>{{ r.step }}</td><td>{{ r.plain }}</td><td>{{ r.exposed }}</td><td>{{ r.share }}</td></tr>{% endfor %}</table>
{% if exposed_figure %}<img alt="exposed communication share" src="data:image/png;base64,{{ exposed_figure }}">{% endif %}
{% else %}<p>Needs a plain single-process run (backend <em>single</em>) under the same conditions as the
distributed runs; <code>bench sweep</code> records one unless <code>--no-baseline</code>.</p>{% endif %}

<h2 id="startup">Startup and rendezvous</h2>
{% if startup %}<table><tr><th class="l">workload</th><th class="l">backend</th><th>world</th><th>launch to processes s</th>
<th>rendezvous s</th><th>launch to first step s</th><th class="l">run</th></tr>
{% for r in startup %}<tr><td class="l">{{ r.workload }}</td><td class="l">{{ r.backend }}</td><td>{{ r.world_size }}</td>
<td>{{ r.proc }}</td><td>{{ r.rdzv }}</td><td>{{ r.first }}</td><td class="l">{{ r.run_id }}</td></tr>{% endfor %}</table>
{% else %}<p>No successful training run in this selection.</p>{% endif %}

<h2 id="elasticity">Elasticity</h2>
<p>{{ elasticity_summary }}</p>
{% for line in elasticity_lines %}<p>{{ line }}</p>{% endfor %}
{% if fault_rows %}<table><tr><th class="l">case</th><th class="l">backend</th><th class="l">fault</th><th>world before</th>
<th>world after</th><th>detection s</th><th>recovery s</th><th>new worker's first step s</th><th>steps redone</th>
<th>restarts / resets</th><th>ended after fault s</th><th class="l">status</th><th class="l">run</th></tr>
{% for r in fault_rows %}<tr><td class="l">{{ r.case }}</td><td class="l">{{ r.backend }}</td><td class="l">{{ r.fault }}</td>
<td>{{ r.before }}</td><td>{{ r.after }}</td><td>{{ r.detection }}</td><td>{{ r.recovery }}</td><td>{{ r.join }}</td>
<td>{{ r.redone }}</td><td>{{ r.restarts }}</td><td>{{ r.ended }}</td>
<td class="l{% if r.status != 'ok' %} warn{% endif %}">{{ r.status }}{% if r.error %}: {{ r.error }}{% endif %}</td><td class="l">{{ r.run_id }}</td></tr>{% endfor %}</table>
<p class="note">Detection: from the signal (or the join) to the first sign the system noticed it. Recovery: to the
first training step completed after the run resumed. Steps redone: steps completed before the resume
that had to be trained again (since the last checkpoint or commit). Each row is one run: recovery is
one event per run, so repeat <code>bench fault</code> to see its spread. The plots show samples per second
completed by the process that is rank 0 at the time (batch x world size per step), in 80 equal bins of the
run, time 0 at the signal or the join.</p>
{% for fig in fault_figures %}<img alt="throughput over time, {{ fig.title }}" src="data:image/png;base64,{{ fig.png }}">{% endfor %}
{% endif %}

<h2 id="ranks">Rank map</h2>
{% for m in rank_maps %}<details><summary>{{ m.title }}</summary>
<table><tr><th class="l">role</th><th>rank</th><th>local</th><th>group</th><th>role rank</th><th>restarts</th><th class="l">host</th><th>pid</th><th class="l">phase</th></tr>
{% for r in m.rows %}<tr><td class="l">{{ r.role or "worker" }}</td><td>{{ r.rank }}</td><td>{{ r.local_rank }}</td><td>{{ r.group_rank }}</td>
<td>{{ r.role_rank }}</td><td>{{ r.restart_count }}</td><td class="l">{{ r.host }}</td><td>{{ r.pid }}</td><td class="l">{{ r.phase or "" }}</td></tr>{% endfor %}
</table></details>{% endfor %}

<h2 id="env">Environment</h2>
<p class="note">The fingerprint of the runs on this page. Rows shaded <span class="diff">like this</span>
differ between runs: figures from such runs are not like for like.</p>
<table><tr><th class="l">fact</th><th class="l">value</th></tr>
{% for e in environment %}<tr{% if e.differs %} class="diff"{% endif %}><td class="l">{{ e.key }}</td><td class="l">{{ e.value }}</td></tr>{% endfor %}
</table>

<h2 id="failed">Failed and unstable runs</h2>
{% if failed %}<table><tr><th class="l">run</th><th class="l">status</th><th class="l">case</th><th class="l">error</th></tr>
{% for f in failed %}<tr><td class="l">{{ f.run_id }}</td><td class="l bad">{{ f.status }}</td><td class="l">{{ f.case }}</td>
<td class="l">{{ f.message }}{% if f.tail %}<pre>{{ f.tail }}</pre>{% endif %}</td></tr>{% endfor %}</table>
{% else %}<p>No failed run: every run in this selection ended ok.</p>{% endif %}
{% if unstable %}<p>Unstable (standard deviation above 10% of the mean, or fewer than 3 windows):</p><ul>
{% for u in unstable %}<li>{{ u }}</li>{% endfor %}</ul>{% else %}<p>No unstable result.</p>{% endif %}

<h2 id="method">Methodology</h2>
<ul>
<li><strong>Windows.</strong> After W warm-up steps (never timed), each rank times K consecutive steps per window,
for R windows; all ranks meet at a barrier and the device is synchronised before each window, outside the timed
region. A window's time is the max over ranks. Throughput = global batch x K / window time (samples/s).</li>
<li><strong>Uncertainty.</strong> Mean over windows with a 95% confidence interval of the mean (Student's t). A
result is unstable when its standard deviation exceeds 10% of its mean or it has fewer than 3 windows (pyperf's
rules). Two backends differ significantly when Welch's t-test on their per-window throughputs gives p &lt; {{ alpha }}.</li>
<li><strong>Scaling.</strong> Weak scaling (fixed per-worker batch). Efficiency E(N) = thr(N) / (N x thr(1)), thr(1) the
same backend at one worker under the same conditions; also against the plain single-process loop.</li>
<li><strong>Exposed communication</strong> = step time at N workers - step time of the plain loop (one process, no
wrapper) at the same per-worker batch, as a share of the step.</li>
<li><strong>Communication</strong> follows nccl-tests: algbw = S / t, busbw = algbw x 2(n-1)/n (allreduce), t the mean
per op and the max over ranks, GB/s = 1e9 bytes/s; each size checked for wrong elements.</li>
<li><strong>Startup</strong>: launch to worker processes, rendezvous (process-group initialisation), launch to the end of
the first step (max over ranks).</li>
<li><strong>Fairness.</strong> The harness sets threads (OMP_NUM_THREADS, torch), seed, batch, data, dtype and device
placement identically for every backend; only runs with equal conditions are compared, and the latest run of each
case is shown. Every figure names the run it comes from (<code>bench list</code>).</li>
</ul>
</body></html>
"""


# ---------------------------------------------------------------- helpers
def _fmt(value, spec: str, missing: str = "-") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, spec)


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cond_title(cond: dict) -> str:
    passes = f" x {cond['backward_passes']} passes" if cond["backward_passes"] != 1 else ""
    return (f"{cond['workload']} on {cond['device']}: batch {cond['batch_size']}{passes}/worker, "
            f"{cond['threads']} thread(s)/worker, {cond['data']} data, {cond['image_size']}px")


def _flat_env(env: dict) -> dict:
    out = {}
    for key in ENV_KEYS:
        value = env
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[key] = value
    for name, value in (env.get("variables") or {}).items():
        out[f"${name}"] = value
    return out


def env_differences(records: list[dict]) -> list[str]:
    """Fingerprint facts that differ between these runs."""
    flats = [_flat_env(r.get("environment") or {}) for r in records]
    keys = sorted(set().union(*flats)) if flats else []
    return [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1 and k not in ("bench",)]


def latest_cases(ok):
    """The latest ok run of each (conditions, backend, world size)."""
    return ok.sort_values("created_at").groupby([*CONDITIONS, "backend", "world_size"]).tail(1)


def compare(a_row, b_row) -> dict:
    """Welch's t-test on two runs' per-window throughputs, and the relative difference of means."""
    from scipy.stats import ttest_ind

    a = a_row.record["metrics"]["throughput"]["per_window"]
    b = b_row.record["metrics"]["throughput"]["per_window"]
    p = float(ttest_ind(a, b, equal_var=False).pvalue) if len(a) > 1 and len(b) > 1 else float("nan")
    return {"ratio": a_row.throughput / b_row.throughput, "p": p, "n": (len(a), len(b)),
            "significant": bool(p == p and p < SIGNIFICANCE)}


# ---------------------------------------------------------------- sections
def verdict_section(cases) -> tuple[list[str], list[str], list[dict]]:
    """Sentences per workload and world size, fairness notes, and the comparisons behind them."""
    sentences, fairness, comparisons = [], [], []
    for key, group in cases.groupby([*CONDITIONS, "world_size"], sort=True):
        cond = dict(zip([*CONDITIONS, "world_size"], key))
        rows = {r.backend: r for r in group.itertuples()}
        where = (f"{cond['workload']}, {cond['world_size']} worker(s) on {cond['device']} "
                 f"(batch {cond['batch_size']}/worker, {cond['threads']} thread(s)/worker, {cond['data']} data)")
        if all(b in rows for b in PRIMARY):
            e, h = rows["elastic"], rows["horovod"]
            c = compare(e, h)
            faster, slower = (e, h) if c["ratio"] >= 1 else (h, e)
            pct = (max(c["ratio"], 1 / c["ratio"]) - 1) * 100
            figures = (f"elastic {e.throughput:,.0f} vs horovod {h.throughput:,.0f} samples/s; "
                       f"Welch's t-test p = {c['p']:.3g} over {c['n'][0]} + {c['n'][1]} windows")
            flags = [r.backend for r in (e, h) if r.unstable]
            caution = f" Caution: {', '.join(flags)} unstable." if flags else ""
            if c["significant"]:
                sentences.append(f"{where}: {faster.backend} is faster by {pct:.1f}% ({figures}).{caution}")
            else:
                sentences.append(f"{where}: no significant difference ({faster.backend} ahead by {pct:.1f}%, "
                                 f"{figures}).{caution}")
            comparisons.append({"cond": cond, "winner": faster.backend if c["significant"] else None,
                                "pct": pct, "p": c["p"]})
            differs = env_differences([e.record, h.record])
            if differs:
                fairness.append(f"{where}: the elastic and horovod runs differ in {', '.join(differs)}; "
                                "their comparison is not like for like.")
        for other in sorted(set(rows) - set(PRIMARY) - {BASELINE}):  # reference backends (the PS)
            best = max((rows[b] for b in PRIMARY if b in rows), key=lambda r: r.throughput, default=None)
            if best is None:
                continue
            c = compare(rows[other], best)
            rel = (1 - c["ratio"]) * 100
            word = "slower" if rel > 0 else "faster"
            sig = "" if c["significant"] else ", not a significant difference"
            opts = ", ".join(f"{k}={v}" for k, v in rows[other].record["spec"]["backend_options"].items())
            sentences.append(f"{where}: the {other} baseline ({opts}) is {abs(rel):.1f}% {word} than "
                             f"{best.backend} (p = {c['p']:.3g}{sig}).")
    return sentences, fairness, comparisons


def recommendation(comparisons: list[dict], cases, comm) -> list[str]:
    lines = []
    if not comparisons:
        return ["Run both elastic and horovod under the same conditions (bench sweep) for a recommendation."]
    # At one worker nothing is distributed: those comparisons measure the wrappers' overhead only, so
    # the choice rests on the multi-worker cases when there are any.
    distributed = [c for c in comparisons if c["cond"]["world_size"] > 1]
    single = [c for c in comparisons if c["cond"]["world_size"] == 1]
    basis = distributed or comparisons
    wins = {b: [c for c in basis if c["winner"] == b] for b in PRIMARY}
    ties = [c for c in basis if c["winner"] is None]
    total = len(basis)
    scope = "multi-worker " if distributed else ""
    for backend, won in wins.items():
        if won:
            where = "; ".join(f"{c['cond']['workload']} at {c['cond']['world_size']} worker(s) (+{c['pct']:.1f}%)"
                              for c in won)
            lines.append(f"{backend} was significantly faster in {len(won)} of {total} {scope}comparison(s): "
                         f"{where}.")
    if ties:
        lines.append(f"{len(ties)} of {total} {scope}comparison(s) showed no significant difference.")
    leader, other = sorted(PRIMARY, key=lambda b: -len(wins[b]))
    if len(wins[leader]) > len(wins[other]):
        lines.append(f"For throughput on this hardware, choose {leader}.")
    else:
        lines.append("Throughput does not separate them here: choose on operations (launcher, elasticity, "
                     "ecosystem).")
    if distributed and single:
        overhead = {b: sum(c["winner"] == b for c in single) for b in PRIMARY}
        lines.append("At one worker, where only the wrapper's overhead is measured: " +
                     ", ".join(f"{b} faster in {k} of {len(single)}" for b, k in overhead.items()) + ".")
    start = cases[cases["backend"].isin(PRIMARY)].groupby("backend")["startup_s"].median()
    if len(start) == 2:
        quick, slow = start.idxmin(), start.idxmax()
        lines.append(f"{quick} reached its first step sooner (median {start[quick]:.1f} s vs "
                     f"{start[slow]:.1f} s for {slow}).")
    if comm:
        best = {}
        for r in comm:
            if r["op"] == "allreduce" and r["backend"] in PRIMARY and r["peak_value"] is not None:
                best[r["backend"]] = max(best.get(r["backend"], 0.0), r["peak_value"])
        if len(best) == 2:
            top = max(best, key=best.get)
            other = [b for b in best if b != top][0]
            lines.append(f"{top}'s allreduce reached the higher bus bandwidth ({best[top]:.2f} vs "
                         f"{best[other]:.2f} GB/s peak).")
    return lines


def throughput_tables(ok) -> list[dict]:
    plt = _plt()
    tables = []
    for key, group in ok.groupby(CONDITIONS, sort=True):
        cond = dict(zip(CONDITIONS, key))
        latest = group.sort_values("created_at").groupby(["backend", "world_size"]).tail(1)
        latest = latest.sort_values(["backend", "world_size"])
        rows = [{
            "backend": r.backend, "world_size": r.world_size, "thr": _fmt(r.throughput, ",.0f"),
            "ci": f"{_fmt(r.ci_low, ',.0f')} to {_fmt(r.ci_high, ',.0f')}",
            "rel": _fmt(r.rel_stdev, ".1%"), "unstable": bool(r.unstable),
            "eff": _fmt(r.efficiency, ".1%"), "eff_plain": _fmt(r.efficiency_vs_plain, ".1%"),
            "step": _fmt(r.step_time_s * 1000 if r.step_time_s else None, ".2f"),
            "straggler": _fmt(r.record["metrics"].get("straggler_ratio"), ".3f"),
            "rss": _fmt(r.peak_rss_mb, ",.0f"), "run_id": r.run_id,
        } for r in latest.itertuples()]
        fig, (ax_thr, ax_eff) = plt.subplots(1, 2, figsize=(10, 3.6))
        sizes = sorted(latest["world_size"].unique())
        for backend, g in latest.groupby("backend"):
            err = [g["throughput"] - g["ci_low"], g["ci_high"] - g["throughput"]]
            ax_thr.errorbar(g["world_size"], g["throughput"], yerr=err, marker="o", capsize=3, label=backend)
            if g["efficiency"].notna().any():
                ax_eff.plot(g["world_size"], g["efficiency"], marker="o", label=backend)
        ax_eff.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ideal")
        for ax, title in ((ax_thr, "throughput (samples/s, 95% CI)"), (ax_eff, "scaling efficiency")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(s) for s in sizes])
            ax.set_xlabel("world size (workers)")
            ax.set_title(title, fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        ax_eff.set_ylim(bottom=0)
        fig.tight_layout()
        tables.append({"title": _cond_title(cond), "rows": rows, "figure": _png(fig)})
    return tables


def comm_section(frame) -> tuple[list[dict], list[str]]:
    """The latest ok sweep per backend, world size and dtype: a row per op, a figure per world size."""
    plt = _plt()
    comm = frame[(frame["status"] == "ok") & (frame["task"] == "comm")]
    if comm.empty:
        return [], []
    comm = comm.assign(dtype=[r["spec"]["comm"]["dtype"] for r in comm["record"]])
    latest = comm.sort_values("created_at").groupby(["backend", "world_size", "dtype"]).tail(1)
    rows, figures = [], []
    for r in latest.sort_values(["world_size", "backend"]).itertuples():
        metrics = r.record["metrics"]["comm"]
        fit, limit = metrics.get("fit") or {}, (metrics.get("ceiling") or {}).get("limit_gbps")
        for op, avg in metrics["avg_busbw_gbps"].items():
            peak = max(x["busbw_gbps"] for x in r.record["allreduce"] if x["op"] == op)
            is_ar = op == "allreduce" and bool(fit)
            rows.append({"backend": r.backend, "world_size": r.world_size, "dtype": r.dtype, "op": op,
                         "avg": _fmt(avg, ".3f"), "peak": _fmt(peak, ".3f"), "peak_value": peak,
                         "frac": _fmt(peak / limit if limit else None, ".1%"),
                         "model": metrics["model"] if is_ar else "-",
                         "alpha": _fmt(fit["alpha_s"] * 1e6, ".1f") if is_ar else "-",
                         "bw": _fmt(fit["bandwidth_gbps"], ".2f") if is_ar else "-",
                         "r2": _fmt(fit["r2_weighted"], ".3f") if is_ar else "-", "run_id": r.run_id})
    for (world, dtype), group in latest.groupby(["world_size", "dtype"]):
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        limits, limit_name = [], ""
        for r in group.itertuples():
            ar = [x for x in r.record["allreduce"] if x["op"] == "allreduce"]
            if not ar:
                continue
            line, = ax.plot([x["size"] for x in ar], [x["busbw_gbps"] for x in ar], marker="o", ms=3,
                            label=f"{r.backend} measured")
            fit = r.record["metrics"]["comm"].get("fit")
            if fit:
                factor = 2 * (world - 1) / world
                ax.plot([x["size"] for x in ar],
                        [x["size"] / (t * 1e-6) / 1e9 * factor for x, t in zip(ar, fit["predicted_time_us"])],
                        linestyle=":", color=line.get_color(), label=f"{r.backend} alpha-beta model")
            ceiling = r.record["metrics"]["comm"].get("ceiling")
            if ceiling:
                limits.append(ceiling["limit_gbps"])
                limit_name = ceiling["limit_name"]
        if limits:
            ax.axhline(sum(limits) / len(limits), color="grey", linestyle="--", linewidth=1,
                       label=f"machine limit ({limit_name})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size S (bytes)")
        ax.set_ylabel("allreduce busbw (GB/s)")
        ax.set_title(f"allreduce, {world} ranks, {dtype}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        figures.append(_png(fig))
    return rows, figures


def exposed_section(cases) -> tuple[list[dict], str | None]:
    plain = cases[(cases["backend"] == BASELINE) & (cases["world_size"] == 1)].set_index(CONDITIONS)["step_time_s"]
    rows = []
    for r in cases[cases["backend"] != BASELINE].sort_values(["workload", "backend", "world_size"]).itertuples():
        key = tuple(getattr(r, c) for c in CONDITIONS)
        base = plain.get(key)
        if base is None or not r.step_time_s:
            continue
        exposed = r.step_time_s - base
        rows.append({"workload": r.workload, "backend": r.backend, "world_size": r.world_size,
                     "step": _fmt(r.step_time_s * 1000, ".2f"), "plain": _fmt(base * 1000, ".2f"),
                     "exposed": _fmt(exposed * 1000, ".2f"), "share": _fmt(exposed / r.step_time_s, ".1%"),
                     "share_value": exposed / r.step_time_s})
    if not rows:
        return [], None
    plt = _plt()
    labels = [f"{r['workload']}\n{r['backend']} x{r['world_size']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(rows)), 3.6))
    ax.bar(range(len(rows)), [100 * r["share_value"] for r in rows], color="#5b8db8")
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("exposed communication (% of step)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return rows, _png(fig)


def failed_and_unstable(frame) -> tuple[list[dict], list[str]]:
    failed = []
    for r in frame[frame["status"] != "ok"].itertuples():
        err = r.record.get("error") or {}
        what = r.workload if r.task == "train" else "communication sweep"
        message = err.get("message", "")
        failed.append({"run_id": r.run_id, "status": r.status,
                       "case": f"{r.backend} {what} world {r.world_size} ({r.device})",
                       "message": message, "tail": err.get("tail", "")})
    unstable = [f"{r.run_id}: {r.backend} {r.workload} world {r.world_size}, sd/mean {r.rel_stdev:.1%} over "
                f"{r.record['metrics']['throughput']['n']} windows"
                for r in frame[(frame["status"] == "ok") & (frame["task"] == "train") &
                               (frame["unstable"] == True)].itertuples()]  # noqa: E712 (pandas)
    return failed, unstable


def environment_section(records: list[dict]) -> list[dict]:
    flats = [_flat_env(r.get("environment") or {}) for r in records]
    keys = [k for k in ENV_KEYS] + sorted({k for f in flats for k in f if k.startswith("$")})
    rows = []
    for key in keys:
        values = [f.get(key) for f in flats]
        distinct = list(dict.fromkeys(repr(v) for v in values))
        if len(distinct) == 1:
            rows.append({"key": key, "value": "-" if values[0] in (None, "", []) else str(values[0]),
                         "differs": False})
        else:
            per_run = "; ".join(f"{r['run_id']}: {f.get(key)}" for r, f in zip(records, flats))
            rows.append({"key": key, "value": per_run, "differs": True})
    return rows


def apply_where(frame, where: list[str] | None):
    """--where KEY=V1,V2 (repeatable): keep runs whose column KEY is one of the values."""
    for clause in where or []:
        if "=" not in clause:
            raise UsageError(f"--where {clause!r}: expected KEY=VALUE[,VALUE...], for example backend=elastic,horovod")
        key, values = clause.split("=", 1)
        if key not in frame.columns or key == "record":
            allowed = ", ".join(c for c in frame.columns if c != "record")
            raise UsageError(f"--where {clause!r}: unknown key {key!r}; use one of {allowed}")
        wanted = set(values.split(","))
        frame = frame[frame[key].astype(str).isin(wanted)]
    return frame


def _fault_case(rec: dict) -> tuple:
    spec, f = rec["spec"], rec["spec"]["fault"]
    what = f"SIG{f['signal']} to 1 of {spec['world_size']} workers" if f["scenario"] == "kill" else \
        f"a worker joins {spec['world_size']} running"
    return (f"{spec['workload']}: {what}, checkpoint/commit every {f['checkpoint_every']} steps",)


def _median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def elasticity_section(faults) -> tuple[str, list[str], list[dict], list[dict]]:
    """Fault runs side by side: one row per run, a sentence and a throughput-over-time figure per case."""
    if faults.empty:
        return ("No fault-injection run is stored, so this page makes no claim about recovery; "
                "`bench fault --backend elastic` and `--backend horovod` record them.", [], [], [])
    rows, cases = [], {}
    for r in faults.sort_values("created_at").itertuples():
        rec = r.record
        f = (rec.get("metrics") or {}).get("fault") or {}
        case = _fault_case(rec)[0]
        cases.setdefault(case, {}).setdefault(r.backend, []).append(rec)
        restarts = f"{f.get('restarts', 0)} / {f.get('resets', 0)}"
        rows.append({"case": case, "backend": r.backend,
                     "fault": f"step {f['fault']['step']}" if f.get("fault") else "not injected",
                     "before": _fmt(f.get("world_before"), "d"), "after": _fmt(f.get("world_after"), "d"),
                     "detection": _fmt(f.get("detection_s"), ".2f"), "recovery": _fmt(f.get("recovery_s"), ".2f"),
                     "join": _fmt(f.get("join_contributes_s"), ".2f"), "redone": _fmt(f.get("steps_redone"), "d"),
                     "restarts": restarts, "ended": _fmt(f.get("ended_after_fault_s"), ".1f"),
                     "status": r.status, "error": (rec.get("error") or {}).get("message"), "run_id": r.run_id})
    lines, figures = [], []
    for case, by_backend in cases.items():
        parts = []
        for backend in sorted(by_backend, key=lambda b: (b not in PRIMARY, b)):
            recs = by_backend[backend]
            fs = [(x.get("metrics") or {}).get("fault") or {} for x in recs]
            ok = [f for x, f in zip(recs, fs) if x["status"] == "ok"]
            n = len(recs)
            if ok:
                rec_s = _median([f.get("recovery_s") for f in ok])
                after = sorted({f.get("world_after") for f in ok if f.get("world_after") is not None})
                redone = _median([f.get("steps_redone") for f in ok])
                parts.append(f"{backend} came through {len(ok)} of {n} run(s), recovering in {_fmt(rec_s, '.2f')} s "
                             f"(median) at world size {', '.join(map(str, after))} with {_fmt(redone, '.0f')} step(s) redone")
            else:
                statuses = ", ".join(sorted({x["status"] for x in recs}))
                hang = _median([f.get("hang_observed_s") for f in fs])
                parts.append(f"{backend} did not come through ({statuses} in {n} run(s)"
                             + (f"; hang noticed after {hang:.1f} s" if hang is not None else "") + ")")
        lines.append(f"{case}: " + "; ".join(parts) + ".")
        png = fault_timeline_figure(case, by_backend)
        if png:
            figures.append({"title": case, "png": png})
    summary = (f"{len(faults)} fault-injection run(s) in {len(cases)} case(s). Figures are per run "
               "(a recovery is one event), from the workers' journals and, for torchrun, the agent's own events.")
    return summary, lines, rows, figures


def fault_timeline_figure(case: str, by_backend: dict) -> str | None:
    """Samples/s over time around the fault for the latest run of each backend: the fault at t = 0,
    recovery marked."""
    plt = _plt()
    series = []
    for backend, recs in sorted(by_backend.items()):  # a stable order: the same colours in every figure
        shown = ([x for x in recs if x["status"] == "ok"] or recs)[-1]  # the latest that came through, if any
        f = (shown.get("metrics") or {}).get("fault") or {}
        tl, fired = f.get("timeline") or {}, f.get("fault")
        if not tl.get("t") or not fired:
            continue
        offset = tl["t0"] - fired["time"]
        series.append((backend, [t + offset for t in tl["t"]], tl["samples_per_s"], f.get("recovery_s"),
                       f.get("hang_observed_s")))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for backend, ts, thr, recovery, hang in series:
        color = ax.step(ts, thr, where="post", label=backend)[0].get_color()
        if recovery is not None:
            ax.axvline(recovery, color=color, linestyle=":", linewidth=1.5)
            ax.annotate(f"{backend} recovered", (recovery, max(thr) * 0.95), color=color, fontsize=8,
                        rotation=90, va="top", ha="right")
        elif hang is not None:
            ax.annotate(f"{backend}: no step since", (0, max(thr) * 0.5), color=color, fontsize=8)
    ax.axvline(0, color="black", linewidth=1.5)
    ax.annotate("fault", (0, ax.get_ylim()[1] * 0.98), color="black", fontsize=8, va="top", ha="left")
    ax.set_xlabel("seconds since the fault")
    ax.set_ylabel("samples/s")
    ax.set_title(case, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def render_report(frame, store_label: str, where: list[str] | None = None) -> str:
    from jinja2 import Environment

    if frame.empty:
        raise StoreError(f"no runs in {store_label}: nothing to report; run `bench sweep` first")
    frame = apply_where(frame, where)
    if frame.empty:
        raise UsageError(f"no run in {store_label} matches --where {' '.join(where or [])}; "
                         "`bench list` shows what is stored")
    ok = with_efficiency(frame)
    cases = latest_cases(ok) if not ok.empty else ok
    verdicts, fairness, comparisons = verdict_section(cases) if not ok.empty else ([], [], [])
    comm_rows, comm_figures = comm_section(frame)
    exposed, exposed_figure = exposed_section(cases) if not ok.empty else ([], None)
    failed, unstable = failed_and_unstable(frame)
    shown = [r.record for r in cases.itertuples()] if not ok.empty else []
    shown += [r.record for r in frame[(frame["status"] == "ok") & (frame["task"] == "comm")].itertuples()]
    env_rows = environment_section(shown or list(frame["record"]))
    hardware = "; ".join(sorted({f"{r['environment'].get('hostname')}: {r['environment'].get('cpu_model')}, "
                                 f"{r['environment'].get('cpu_count')} CPUs, "
                                 f"{len(r['environment'].get('cuda_devices') or [])} GPU(s)"
                                 for r in (shown or list(frame["record"])) if r.get("environment")}))
    startup = [{"workload": r.workload, "backend": r.backend, "world_size": r.world_size,
                "proc": _fmt(r.record["metrics"]["startup"]["launch_to_process_s"], ".2f"),
                "rdzv": _fmt(r.record["metrics"]["startup"]["rendezvous_s"], ".3f"),
                "first": _fmt(r.startup_s, ".2f"), "run_id": r.run_id}
               for r in cases.sort_values(["workload", "backend", "world_size"]).itertuples()] if not ok.empty else []
    rank_maps = [{"title": f"{r.run_id}: {r.backend} {r.workload if r.task == 'train' else 'communication'} "
                           f"world {r.world_size} ({r.status})",
                  "rows": sorted(r.record.get("rank_map") or [], key=lambda x: (x.get("phase") != "before", x["rank"]))}
                 for r in frame.sort_values("created_at").itertuples()]
    faults = frame[frame["task"] == "fault"] if "task" in frame else frame.iloc[0:0]
    elasticity, elasticity_lines, fault_rows, fault_figures = elasticity_section(faults)
    no_verdict = ("No workload and world size has ok runs of both elastic and horovod under the same "
                  "conditions in this selection, so there is nothing to compare; `bench sweep --backend "
                  "elastic,horovod` records them.")
    env = Environment(autoescape=True)
    return env.from_string(TEMPLATE).render(
        store=store_label, where=" ".join(where or []), n_runs=len(frame),
        n_ok=int((frame["status"] == "ok").sum()), hardware=hardware or "unknown",
        written=time.strftime("%Y-%m-%d %H:%M:%S %Z"), verdicts=verdicts, no_verdict=no_verdict,
        fairness=fairness, elasticity_summary=elasticity, elasticity_lines=elasticity_lines,
        fault_rows=fault_rows, fault_figures=fault_figures,
        recommendation=recommendation(comparisons, cases, comm_rows),
        tables=throughput_tables(ok) if not ok.empty else [], comm_rows=comm_rows, comm_figures=comm_figures,
        exposed=exposed, exposed_figure=exposed_figure, startup=startup, rank_maps=rank_maps,
        environment=env_rows, failed=failed, unstable=unstable, alpha=SIGNIFICANCE)


def write_report(store, output, where: list[str] | None = None) -> Path:
    page = render_report(store.load(), html.escape(str(store.path)), where)
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


def write_report_with_copy(store, output, where: list[str] | None = None) -> tuple[Path, Path]:
    """Write the report to `output` and a timestamped copy beside it (report-YYYYmmdd-HHMMSS.html)."""
    latest = write_report(store, output, where)
    stamped = latest.with_name(f"report-{time.strftime('%Y%m%d-%H%M%S')}{latest.suffix}")
    stamped.write_bytes(latest.read_bytes())
    return latest, stamped
