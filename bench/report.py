"""`bench report`: one self-contained HTML page (inline CSS and figures; opens with no network).

This first page holds the throughput table, a scaling-efficiency plot per workload, and every run
that did not end ok, with its status and error. Every figure comes from the store.
"""

from __future__ import annotations

import base64
import html
import io
import time
from pathlib import Path

from bench.errors import StoreError
from bench.frame import CONDITIONS, with_efficiency

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>bench report</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:72rem;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.25rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.9rem;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}.bad{color:#b00020}.warn{color:#a15c00}
img{max-width:100%;height:auto}pre{background:#f8f8f8;padding:.5rem;overflow-x:auto;font-size:.8rem}
.note{color:#555;font-size:.9rem}
</style></head><body>
<h1>Distributed training benchmark</h1>
<p class="note">Store {{ store }}; {{ n_runs }} runs ({{ n_ok }} ok); written {{ written }}.</p>

<h2>Throughput</h2>
<p class="note">Throughput = global batch x steps per window / window time, a window's time being the
max over ranks; mean over windows with its 95% confidence interval (Student's t). Runs marked
<span class="warn">unstable</span> have a standard deviation above 10% of the mean or fewer than 3
windows. Efficiency E(N) = thr(N) / (N x thr(1)) against the same backend at one worker, and against
the plain single-process loop (backend <em>single</em>) under the same conditions.</p>
{% for table in tables %}
<h3>{{ table.title }}</h3>
<table><tr><th class="l">backend</th><th>world</th><th>samples/s</th><th>95% CI</th><th>sd/mean</th>
<th>efficiency</th><th>vs plain loop</th><th>step ms</th><th>startup s</th><th>peak RSS MiB</th><th class="l">run</th></tr>
{% for r in table.rows %}<tr><td class="l">{{ r.backend }}</td><td>{{ r.world_size }}</td>
<td{% if r.unstable %} class="warn" title="unstable"{% endif %}>{{ r.thr }}{% if r.unstable %} (unstable){% endif %}</td>
<td>{{ r.ci }}</td><td>{{ r.rel }}</td><td>{{ r.eff }}</td><td>{{ r.eff_plain }}</td><td>{{ r.step }}</td>
<td>{{ r.startup }}</td><td>{{ r.rss }}</td><td class="l">{{ r.run_id }}</td></tr>
{% endfor %}</table>
{% if table.figure %}<img alt="scaling of {{ table.title }}" src="data:image/png;base64,{{ table.figure }}">{% endif %}
{% endfor %}

<h2>Communication</h2>
<p class="note">nccl-tests conventions: S is the whole buffer; time is the mean per op, the max over ranks;
algbw = S / time; busbw = algbw x 2(n-1)/n for allreduce ((n-1)/n for allgather and reduce_scatter, 1 for
broadcast); GB/s = 1e9 bytes/s. The ps backend's figure is a push+pull of S bytes through its servers. The
alpha-beta model (ring: T = 2(n-1)a + 2(n-1)/n S b; parameter server with K servers: T = 2a + n S/K b) is
fitted to each sweep; the limit is measured on the same run (loopback TCP on CPU, device copy on GPU).</p>
{% if comm_rows %}<table><tr><th class="l">backend</th><th>ranks</th><th class="l">dtype</th><th class="l">op</th>
<th>avg busbw GB/s</th><th>peak busbw GB/s</th><th>peak / limit</th><th class="l">model</th><th>a (us)</th>
<th>1/b (GB/s)</th><th>R&sup2;</th><th class="l">run</th></tr>
{% for r in comm_rows %}<tr><td class="l">{{ r.backend }}</td><td>{{ r.world_size }}</td><td class="l">{{ r.dtype }}</td>
<td class="l">{{ r.op }}</td><td>{{ r.avg }}</td><td>{{ r.peak }}</td><td>{{ r.frac }}</td><td class="l">{{ r.model }}</td>
<td>{{ r.alpha }}</td><td>{{ r.bw }}</td><td>{{ r.r2 }}</td><td class="l">{{ r.run_id }}</td></tr>{% endfor %}</table>
{% for f in comm_figures %}<img alt="busbw vs message size" src="data:image/png;base64,{{ f }}">{% endfor %}
{% else %}<p>No communication sweep in this store (<code>bench allreduce</code>, or a <code>bench sweep</code>
without <code>--no-comm</code>, records one).</p>{% endif %}

<h2>Failed and unstable runs</h2>
{% if failed %}<table><tr><th class="l">run</th><th class="l">status</th><th class="l">case</th><th class="l">error</th></tr>
{% for f in failed %}<tr><td class="l">{{ f.run_id }}</td><td class="l bad">{{ f.status }}</td><td class="l">{{ f.case }}</td>
<td class="l">{{ f.message }}{% if f.tail %}<pre>{{ f.tail }}</pre>{% endif %}</td></tr>{% endfor %}</table>
{% else %}<p>None: every stored run ended ok.</p>{% endif %}
</body></html>
"""


def _fmt(value, spec: str, missing: str = "-") -> str:
    if value is None or value != value:
        return missing
    return format(value, spec)


def _scaling_figure(ok_rows) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {b: g.sort_values("world_size") for b, g in ok_rows.groupby("backend")}
    if not any(len(g) > 1 or g["efficiency"].notna().any() for g in series.values()):
        return None
    fig, (ax_thr, ax_eff) = plt.subplots(1, 2, figsize=(10, 3.6))
    sizes = sorted(ok_rows["world_size"].unique())
    for backend, g in series.items():
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
    return _png(fig)


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _comm_section(frame) -> tuple[list[dict], list[str]]:
    """The latest ok sweep per backend, world size and dtype: a table row per op, a figure per world size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
            rows.append({"backend": r.backend, "world_size": r.world_size, "dtype": r.dtype, "op": op,
                         "avg": _fmt(avg, ".3f"), "peak": _fmt(peak, ".3f"),
                         "frac": _fmt(peak / limit if limit else None, ".1%"),
                         "model": metrics["model"] if op == "allreduce" and fit else "-",
                         "alpha": _fmt(fit.get("alpha_s", float("nan")) * 1e6, ".1f") if op == "allreduce" else "-",
                         "bw": _fmt(fit.get("bandwidth_gbps"), ".2f") if op == "allreduce" else "-",
                         "r2": _fmt(fit.get("r2_weighted"), ".3f") if op == "allreduce" else "-",
                         "run_id": r.run_id})
    for (world, dtype), group in latest.groupby(["world_size", "dtype"]):
        fig, ax = plt.subplots(figsize=(7, 3.6))
        limits = []
        for r in group.itertuples():
            ar = [x for x in r.record["allreduce"] if x["op"] == "allreduce"]
            if not ar:
                continue
            line, = ax.plot([x["size"] for x in ar], [x["busbw_gbps"] for x in ar], marker="o", ms=3,
                            label=f"{r.backend} measured")
            fit = r.record["metrics"]["comm"].get("fit")
            if fit:
                n = r.world_size
                factor = 2 * (n - 1) / n
                ax.plot([x["size"] for x in ar],
                        [x["size"] / (t * 1e-6) / 1e9 * factor for x, t in zip(ar, fit["predicted_time_us"])],
                        linestyle=":", color=line.get_color(), label=f"{r.backend} alpha-beta fit")
            ceiling = r.record["metrics"]["comm"].get("ceiling")
            if ceiling:
                limits.append(ceiling["limit_gbps"])
        if limits:
            ax.axhline(sum(limits) / len(limits), color="grey", linestyle="--", linewidth=1,
                       label=f"machine limit ({group.iloc[0]['record']['metrics']['comm']['ceiling']['limit_name']})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size S (bytes)")
        ax.set_ylabel("allreduce busbw (GB/s)")
        ax.set_title(f"allreduce, {world} ranks, {dtype}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        figures.append(_png(fig))
    return rows, figures


def render_report(frame, store_label: str) -> str:
    from jinja2 import Environment

    if frame.empty:
        raise StoreError(f"no runs in {store_label}: nothing to report; run `bench sweep` first")
    ok = with_efficiency(frame)
    tables = []
    for key, group in ok.groupby(CONDITIONS, sort=True):
        latest = group.sort_values("created_at").groupby(["backend", "world_size"]).tail(1)
        latest = latest.sort_values(["backend", "world_size"])
        rows = [{
            "backend": r.backend, "world_size": r.world_size, "thr": _fmt(r.throughput, ",.0f"),
            "ci": f"{_fmt(r.ci_low, ',.0f')} to {_fmt(r.ci_high, ',.0f')}",
            "rel": _fmt(r.rel_stdev, ".1%"), "unstable": bool(r.unstable),
            "eff": _fmt(r.efficiency, ".1%"), "eff_plain": _fmt(r.efficiency_vs_plain, ".1%"),
            "step": _fmt(r.step_time_s * 1000 if r.step_time_s else None, ".2f"),
            "startup": _fmt(r.startup_s, ".2f"), "rss": _fmt(r.peak_rss_mb, ",.0f"), "run_id": r.run_id,
        } for r in latest.itertuples()]
        cond = dict(zip(CONDITIONS, key))
        passes = f" x {cond['backward_passes']} passes" if cond["backward_passes"] != 1 else ""
        title = (f"{cond['workload']} on {cond['device']}: batch {cond['batch_size']}{passes}/worker, "
                 f"{cond['threads']} thread(s)/worker, {cond['data']} data, {cond['image_size']}px")
        tables.append({"title": title, "rows": rows, "figure": _scaling_figure(latest)})
    failed = []
    for r in frame[frame["status"] != "ok"].itertuples():
        err = r.record.get("error") or {}
        failed.append({"run_id": r.run_id, "status": r.status,
                       "case": f"{r.backend} {r.workload} world {r.world_size} ({r.device})",
                       "message": err.get("message", ""), "tail": err.get("tail", "")})
    comm_rows, comm_figures = _comm_section(frame)
    env = Environment(autoescape=True)
    return env.from_string(TEMPLATE).render(
        store=store_label, n_runs=len(frame), n_ok=int((frame["status"] == "ok").sum()),
        written=time.strftime("%Y-%m-%d %H:%M:%S %Z"), tables=tables, failed=failed,
        comm_rows=comm_rows, comm_figures=comm_figures)


def write_report(store, output) -> Path:
    page = render_report(store.load(), html.escape(str(store.path)))
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


def write_report_with_copy(store, output) -> tuple[Path, Path]:
    """Write the report to `output` and a timestamped copy beside it (report-YYYYmmdd-HHMMSS.html)."""
    latest = write_report(store, output)
    stamped = latest.with_name(f"report-{time.strftime('%Y%m%d-%H%M%S')}{latest.suffix}")
    stamped.write_bytes(latest.read_bytes())
    return latest, stamped
