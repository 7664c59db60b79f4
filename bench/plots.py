"""Charts of the benchmark figures: PNG files under ``img/`` next to the report.

    python bench/plots.py [--out docs/benchmarks.md]

Reads the JSON files that the benchmarks wrote next to the report and draws:

* ``img/throughput-vs-record-size.png``: produce and consume throughput (MB/s and
  records/s) against record size, from ``benchmarks.json`` (bench/foundation.py: kcat
  at 100 B, 1 KiB and 16 KiB, with the dd and sendfile baselines of the same run) and
  ``benchmarks-peers.json`` (bench/peers.py: Strata and NATS JetStream from Python at
  100 B and 1 KiB), where present;
* ``img/latency-vs-load.png``: produce-to-consume p50/p99/p99.9 against offered load,
  from ``benchmarks-latency-sweep.json`` (bench/latency_sweep.py).

A chart whose input is missing is skipped. bench/run_all.py calls ``make_plots``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SIZES = {100: "100 B", 1024: "1 KiB", 16384: "16 KiB"}


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _stamp(*parts: dict | None) -> str:
    """Command, date and machine of the runs a chart is drawn from."""
    lines = []
    for d in parts:
        if d:
            m = d["machine"]
            lines.append(f"{d['command']}  ({d['date']}; {m['nproc']} CPUs {m['cpu_model']})")
    return "\n".join(lines)


def _log_y(ax) -> None:
    """Log scale with plain-number labels at 1, 2 and 5 of each decade."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _size_axis(ax) -> None:
    ax.set_xscale("log")
    ax.set_xticks(list(SIZES), list(SIZES.values()))
    ax.minorticks_off()
    ax.set_xlim(70, 24000)
    ax.set_xlabel("record size (value bytes)")
    ax.grid(True, which="major", alpha=0.3)


def throughput_chart(found: dict | None, peers: dict | None, out: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not found and not peers:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(12, 9), sharex=True)
    # (operation, label, line style, [(record size, MB/s, records/s or None)])
    series: list[tuple[str, str, dict, list[tuple[int, float, float | None]]]] = []

    def add(op: str, label: str, style: dict, pts: list[tuple[int, float, float | None]]) -> None:
        if pts:
            series.append((op, label, style, sorted(pts)))

    if found:
        prod = [(w["record_size"], w["median"]["mb_per_s"], w["median"]["records_per_s"])
                for w in found.get("produce", [])]
        add("produce", "Strata, kcat (foundation)", {"color": "C0", "marker": "o", "ls": "-"}, prod)
        dd = [(w["record_size"], w["dd_median"]["mb_per_s"], None) for w in found.get("produce", [])]
        add("produce", "baseline: dd into the page cache", {"color": "0.4", "marker": "s", "ls": "--"}, dd)
        cons = found.get("consume", {})
        client = cons.get("client", "kcat")
        add("consume", f"Strata, {client} (foundation)", {"color": "C0", "marker": "o", "ls": "-"},
            [(w["record_size"], w["median"]["mb_per_s"], w["median"]["records_per_s"]) for w in cons.get("runs", [])])
        sf = [(w["record_size"], w["sendfile_median"]["mb_per_s"], None)
              for w in cons.get("runs", []) if w.get("sendfile_median")]
        add("consume", "baseline: plain sendfile over loopback", {"color": "0.4", "marker": "s", "ls": "--"}, sf)
    if peers:
        for key, label, style in (
                ("strata_python", "Strata, confluent-kafka from Python (peers)",
                 {"color": "C2", "marker": "^", "ls": "-."}),
                ("jetstream_python", "NATS JetStream, nats-py (peers)",
                 {"color": "C3", "marker": "v", "ls": ":"})):
            for op in ("produce", "consume"):
                pts = [(w["record_size"], w["median"][key]["mb_per_s"], w["median"][key]["records_per_s"])
                       for w in peers.get("workloads", []) if w["op"] == op]
                add(op, label, style, pts)

    for col, op in enumerate(("produce", "consume")):
        for o, label, style, pts in series:
            if o != op:
                continue
            x = [p[0] for p in pts]
            axes[0][col].plot(x, [p[1] for p in pts], label=label, lw=2, ms=7, **style)
            if pts[0][2] is not None:  # baselines move bytes, not records: MB/s only
                axes[1][col].plot(x, [p[2] for p in pts], label=label, lw=2, ms=7, **style)
        axes[0][col].set_title(f"{op.capitalize()}, one partition / stream")
        axes[0][col].set_ylabel("MB/s (10⁶ bytes of record values per second; log scale)")
        axes[1][col].set_ylabel("records/s (log scale)")
        for row in (0, 1):
            ax = axes[row][col]
            _log_y(ax)
            _size_axis(ax)
            ax.legend(fontsize=8, loc="best")
        axes[0][col].tick_params(labelbottom=True)
    fig.suptitle("Strata throughput against record size (medians; baselines measured in the same run)")
    fig.text(0.01, 0.005, _stamp(found, peers), fontsize=7, va="bottom", family="monospace")
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def latency_chart(sweep: dict | None, out: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not sweep or not sweep.get("runs"):
        return None
    runs = sorted(sweep["runs"], key=lambda r: r["rate_target"])
    x = [r["rate_target"] for r in runs]
    fig, ax = plt.subplots(figsize=(9, 6))
    for key, label, style in (("p50_ms", "p50", {"color": "C0", "marker": "o"}),
                              ("p99_ms", "p99", {"color": "C1", "marker": "s"}),
                              ("p999_ms", "p99.9", {"color": "C3", "marker": "^"})):
        ax.plot(x, [r[key] for r in runs], label=label, lw=2, ms=7, **style)
    ax.axhline(5.0, color="0.4", ls="--", lw=1, label="target: p99 ≤ 5 ms (at 5,000 records/s)")
    for r in runs:
        if r["rate_achieved"] < 0.95 * r["rate_target"]:
            ax.annotate(f"achieved {r['rate_achieved']:,.0f}/s", (r["rate_target"], r["p999_ms"]),
                        textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)
    ax.set_xscale("log")
    _log_y(ax)
    ax.set_xticks(x, [f"{v:,}" for v in x])
    ax.minorticks_off()
    ax.set_xlabel("offered load (records/s of 100 B, producer acks=1, linger.ms="
                  f"{sweep['config'].get('linger_ms', 1)})")
    ax.set_ylabel("produce-to-consume latency (ms, log scale)")
    ax.set_title("Strata end-to-end latency percentiles against offered load")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left")
    fig.text(0.01, 0.005, _stamp(sweep), fontsize=7, va="bottom", family="monospace")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def make_plots(md_path: Path) -> dict[str, str]:
    """Draw every chart whose input exists next to ``md_path``; {name: path relative to the report}."""
    d = md_path.parent
    img = d / "img"
    made = {}
    t = throughput_chart(_load(md_path.with_suffix(".json")), _load(d / "benchmarks-peers.json"),
                         img / "throughput-vs-record-size.png")
    if t:
        made["throughput"] = str(t.relative_to(d))
    lat = latency_chart(_load(d / "benchmarks-latency-sweep.json"), img / "latency-vs-load.png")
    if lat:
        made["latency"] = str(lat.relative_to(d))
    return made


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"),
                    help="the report; its JSON files are read from, and img/ written, next to it")
    args = ap.parse_args()
    made = make_plots(Path(args.out))
    for name, path in made.items():
        print(f"{name}: {Path(args.out).parent / path}")
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())
