"""The PNG figures of a benchmark document, rendered in memory (matplotlib, optional extra "plots")."""

from __future__ import annotations

import io

import numpy as np

from privcheck.errors import PrivcheckError

__all__ = ["FIGURES", "METHODS", "render_plots"]

FIGURES = {"scaling": "selection_scaling.png", "sigma": "selection_sigma.png", "filter": "selection_filter.png"}
METHODS = ("bon", "privbon", "itp", "privitp")


def render_plots(doc: dict) -> dict[str, bytes]:
    """The PNG figures of a document, rendered in memory: {file name: bytes}."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:                                  # optional dependency (extra "plots")
        raise PrivcheckError(f"matplotlib is required for the plots (pip install 'privcheck[plots]'): {exc}") from exc
    sc = doc["curves"]["scaling"]
    ns = np.array(sc["n"])
    main = repr(sc["main_sigma"])
    colors = {"bon": "tab:red", "privbon": "tab:orange", "itp": "tab:blue", "privitp": "tab:green"}
    labels = {"bon": "BoN", "privbon": "PrivBoN", "itp": "ITP", "privitp": "PrivITP"}

    def series(method, sigma=main):
        return sc[method] if method in ("bon", "itp") else sc[method][sigma]

    def band(ax, curve, color, label, style="-"):
        ax.plot(ns, curve["mean"], style, color=color, marker="o", ms=3, label=label)
        ax.fill_between(ns, curve["ci95"][0], curve["ci95"][1], color=color, alpha=0.2, lw=0)

    files = {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for m in METHODS:
        band(axes[0], series(m)["true"], colors[m], labels[m])
        band(axes[1], series(m)["proxy"], colors[m], labels[m], "-" if m == "bon" else "--")
    for ax, base, title in ((axes[0], sc["base_true"], "true reward r* of the output"),
                            (axes[1], sc["base_proxy"], "proxy reward r̂ of the output")):
        ax.axhline(base, color="grey", lw=1, ls=":", label="π0 (base)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n (candidates per phase)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"expected reward (σ = {sc['main_sigma']}, β = {doc['config']['beta']})")
    axes[0].legend(fontsize=8)
    fig.suptitle("Scaling in n (exact output laws; 95% bootstrap bands over prompts)", fontsize=10)
    files[FIGURES["scaling"]] = _png(fig, plt)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    cmap = plt.get_cmap("viridis")
    for k, s in enumerate(sc["sigma"]):
        col = cmap(k / max(1, len(sc["sigma"]) - 1))
        for ax, m in ((axes[0], "privbon"), (axes[1], "privitp")):
            band(ax, sc[m][repr(s)]["true"], col, f"σ = {s}")
    for ax, m in ((axes[0], "privbon"), (axes[1], "privitp")):
        band(ax, sc["itp"]["true"], "black", "ITP (non-private)", "--")
        band(ax, sc["bon"]["true"], "tab:red", "BoN (non-private)", ":")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n")
        ax.set_title(f"{labels[m]}: true reward vs n across σ")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("expected true reward")
    axes[1].legend(fontsize=7, loc="lower left")
    files[FIGURES["sigma"]] = _png(fig, plt)

    fl = doc["curves"]["filter"]
    sig = np.array(fl["sigma"])
    summ = fl["summary"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    styles = {"filter": ("tab:green", "-", "ex-post filter (provable)"),
              "basic_heuristic": ("tab:purple", "-", "basic composition (heuristic, ε_max at λ̃)"),
              "basic_clamped": ("tab:brown", "--", "basic composition (clamped λ̃, provable)"),
              "replication_unsound": ("grey", ":", "charge-after-run (NOT DP, replication)")}
    for name, (col, ls, lab) in styles.items():
        mean = np.array(summ[name]["answered_mean"])
        sd = np.array(summ[name]["answered_sd"])
        axes[0].errorbar(sig, mean, yerr=sd, color=col, ls=ls, marker="o", ms=4, capsize=3, label=lab)
    axes[0].set_yscale("log")
    axes[0].set_ylabel(f"queries answered (E = {fl['budget']:g}, n = {fl['n']})")
    axes[0].set_title(f"answered queries, mean ± sd over {len(fl['seeds'])} seeds")
    axes[0].legend(fontsize=7)
    for base, col, lab in (("basic_heuristic", "tab:purple", "filter / basic (heuristic)"),
                           ("basic_clamped", "tab:brown", "filter / basic (clamped, provable)")):
        ratio = [np.nan if r is None else r for r in summ["ratio_filter_over"][base]]
        axes[1].plot(sig, ratio, color=col, marker="o", ms=4, label=lab)
    axes[1].axhline(3.0, color="black", lw=1, ls=":", label="≈3x reported by Bhattad & Ray Chowdhury")
    axes[1].axhline(1.0, color="grey", lw=1)
    axes[1].set_ylim(bottom=0)
    axes[1].set_ylabel("ratio of answered queries")
    axes[1].set_title("filter advantage")
    axes[1].legend(fontsize=7)
    for name in ("filter", "basic_heuristic"):
        col, ls, lab = styles[name]
        ht = [np.nan if x is None else x for x in summ[name]["mean_halting_time"]]
        axes[2].plot(sig, ht, color=col, ls=ls, marker="o", ms=4, label=lab)
    axes[2].axhline(fl["n"], color="black", lw=1, ls=":", label="n")
    axes[2].set_ylim(0, fl["n"] * 1.05)
    axes[2].set_ylabel("mean halting time t (accepted queries)")
    axes[2].set_title("halting time")
    axes[2].legend(fontsize=7)
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    for ax in axes:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(sig))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("σ (σ_X = σ_Z = σ/2)")
        ax.grid(alpha=0.3, which="major")
    files[FIGURES["filter"]] = _png(fig, plt)
    return files


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
