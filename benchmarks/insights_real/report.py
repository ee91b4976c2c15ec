"""Printing the benchmark's results: per measured set, the header, issue 41's figures, and (for sets that keep their
detail) every insight; then the table over the samplings of one run per task."""

from __future__ import annotations

import statistics
from collections import Counter


def _lift(row: dict) -> str:
    if row["lift"] is None:
        return "lift -"
    low = "-" if row["lift_low"] is None else f"{row['lift_low']:.2f}"
    high = "-" if row["lift_high"] is None else f"{row['lift_high']:.2f}"
    return f"lift {row['lift']:.2f} [{low}, {high}]"


def _ordered(rows: dict[int, dict]) -> list[dict]:
    return sorted(rows.values(), key=lambda r: (r["is_other"], r["association"] == "not_associated",
                                                -r["traces"], r["level"], r["id"]))


def print_top(top: dict) -> None:
    m, g = top["machine"], top["git"]
    print(f"\n== insights_real {top['date']} on {m['host']} ({m['cpus']} CPUs, load before {m['load_before']}), "
          f"git {g['head']}\n   command: {top['command']}")
    if g["status_short"]:
        print("   working tree: " + "; ".join(g["status_short"]))


def _print_header(result: dict) -> None:
    print(f"\n== {result['name']}")
    i, d = result["ingest"], result["timing"]
    print(f"   imported {i['files']} files in {i['seconds']} s; diagnosis {d['judge_seconds']} s, insights build "
          f"{d['build_seconds']} s; judges {result['run']['judges']}; run status {result['run']['status']}")
    fb = result["run"]["feedback"]
    print("   feedback by judge (fail verdicts / all): " + ", ".join(
        f"{j} {v['fail']}/{v['all']}" for j, v in sorted(fb.items())))
    c = result["run"].get("contrastive") or {}
    if c:
        print(f"   contrastive: {c.get('status')}{' (' + c['reason'] + ')' if c.get('reason') else ''}; "
              f"{c.get('failing')} failing / {c.get('succeeding')} succeeding traces, {c.get('features')} features, "
              f"{c.get('tested')} tested, {len(c.get('findings') or [])} findings")
        # "suggestive": the strongest hypotheses that did not pass the correction, when the judge reports them.
        for key in ("findings", "suggestive"):
            for f in (c.get(key) or [])[:8]:
                p, q = f.get("p_value", f.get("p")), f.get("q_value", f.get("q"))
                print(f"     {key[:-1] if key == 'findings' else key} [{f.get('node')}] {f.get('statement')} "
                      f"(p={_num(p)}, q={_num(q)})")


def _num(value) -> str:
    return f"{value:.2g}" if isinstance(value, (int, float)) else str(value)


def print_tau_detail(result: dict) -> None:
    _print_header(result)
    s = result["score"]
    print(f"   traces {s['traces']} {s['outcomes']}" + (f"; task id mismatches {s['task_mismatches']}"
                                                       if s["task_mismatches"] else ""))
    print("\n   Coverage of failing runs with a labelled write-action difference (eligible insight = associated "
          "or unknown, not an 'other' bucket):")
    for split in ("report", "tune"):
        c = s["coverage"][split]
        kinds = ", ".join(f"{k} {v['covered']}/{v['runs']}" for k, v in c["by_kind"].items())
        head = "REPORT (tasks 25-49, headline)" if split == "report" else "tune   (tasks 0-24)"
        share = "-" if c["share"] is None else f"{c['share'] * 100:.1f}%"
        print(f"   {head}: {c['covered']}/{c['runs']} = {share}   [{kinds}]")
        print(f"      counting every insight incl. 'other' buckets and not-associated: {c['covered_counting_all']}; "
              f"any statement pointing at a difference (judges' reach): {c['judges_reach']}; runs with no "
              f"statement at all: {c['with_no_statement']}")
    checks = s["checks"]
    o = result["open_list"]
    print(f"\n   insights 'unknown' (goal 0): {len(checks['unknown'])} {checks['unknown']}")
    print(f"   associated: {len(checks['associated'])}; of them lift interval not above 1 or > 1/5 of traces "
          f"succeeding (goal 0): {len(checks['associated_not_above_1_or_over_a_fifth_succeeding'])} "
          f"{checks['associated_not_above_1_or_over_a_fifth_succeeding']}")
    print(f"   open list (insight_list status=open, goal <= 15): {o['open']} ({o['open_node']} node, "
          f"{o['open_system']} system, {o['open'] - o['open_without_other']} 'other' buckets)")
    print(f"   open insights marked by-design (goal 0): {len(o['open_by_design'])} {o['open_by_design']}")
    print("   overview Top insights: " + ("; ".join(f"#{t['id']} {t['title']} ({t['association']})"
                                                    for t in o["top"]) or "none"))
    print("\n   insights (id level [node] title | failing/succeeding traces | lift | association | label kinds "
          "covered report/tune | ticket):")
    for r in _ordered(result["insights"]):
        covers = r.get("covers") or {}
        kinds = " / ".join(",".join(f"{k}x{n}" for k, n in sorted(covers.get(sp, {}).items())) or "-"
                           for sp in ("report", "tune"))
        print(f"   #{r['id']} {r['level']} [{r['node']}] {r['title']}{_flags(r)}"
              f"\n        {r['failing']}/{r['succeeding']} traces | {_lift(r)} | {r['association']} | {kinds} | "
              f"{_ticket(r)} | judges {r['judges']}"
              + (f" | members on tools {r['member_tools']}" if r["member_tools"] else ""))


def _flags(row: dict) -> str:
    flags = [name for name, on in (("other bucket", row["is_other"]), ("by design", row["by_design"]),
                                    (row["status"], row["status"] != "open")) if on]
    return f" ({', '.join(flags)})" if flags else ""


def _ticket(row: dict) -> str:
    if row["ticket"] and not row["ticket"]["merged_into"]:
        return f"ticket #{row['ticket']['id']} {row['ticket']['status']}"
    if row["ticket_via_system"]:
        return f"tracked by system ticket #{row['ticket_via_system']['id']} {row['ticket_via_system']['status']}"
    if row["ticket"]:
        return f"ticket #{row['ticket']['id']} {row['ticket']['status']} (merged)"
    return "no ticket"


def print_whowhen_detail(result: dict) -> None:
    _print_header(result)
    rows = [r for r in result["insights"].values() if r["review"] != "rejected"]
    patterns = [r for r in rows if not r["is_other"]]
    o = result["open_list"]
    print(f"   insights: {len(patterns)} patterns + {len(rows) - len(patterns)} 'other' buckets; association of the "
          f"patterns: {dict(Counter(r['association'] for r in patterns))}; patterns with a ticket (own or a system "
          f"ticket's): {sum(1 for r in patterns if _ticket(r) != 'no ticket')}; tickets: {result['tickets']}")
    print(f"   open list: {o['open']}; Top insights: {len(o['top'])}")
    print("\n   insights (id level [node] title | traces | lift | association | ticket):")
    for r in _ordered(result["insights"]):
        print(f"   #{r['id']} {r['level']} [{r['node']}] {r['title']}{_flags(r)}"
              f"\n        {r['traces']} traces ({r['failing']} failing) | {_lift(r)} | {r['association']} | "
              f"{_ticket(r)}")


def _share(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def print_figures(result: dict) -> None:
    """Issue 41's two figures of one measured set, per split, with the tickets behind the precision."""
    o = result["open_list"]
    print(f"   open list {o['open']} ({o['open'] - o['open_without_other']} 'other' buckets); tickets "
          f"{result['tickets']}")
    for split, f in result["figures"].items():
        print(f"   [{split}] coverage {f['covered']}/{f['runs']} = {_share(f['coverage'])} (judges' reach, any "
              f"insight: {f['reached']}); ticket precision "
              f"{f['tickets_real']}/{f['tickets_scored']} = {_share(f['ticket_precision'])} "
              f"({f['tickets']} open tickets, {f['tickets'] - f['tickets_scored']} with no statement in a "
              f"labelled failing run)")
        for t in f["ticket_rows"]:
            if t["statements"]:
                print(f"        {'real' if t['real'] else 'NOT '} {t['hit']}/{t['statements']} #{t['insight']} "
                      f"{t['title'][:110]}")
        v = f.get("inconclusive")
        if v:
            print(f"   [{split}] variant, inconclusive insights (not associated, lift > 1, interval includes 1) "
                  f"counted eligible and ticketed: coverage {v['covered']}/{f['runs']} = {_share(v['coverage'])}; "
                  f"ticket precision {v['tickets_real']}/{v['tickets_scored']} = {_share(v['ticket_precision'])} "
                  f"({v['insights']} inconclusive insights added)")
            for t in v["rows"]:
                if t["statements"]:
                    print(f"        {'real' if t['real'] else 'NOT '} {t['hit']}/{t['statements']} #{t['insight']} "
                          f"lift {t['lift']:.2f} [{t['lift_low']:.2f}, -] {t['title'][:90]}")


def aggregate(samples: list[dict]) -> dict:
    """Mean, spread (population standard deviation) and range of the figures over the samplings, per split."""
    out = {}
    splits = samples[0]["figures"].keys() if samples else []
    for split in splits:
        figures = [s["figures"][split] for s in samples]
        row = {}
        for key in ("coverage", "ticket_precision", "tickets", "tickets_scored", "runs"):
            values = [f[key] for f in figures if f[key] is not None]
            row[key] = {"mean": round(statistics.fmean(values), 4) if values else None,
                        "sd": round(statistics.pstdev(values), 4) if len(values) > 1 else 0.0,
                        "min": min(values) if values else None, "max": max(values) if values else None,
                        "values": [f[key] for f in figures]}
        variant = [s["figures"][split].get("inconclusive") or {} for s in samples]
        for key in ("coverage", "ticket_precision", "tickets_scored"):
            values = [v[key] for v in variant if v.get(key) is not None]
            row[f"inconclusive_{key}"] = {
                "mean": round(statistics.fmean(values), 4) if values else None,
                "sd": round(statistics.pstdev(values), 4) if len(values) > 1 else 0.0,
                "min": min(values) if values else None, "max": max(values) if values else None,
                "values": [v.get(key) for v in variant]}
        opened = [s["open_list"]["open"] for s in samples]
        row["open"] = {"mean": round(statistics.fmean(opened), 2), "min": min(opened), "max": max(opened),
                       "values": opened}
        out[split] = row
    return out


def print_aggregate(name: str, summary: dict) -> None:
    print(f"\n== {name}: mean ± sd [min, max] over the samplings")
    for split, row in summary.items():
        c, p, t = row["coverage"], row["ticket_precision"], row["tickets_scored"]
        print(f"   [{split}] coverage {_share(c['mean'])} ± {_share(c['sd'])} [{_share(c['min'])}, "
              f"{_share(c['max'])}]; ticket precision {_share(p['mean'])} ± {_share(p['sd'])} "
              f"[{_share(p['min'])}, {_share(p['max'])}]; scored tickets {t['values']}; open tickets "
              f"{row['tickets']['values']}; open list {row['open']['values']}")
        c, p, t = row["inconclusive_coverage"], row["inconclusive_ticket_precision"], row["inconclusive_tickets_scored"]
        print(f"   [{split}] variant, inconclusive counted eligible: coverage {_share(c['mean'])} ± {_share(c['sd'])} "
              f"[{_share(c['min'])}, {_share(c['max'])}]; ticket precision {_share(p['mean'])} ± {_share(p['sd'])} "
              f"[{_share(p['min'])}, {_share(p['max'])}]; scored tickets {t['values']}")
