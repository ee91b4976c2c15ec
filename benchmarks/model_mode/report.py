"""The model-mode benchmark's table (benchmarks/model_mode/run.py): one column per structured-output mode."""

from __future__ import annotations

from benchmarks.model_mode.texts import text_lines


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _table(results: dict) -> None:
    modes = results["modes"]
    rows = [
        ("run status", lambda r: r["run"]["status"]),
        ("traces judged / total", lambda r: f"{r['run']['traces_judged']} / {r['run']['traces_total']}"),
        ("judge calls (conversations)", lambda r: r["judge"]["conversations"]),
        ("  first reply accepted", lambda r: _pct(r["judge"]["first_valid_share"])),
        ("  accepted after repair", lambda r: _pct(r["judge"]["valid_after_repair_share"])),
        ("  ended on the length limit", lambda r: _pct(r["judge"]["length_share"])),
        ("  failed (by cause)", lambda r: r["judge"]["failed_by_cause"] or "none"),
        ("judge requests", lambda r: r["judge"]["requests"]),
        ("  requests ending on length", lambda r: _pct(r["judge"]["requests_length_share"])),
        ("  requests failed", lambda r: r["judge"]["requests_failed"]),
        ("requests per judged trace", lambda r: f"{r['per_trace']['requests']:.1f}"),
        ("tokens in/out per trace", lambda r: f"{r['per_trace']['input_tokens']:.0f} / "
                                              f"{r['per_trace']['output_tokens']:.0f}"),
        ("requests per judged step", lambda r: f"{r['per_step']['requests']:.2f}"),
        ("tokens in/out per step", lambda r: f"{r['per_step']['input_tokens']:.0f} / "
                                             f"{r['per_step']['output_tokens']:.0f}"),
        ("seconds per trace", lambda r: f"{r['per_trace']['seconds']:.1f}"),
        ("run errors by cause", lambda r: {g["cause"]: g["count"] for g in r["run"]["errors_by_cause"]} or "none"),
        ("naming calls ok / all", lambda r: f"{r['naming']['accepted']} / {r['naming']['conversations']}"),
        ("insights seconds", lambda r: r["insights"].get("seconds_wall", "-")),
        ("'database is locked'", lambda r: r["locked"]["total"]),
        ("probe posts ok / all, max s", lambda r: f"{r['probe']['ok']} / {r['probe']['posts']}, "
                                                  f"{r['probe']['max_seconds']}"),
    ]
    names = list(modes)
    print(f"\nmodel {results['model']} at {results.get('api_base')}; {results['traces']} tau-airline traces per mode")
    print(f"{'structured output':<32}" + "".join(f"{n:>28}" for n in names))
    for label, get in rows:
        cells = []
        for n in names:
            try:
                cells.append(str(get(modes[n])))
            except Exception:  # noqa: BLE001 - a mode that failed early has no such figure
                cells.append(str(modes[n].get("error", "-"))[:26])
        print(f"{label:<32}" + "".join(f"{c:>28}" for c in cells))
    for n in names:
        texts = modes[n].get("texts") or {}
        print(f"\nmodel texts ({n}): shown, asked again, replaced or refused" + (
            f" — {texts['error']}" if "error" in texts else ""))
        for line in text_lines(texts) if "error" not in texts else []:
            print(line)
        for label in (modes[n].get("run") or {}).get("judges_without_verdict") or []:
            print(f"  run failed: {label}")
        titles = modes[n].get("insights", {}).get("names") or []
        print(f"\ninsight names ({n}):" + ("" if titles else " none (no cluster to name)"))
        for item in titles:
            print(f"  [{item['source']}] {item['title']}")
        synthetic = [s for s in modes[n].get("insights", {}).get("synthetic_names") or [] if "medoid" in s]
        if synthetic:
            print(f"names of the hand-written clusters ({n}):")
            for item in synthetic:
                print(f"  [{item['source']}] {item['title']!r}  <- {item['medoid']!r}")
